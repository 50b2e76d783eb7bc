from .base import EncoderWrapperConfig
from .configuration_kala import DEFAULT_KFM_LAYERS, KalaConfig

__all__ = ["EncoderWrapperConfig", "KalaConfig", "DEFAULT_KFM_LAYERS"]
