from .assets import KnowledgeAssets
from .card import build_model_card, write_model_card

__all__ = ["KnowledgeAssets", "build_model_card", "write_model_card"]
