"""Shared configuration base: a keplm config that wraps (nests) the text encoder's own config."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, PreTrainedConfig

try:  # transformers >= 5.20 declares nested configs through SubConfigSpec
    from transformers.configuration_utils import SubConfigSpec

    _ENCODER_SUBCONFIG: dict[str, Any] = {
        "sub_configs_defaults": {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}
    }
except ImportError:  # transformers 5.0 - 5.19
    _ENCODER_SUBCONFIG = {"sub_configs": {"encoder_config": AutoConfig}}


def as_encoder_config(value: PreTrainedConfig | dict | None) -> PreTrainedConfig:
    """Turn a nested encoder config given as a dict (e.g. from config.json) into its config class."""
    if value is None:
        return AutoConfig.for_model("bert")
    if isinstance(value, PreTrainedConfig):
        return value
    if isinstance(value, dict):
        value = dict(value)
        model_type = value.pop("model_type", None)
        if model_type is None:
            raise ValueError("encoder_config dict has no 'model_type'; pass the encoder's config (e.g. BertConfig)")
        return AutoConfig.for_model(model_type, **value)
    raise ValueError(f"encoder_config must be a PreTrainedConfig or a dict, got {type(value).__name__}")


class EncoderWrapperConfig(PreTrainedConfig):
    """Base for keplm configs: nests the text encoder's config as ``encoder_config``.

    ``hidden_size`` and ``num_hidden_layers`` mirror the encoder's so tools that read them (Trainer,
    DeepSpeed, PEFT) keep working.
    """

    locals().update(_ENCODER_SUBCONFIG)

    encoder_config: PreTrainedConfig | dict | None = None

    def __post_init__(self, **kwargs):
        self.encoder_config = as_encoder_config(self.encoder_config)
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        return self.encoder_config.hidden_size

    @property
    def num_hidden_layers(self) -> int:
        return self.encoder_config.num_hidden_layers

    def resolve_layer_indices(self, layers: list[int]) -> list[int]:
        """Map layer indices that may count from the end (-1 = last layer) to sorted 0-based indices."""
        depth = self.num_hidden_layers
        resolved = []
        for layer in layers:
            index = layer + depth if layer < 0 else layer
            if not 0 <= index < depth:
                raise ValueError(f"layer index {layer} is out of range for an encoder with {depth} layers")
            resolved.append(index)
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"layer indices {layers} name the same layer twice (encoder depth {depth})")
        return sorted(resolved)
