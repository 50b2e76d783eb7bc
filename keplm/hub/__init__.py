from .assets import KnowledgeAssets

__all__ = ["KnowledgeAssets"]
