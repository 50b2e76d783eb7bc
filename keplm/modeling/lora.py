"""LoRA (peft) on a keplm model's encoders, while its knowledge modules and task head train fully.

The encoders get low-rank adapters on their attention projections; every other module that holds parameters of
its own (KALA's entity memory, relation embeddings, KFM and GNN layers, extra layers, the task head;
Roof-Transformer's fusion; TRELM's injection projection and MLM head) is peft's ``modules_to_save``: trained fully
and saved with the adapter. An adapter folder (or Hub repo) holds peft's ``adapter_config.json`` /
``adapter_model.safetensors``, the keplm config (the architecture to rebuild) and ``knowledge/``;
:func:`load_lora` rebuilds the model around its base encoder checkpoint and applies the adapter.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from transformers import AutoConfig

from keplm.file_utils import pinned_location
from keplm.knowledge.assets import KnowledgeAssets, save_knowledge_assets
from keplm.push_utils import push_folder

from .base import KeplmPreTrainedModel, _prefixed

#: attention projections of BERT-like encoders that get adapters by default
DEFAULT_TARGET_MODULES = ("query", "value")


def fully_trained_modules(model: KeplmPreTrainedModel) -> list[str]:
    """Names of the outermost non-encoder modules that hold parameters of their own (peft's ``modules_to_save``).

    Modules are wrapped where they hold parameters, not at containers such as ``ModuleDict``: a wrapped module is
    only called, never indexed, so the model's code runs unchanged around the wrappers."""
    encoders = tuple(f"{_prefixed(model, name)}" for name in model.named_encoders())
    names: list[str] = []
    for name, module in model.named_modules():
        if not name or any(name == e or name.startswith(f"{e}.") for e in encoders):
            continue
        if any(name.startswith(f"{wrapped}.") for wrapped in names):
            continue
        if next(module.parameters(recurse=False), None) is not None:
            names.append(name)
    return names


def add_lora(model: KeplmPreTrainedModel, r: int = 8, alpha: int = 16, dropout: float = 0.05,
             target_modules: tuple[str, ...] | list[str] | None = None, base_model_name_or_path: str | None = None):
    """Wrap ``model`` in a peft ``PeftModel``: LoRA of rank ``r`` on the encoders' ``target_modules`` (module-name
    suffixes, default query and value projections), the knowledge modules and head trained fully. The encoder
    weights are frozen. ``base_model_name_or_path`` (default: where the encoders were loaded from) is recorded
    so that :func:`load_lora` can rebuild the model."""
    from peft import LoraConfig, get_peft_model

    targets = tuple(target_modules or DEFAULT_TARGET_MODULES)
    encoders = "|".join(re.escape(_prefixed(model, name)) for name in model.named_encoders())
    pattern = rf"^(?:{encoders})\..*\.(?:{'|'.join(re.escape(t) for t in targets)})$"
    if not any(re.match(pattern, name) for name, _ in model.named_modules()):
        raise ValueError(f"no encoder module ends with one of {list(targets)}: choose --lora_target_modules among the "
                         "encoder's Linear layers (BERT: query, key, value, dense)")
    if base_model_name_or_path is None:
        sources = set(getattr(model, "loading_report", {}).get("base_model", {}).values())
        base_model_name_or_path = sources.pop() if len(sources) == 1 else model.config.name_or_path or None
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=pattern,
                        modules_to_save=fully_trained_modules(model), base_model_name_or_path=base_model_name_or_path)
    model.config.architectures = [type(model).__name__]
    if base_model_name_or_path and not model.__dict__.get("name_or_path"):
        model.name_or_path = str(base_model_name_or_path)  # peft records the base from the model's name_or_path
    return get_peft_model(model, config)


def save_lora(peft_model, save_directory: str | os.PathLike) -> None:
    """Write the adapter (LoRA weights + fully trained modules), the keplm config and the knowledge assets."""
    peft_model.save_pretrained(save_directory)
    base = peft_model.get_base_model()
    base.config.architectures = [type(base).__name__]
    base.config.save_pretrained(save_directory)
    if getattr(base, "knowledge_assets", None) is not None:
        save_knowledge_assets(save_directory, base.knowledge_assets)


def push_lora(peft_model, repo_id: str, **kwargs):
    """Upload what :func:`save_lora` writes to ``repo_id`` in one commit (``kwargs`` as ``push_to_hub``'s), with
    keplm's model card (knowledge section included) instead of peft's template card."""
    base = peft_model.get_base_model()

    def save(folder: str) -> None:
        save_lora(peft_model, folder)
        Path(folder, "README.md").unlink(missing_ok=True)  # peft's template (library_name peft, no knowledge)

    return push_folder(save, repo_id, default_message="Upload LoRA adapter",
                       write_card=lambda folder: base.write_model_card(folder, repo_id, model=peft_model), **kwargs)


def load_lora(adapter_name_or_path: str | os.PathLike, base_model_name_or_path: str | None = None,
              dtype: torch.dtype = torch.float32, **kwargs):
    """Rebuild the keplm model of an adapter around its base encoder checkpoint and apply the adapter; returns the
    ``PeftModel``. ``base_model_name_or_path`` overrides the base recorded in the adapter."""
    from peft import PeftConfig, PeftModel

    location = pinned_location(adapter_name_or_path, kwargs)
    config = AutoConfig.from_pretrained(adapter_name_or_path, **location)
    peft_config = PeftConfig.from_pretrained(adapter_name_or_path, **location)
    base = base_model_name_or_path or peft_config.base_model_name_or_path
    if not base:
        raise ValueError(f"{adapter_name_or_path} records no base model: pass base_model_name_or_path")
    model_class = _model_class(config)
    model = model_class(config)
    model.load_base_encoders(base, dtype=dtype)
    if getattr(config, "uses_knowledge_assets", False):
        model.set_knowledge_assets(KnowledgeAssets.from_pretrained(adapter_name_or_path, **location))
    return PeftModel.from_pretrained(model.to(dtype), adapter_name_or_path, **location)


def _model_class(config):
    """The keplm model class named in ``config.architectures``."""
    from keplm import modeling

    names = config.architectures or []
    for name in names:
        if hasattr(modeling, name):
            return getattr(modeling, name)
    raise ValueError(f"the adapter's config names no keplm model class (architectures={names})")


__all__ = ["add_lora", "save_lora", "push_lora", "load_lora", "fully_trained_modules", "DEFAULT_TARGET_MODULES"]
