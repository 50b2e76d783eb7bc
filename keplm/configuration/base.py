"""Shared configuration base: a keplm config nests the configs of one or several named encoders."""

from __future__ import annotations

import copy
import os
from typing import Any

from transformers import AutoConfig, PreTrainedConfig

try:  # transformers >= 5.20 declares nested configs through SubConfigSpec
    from transformers.configuration_utils import SubConfigSpec
except ImportError:  # transformers 5.0 - 5.19
    SubConfigSpec = None


def encoder_subconfigs(*names: str) -> dict[str, Any]:
    """Class attributes declaring ``<name>_config`` of every named encoder as a nested (sub-)config.

    Use inside a config class body: ``locals().update(encoder_subconfigs("encoder", "knowledge_encoder"))``; the
    first encoder is required, the others are optional (``None`` = a copy of the first encoder's config).
    """
    if SubConfigSpec is None:
        return {"sub_configs": {f"{name}_config": AutoConfig for name in names}}
    return {
        "sub_configs_defaults": {
            f"{name}_config": SubConfigSpec(config_class=AutoConfig, model_type="bert", optional=i > 0)
            for i, name in enumerate(names)
        }
    }


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
            raise ValueError("encoder config dict has no 'model_type'; pass the encoder's config (e.g. BertConfig)")
        return AutoConfig.for_model(model_type, **value)
    raise ValueError(f"an encoder config must be a PreTrainedConfig or a dict, got {type(value).__name__}")


class KeplmConfig(PreTrainedConfig):
    """Base of keplm configs: the configs of the model's named encoders, ``<name>_config`` for each name in
    ``encoder_names`` (one encoder: ``encoder_config``; Roof-Transformer: ``encoder_config`` and
    ``knowledge_encoder_config``).

    ``hidden_size`` and ``num_hidden_layers`` mirror the first encoder's, so tools that read them (Trainer,
    DeepSpeed, PEFT) keep working. ``card_settings`` names the fields the model card lists.
    """

    #: names of the model's encoders; each has a nested config ``<name>_config``
    encoder_names = ("encoder",)
    #: config fields listed in the model card's settings table
    card_settings = ()

    locals().update(encoder_subconfigs("encoder"))

    encoder_config: PreTrainedConfig | dict | None = None
    #: fingerprint of the tokenizer the model was trained with (``keplm.tokenization.tokenizer_fingerprint``; set by
    #: keplm's Trainer), so a processor with another tokenizer is refused where the two meet
    tokenizer_hash: str | None = None

    def __post_init__(self, **kwargs):
        first = f"{self.encoder_names[0]}_config"
        setattr(self, first, as_encoder_config(getattr(self, first)))
        for name in self.encoder_names[1:]:
            value = getattr(self, f"{name}_config")
            value = copy.deepcopy(getattr(self, first)) if value is None else value
            setattr(self, f"{name}_config", as_encoder_config(value))
        super().__post_init__(**kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """As the stock ``from_pretrained``, but a checkpoint of another model type (a plain encoder such as
        ``bert-base-uncased`` given to ``KalaForTokenClassification.from_pretrained``) is a ValueError that names it and
        ``from_base_pretrained``, not an AttributeError from setting a field this config derives; a local folder
        without ``config.json`` is a FileNotFoundError, not the default config (which transformers would build)."""
        saved_config = cls.get_config_dict(pretrained_model_name_or_path, **kwargs)[0]
        if not saved_config and os.path.isdir(pretrained_model_name_or_path):  # transformers would take the defaults
            raise FileNotFoundError(
                f"{pretrained_model_name_or_path} has no config.json: it holds no saved model, or a save into it was "
                "interrupted (keplm moves config.json in last); save the model there again"
            )
        saved = saved_config.get("model_type")
        if saved and getattr(cls, "model_type", "") and saved != cls.model_type:
            raise ValueError(
                f"{pretrained_model_name_or_path} holds a {saved!r} config, not a {cls.model_type!r} one: to build a "
                f"{cls.model_type} model on a plain encoder checkpoint use the model class's from_base_pretrained("
                f"{str(pretrained_model_name_or_path)!r}, knowledge_assets=...); to load a checkpoint by its own type "
                "use the Auto classes"
            )
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def to_diff_dict(self) -> dict[str, Any]:
        """The stock diff, without the ``_name_or_path`` of the nested encoder configs (transformers drops the top
        level's but keeps theirs: the absolute path of a local base encoder in every saved or pushed config.json)."""
        output = super().to_diff_dict()
        for name in self.encoder_names:
            if isinstance(output.get(f"{name}_config"), dict):
                output[f"{name}_config"].pop("_name_or_path", None)
        return output

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The text encoder's config, as a composite transformers model answers: ``resize_token_embeddings`` records
        the new vocabulary size there (a reload then builds it), and ``generate()`` reads a wrapped encoder-decoder's
        caches and special tokens from it."""
        return self.encoder_config.get_text_config(decoder=decoder, encoder=encoder)

    def encoder_configs(self) -> dict[str, PreTrainedConfig]:
        """``{encoder name: its config}`` in ``encoder_names`` order."""
        return {name: getattr(self, f"{name}_config") for name in self.encoder_names}

    @property
    def hidden_size(self) -> int:
        return self.encoder_config.hidden_size

    @property
    def num_hidden_layers(self) -> int:
        return self.encoder_config.num_hidden_layers

    @property
    def max_text_length(self) -> int | None:
        """Most text tokens one input may hold: the text encoder's positions (a method reading a text in several windows
        says more)."""
        return getattr(self.encoder_config, "max_position_embeddings", None)

    @property
    def uses_knowledge(self) -> bool:
        """Whether the model reads knowledge when it predicts (linked facts, entity vectors, verbalised triples): the
        processor then links its inputs, and the knowledge checks have something to edit. A method says when."""
        return False

    @property
    def uses_knowledge_assets(self) -> bool:
        """Whether the model reads knowledge assets (``knowledge/``) saved beside its weights."""
        return False

    @property
    def reads_graph(self) -> bool:
        """Whether the model's inputs include batched graphs (``node_entity_ids``, ``edge_index``, ...)."""
        return False

    def resolve_layer_indices(self, layers: list[int], depth: int | None = None) -> list[int]:
        """Map layer indices that may count from the end (-1 = last layer) to sorted 0-based indices."""
        depth = self.num_hidden_layers if depth is None else depth
        resolved = []
        for layer in layers:
            index = layer + depth if layer < 0 else layer
            if not 0 <= index < depth:
                raise ValueError(f"layer index {layer} is out of range for an encoder with {depth} layers")
            resolved.append(index)
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"layer indices {layers} name the same layer twice (encoder depth {depth})")
        return sorted(resolved)


__all__ = ["KeplmConfig", "encoder_subconfigs", "as_encoder_config"]
