from .base import KeplmConfig
from .configuration_kala import DEFAULT_KFM_LAYERS, KalaConfig
from .configuration_relation_extraction import RelationExtractionConfig
from .configuration_roof_transformer import RoofTransformerConfig
from .configuration_trelm import TrelmConfig

__all__ = [
    "KeplmConfig",
    "KalaConfig",
    "DEFAULT_KFM_LAYERS",
    "RelationExtractionConfig",
    "RoofTransformerConfig",
    "TrelmConfig",
]
