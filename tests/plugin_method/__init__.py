"""ToyKG, a fourth method that lives in these three files only (config, model, processor) and registers itself:
the proof that a method needs no edit of keplm's shared files (tests/test_plugin_method.py)."""

from .configuration_toy_kg import ToyKgConfig
from .modeling_toy_kg import ToyKgForTokenClassification
from .processing_toy_kg import ToyKgProcessor

__all__ = ["ToyKgConfig", "ToyKgForTokenClassification", "ToyKgProcessor"]
