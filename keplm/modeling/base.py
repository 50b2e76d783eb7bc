"""Pieces every keplm model shares: wrapping a stock HF encoder, loading it from a base checkpoint, and
saving/loading the knowledge assets (vocabularies, KG) beside the weights."""

from __future__ import annotations

import logging
import os

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedModel

from keplm.hub.assets import KnowledgeAssets

logger = logging.getLogger(__name__)

_HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only")


def build_encoder(encoder_config) -> PreTrainedModel:
    """A stock HF encoder (BERT, RoBERTa, ELECTRA, ...) from its config, without a pooler where possible."""
    try:
        return AutoModel.from_config(encoder_config, add_pooling_layer=False)
    except TypeError:
        return AutoModel.from_config(encoder_config)


def encoder_layers(encoder: nn.Module, depth: int) -> nn.ModuleList:
    """The encoder's list of transformer blocks (``encoder.layer`` for BERT-likes)."""
    for module in encoder.modules():
        if isinstance(module, nn.ModuleList) and len(module) == depth:
            return module
    raise ValueError(f"could not find the {depth} transformer layers of {type(encoder).__name__}")


def layer_norms(layer: nn.Module) -> list[nn.LayerNorm]:
    """The two LayerNorms of a post-LN transformer block, in execution order (after attention, after FFN)."""
    norms = [m for m in layer.modules() if isinstance(m, nn.LayerNorm)]
    if len(norms) != 2:
        raise ValueError(
            f"{type(layer).__name__} has {len(norms)} LayerNorms; knowledge modulation needs a post-LN block with two"
        )
    return norms


def check_index_range(tensor: torch.Tensor | None, low: int, high: int, message: str) -> None:
    """ValueError(message.format(low=low, high=high)) if a value lies outside ``[low, high)``; checked only where
    it costs no device sync or graph break (CPU tensors, not under ``torch.compile``). The collator checks
    GPU-bound batches. ``message`` is a template formatted only on failure: formatting a size such as
    ``node_entity_ids.shape[0]`` eagerly would make torch.compile specialise on it and recompile every batch."""
    if tensor is None or not tensor.numel() or tensor.device.type != "cpu" or torch.compiler.is_compiling():
        return
    if int(tensor.min()) < low or int(tensor.max()) >= high:
        raise ValueError(message.format(low=low, high=high))


class KeplmPreTrainedModel(PreTrainedModel):
    """Base of keplm models: knowledge assets travel with ``save_pretrained``/``from_pretrained``/``push_to_hub``."""

    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    #: attribute holding the wrapped HF encoder inside the base model
    encoder_attribute = "encoder"
    #: losses are per-batch means: the Trainer must scale them for gradient accumulation itself
    accepts_loss_kwargs = False

    knowledge_assets: KnowledgeAssets | None = None

    def requires_knowledge_assets(self) -> bool:
        return True

    # ------------------------------------------------------------------ saving / loading
    def save_pretrained(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.knowledge_assets is not None and kwargs.get("is_main_process", True):
            self.knowledge_assets.save_pretrained(save_directory)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        hub_kwargs = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        if isinstance(model, KeplmPreTrainedModel) and model.requires_knowledge_assets():
            model.set_knowledge_assets(KnowledgeAssets.from_pretrained(pretrained_model_name_or_path, **hub_kwargs))
        return loaded

    def set_knowledge_assets(self, assets: KnowledgeAssets) -> None:
        """Attach vocabularies/KG; their sizes must match the model's tables."""
        self.check_knowledge_assets(assets)
        self.knowledge_assets = assets

    def check_knowledge_assets(self, assets: KnowledgeAssets) -> None:  # overridden per model
        return None

    @classmethod
    def from_base_pretrained(
        cls,
        base_model_name_or_path: str | os.PathLike,
        knowledge_assets: KnowledgeAssets | None = None,
        dtype: torch.dtype = torch.float32,
        **config_kwargs,
    ):
        """Build this model around a pretrained encoder (a local directory or Hub id, e.g. MiniLM or BERT).

        The encoder keeps its pretrained weights; every other module is newly initialised, and the report of
        what is new is logged and kept in ``model.loading_report``.
        """
        encoder_config = AutoConfig.from_pretrained(base_model_name_or_path)
        config_kwargs = cls.config_kwargs_from_assets(knowledge_assets) | config_kwargs
        config = cls.config_class(encoder_config=encoder_config, **config_kwargs)
        model = cls(config)
        pretrained = AutoModel.from_pretrained(base_model_name_or_path, dtype=dtype)
        encoder = getattr(model.base_model, cls.encoder_attribute)
        missing, unexpected = encoder.load_state_dict(pretrained.state_dict(), strict=False)
        unexpected = [k for k in unexpected if not k.startswith("pooler.")]
        if unexpected:
            raise ValueError(f"{base_model_name_or_path} does not fit the encoder: unexpected weights {unexpected[:5]}")
        new_modules = sorted(
            {name.split(".")[0] if not name.startswith(model.base_model_prefix) else ".".join(name.split(".")[:2])
             for name, _ in model.named_parameters()
             if not name.startswith(f"{model.base_model_prefix}.{cls.encoder_attribute}.")}
        )
        model.loading_report = {"base_model": str(base_model_name_or_path), "newly_initialized": new_modules,
                                "encoder_missing": list(missing)}
        logger.warning(
            "Built %s on %s: newly initialised modules %s%s", cls.__name__, base_model_name_or_path, new_modules,
            f"; encoder weights missing from the checkpoint: {list(missing)}" if missing else "",
        )
        if knowledge_assets is not None:
            model.set_knowledge_assets(knowledge_assets)
        return model.to(dtype)

    @classmethod
    def config_kwargs_from_assets(cls, assets: KnowledgeAssets | None) -> dict:
        return {}
