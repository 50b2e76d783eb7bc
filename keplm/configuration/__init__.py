from .base import EncoderWrapperConfig
from .configuration_kala import DEFAULT_KFM_LAYERS, KalaConfig
from .configuration_relation_extraction import RelationExtractionConfig

__all__ = ["EncoderWrapperConfig", "KalaConfig", "DEFAULT_KFM_LAYERS", "RelationExtractionConfig"]
