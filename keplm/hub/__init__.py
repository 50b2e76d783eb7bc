"""Model cards (and, with them, what a model publishes on the Hub), shared by every keplm model."""

from .card import build_model_card, write_model_card

__all__ = ["build_model_card", "write_model_card"]
