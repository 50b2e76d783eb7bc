"""LoRA (peft) on a keplm model's encoders, while its knowledge modules and task head train fully.

The encoders get low-rank adapters on their attention projections; every other module that holds parameters of
its own (KALA's entity memory, relation embeddings, KFM and GNN layers, extra layers, the task head;
Roof-Transformer's fusion; TRELM's injection projection and MLM head) is peft's ``modules_to_save``: trained fully
and saved with the adapter. An adapter folder (or Hub repo) holds peft's ``adapter_config.json`` /
``adapter_model.safetensors``, the keplm config (the architecture to rebuild), ``knowledge/`` and
``keplm_adapter.json`` (the base encoder checkpoint and a digest of its weights); :func:`load_lora` rebuilds the
model around that encoder, warns when the encoder's weights are not the recorded ones, and applies the adapter. The
model class's ``from_pretrained`` and its Auto class return that model with the adapter merged
(:func:`load_merged_adapter`).

Why the base encoder has a file of its own: transformers' Auto classes, given a Hub repo with ``adapter_config.json``,
load the model that file's ``base_model_name_or_path`` names before any keplm code runs. For a plain encoder there
that is the wrong architecture (a ``BertModel``, and peft's ``NoMatchingPeftModuleError``), so an adapter saved for a
repo (:func:`push_lora`, the Trainer's push) names the adapter's own repo there: the Auto class then reads the keplm
config of the repo and the keplm class loads encoder + adapter.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model
from transformers import AutoConfig
from transformers.utils import find_adapter_config_file, has_file

from keplm.file_utils import pinned_location, portable_checkpoint, resolve_checkpoint, resolve_file
from keplm.io_utils import read_json, write_json_whole
from keplm.knowledge.assets import KnowledgeAssets, save_knowledge_assets
from keplm.push_utils import MODEL_FILES, push_folder
from keplm.registration import auto_class_name, registered_model_class

from .families import encoder_prefix

if TYPE_CHECKING:
    from .base import KeplmPreTrainedModel

logger = logging.getLogger(__name__)
#: attention projections of BERT-like encoders that get adapters by default
DEFAULT_TARGET_MODULES = ("query", "value")
#: the adapter's base encoder checkpoint, as keplm records it (``{"base_encoder": ...}``)
BASE_ENCODER_FILE = "keplm_adapter.json"
#: parts of peft's parameter names that are the adapter's own, not the base encoder's
ADAPTER_NAME_PARTS = re.compile("lora_|modules_to_save|original_module")


def encoder_weights_digest(model: KeplmPreTrainedModel, dtype: str | None = None) -> dict | None:
    """``{"dtype", "sha256"}`` of the base encoders' weights in ``model`` (with or without peft's wrappers: adapter
    weights and fully trained modules left out, ``base_layer`` names unwrapped; weights the base checkpoint lacked
    left out too, newly initialised: the loading report warns about them, and the adapter trains them fully or the
    rebuilt model differs anyway), in ``dtype`` (default: the weights' own), so an adapter can tell whether it is
    applied to the encoder it was trained on. None for weights not held here (sharded)."""
    missing = (getattr(model, "loading_report", None) or {}).get("encoder_missing", {})
    digest = hashlib.sha256()
    for name, encoder in sorted(model.named_encoders().items()):
        for key, tensor in sorted(encoder.state_dict().items()):
            if ADAPTER_NAME_PARTS.search(key) or key in missing.get(name, ()):
                continue
            if not tensor.numel():
                return None
            if tensor.is_floating_point():
                dtype = dtype or str(tensor.dtype).removeprefix("torch.")
                tensor = tensor.to(getattr(torch, dtype))
            digest.update(f"{name}.{key.replace('.base_layer', '')}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return {"dtype": dtype, "sha256": digest.hexdigest()}


def fully_trained_modules(model: KeplmPreTrainedModel) -> list[str]:
    """Names of the outermost non-encoder modules that hold parameters of their own (peft's ``modules_to_save``).

    Modules are wrapped where they hold parameters, not at containers such as ``ModuleDict``: a wrapped module is
    only called, never indexed, so the model's code runs unchanged around the wrappers."""
    encoders = [encoder_prefix(model, name) for name in model.named_encoders()]
    names: list[str] = []
    for name, module in model.named_modules():  # parents before children: an encoder's or a wrapped module's skipped
        inside = any(f"{name}.".startswith(f"{outer}.") for outer in (*encoders, *names))  # it or one of its modules
        if name and not inside and next(module.parameters(recurse=False), None) is not None:
            names.append(name)
    return names


def add_lora(
    model: KeplmPreTrainedModel,
    r: int = 8,
    alpha: int = 16,
    dropout: float = 0.05,
    target_modules: tuple[str, ...] | list[str] | None = None,
    base_model_name_or_path: str | None = None,
):
    """Wrap ``model`` in a peft ``PeftModel``: LoRA of rank ``r`` on the encoders' ``target_modules`` (module-name
    suffixes, default query and value projections), the knowledge modules and head trained fully. The encoder
    weights are frozen. ``base_model_name_or_path`` (default: where the encoders were loaded from) is recorded
    so that :func:`load_lora` can rebuild the model."""
    targets = target_modules or DEFAULT_TARGET_MODULES
    encoders = "|".join(re.escape(encoder_prefix(model, name)) for name in model.named_encoders())
    pattern = rf"^(?:{encoders})\..*\.(?:{'|'.join(re.escape(t) for t in targets)})$"
    matched = [name for name, _ in model.named_modules() if re.match(pattern, name)]
    unmatched = [t for t in targets if not any(name.endswith(f".{t}") for name in matched)]
    if unmatched:  # one unknown name among known ones would silently train fewer modules than asked
        raise ValueError(
            f"no encoder module ends with {unmatched} (of --lora_target_modules {list(targets)}): choose among the "
            "encoder's Linear layers (BERT: query, key, value, dense)"
        )
    if base_model_name_or_path is None:
        sources = set(getattr(model, "loading_report", {}).get("base_model", {}).values())
        base_model_name_or_path = sources.pop() if len(sources) == 1 else model.config.name_or_path or None
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=pattern,
        modules_to_save=fully_trained_modules(model),
        base_model_name_or_path=base_model_name_or_path,
    )
    model.config.architectures = [type(model).__name__]
    if base_model_name_or_path and not model.__dict__.get("name_or_path"):
        model.name_or_path = str(base_model_name_or_path)  # peft records the base from the model's name_or_path
    return get_peft_model(model, config)


def save_lora(peft_model, save_directory: str | os.PathLike, repo_id: str | None = None) -> None:
    """Write the adapter (LoRA weights + fully trained modules), the keplm config, the base encoder
    (``keplm_adapter.json``) and the knowledge assets. With ``repo_id`` (the Hub repo the folder is for),
    ``adapter_config.json`` names that repo as the base model, so that transformers' Auto classes load the repo as a
    keplm model (see the module docstring)."""
    peft_model.save_pretrained(save_directory)
    base = peft_model.get_base_model()
    base.config.architectures = [type(base).__name__]
    base.config.save_pretrained(save_directory)
    if base.knowledge_assets is not None:
        save_knowledge_assets(save_directory, base.knowledge_assets)
    adapter_config = Path(save_directory, "adapter_config.json")
    recorded = read_json(adapter_config)
    encoder = recorded.get("base_model_name_or_path")  # the peft config's: add_lora's or load_lora's encoder
    if repo_id is not None and encoder:
        encoder = portable_checkpoint(encoder)  # no machine path goes to the Hub (a packaged encoder: pip:<name>)
    record = {"base_encoder": encoder, "base_encoder_weights": encoder_weights_digest(base)}
    write_json_whole(Path(save_directory, BASE_ENCODER_FILE), record, indent=2)
    # peft's AutoPeftModel classes rebuild the base with PeftBaseModel, not by loading the keplm class (which would
    # return the model with the adapter already merged)
    recorded["auto_mapping"] = {"base_model_class": PeftBaseModel.__name__, "parent_library": __name__}
    if repo_id is not None:
        recorded["base_model_name_or_path"] = repo_id
    # peft's base revision: a push pins it to its own commit (keplm.push_utils.pin_adapter_base); one recorded by an
    # earlier push (an adapter loaded from the Hub) names a commit of that repo, not of this save's base
    recorded["revision"] = None
    write_json_whole(adapter_config, recorded, indent=2, sort_keys=True)


def base_encoder_of(adapter_name_or_path: str | os.PathLike, adapter_config: dict | None = None, **location):
    """The base encoder checkpoint of a keplm adapter folder or repo: ``keplm_adapter.json``'s, or (an adapter
    saved before that file) ``adapter_config.json``'s ``base_model_name_or_path``."""
    return _adapter_record(adapter_name_or_path, adapter_config, **location).get("base_encoder")


def _adapter_record(adapter_name_or_path, adapter_config: dict | None = None, **location) -> dict:
    """``keplm_adapter.json`` of an adapter (base encoder and its weights' digest), or what peft's config records."""
    path = resolve_file(adapter_name_or_path, BASE_ENCODER_FILE, **location)  # in the adapter's subfolder, if any
    if path is not None:
        return read_json(path)
    if adapter_config is not None:
        return {"base_encoder": adapter_config.get("base_model_name_or_path")}
    return {"base_encoder": PeftConfig.from_pretrained(adapter_name_or_path, **location).base_model_name_or_path}


def push_lora(peft_model, repo_id: str, **kwargs):
    """Upload what :func:`save_lora` writes to ``repo_id`` in one commit (``kwargs`` as ``push_to_hub``'s), with
    keplm's model card (knowledge section included) instead of peft's template card."""
    base = peft_model.get_base_model()

    def save(folder: str) -> None:
        save_lora(peft_model, folder, repo_id=repo_id)
        Path(folder, "README.md").unlink(missing_ok=True)  # peft's template (library_name peft, no knowledge)

    return push_folder(
        save,
        repo_id,
        default_message="Upload LoRA adapter",
        write_card=lambda folder: base.write_model_card(folder, repo_id, model=peft_model),
        replaces=MODEL_FILES,
        model_type=base.config.model_type,
        **kwargs,
    )


def load_lora(
    adapter_name_or_path: str | os.PathLike,
    base_model_name_or_path: str | None = None,
    dtype: torch.dtype = torch.float32,
    **kwargs,
):
    """Rebuild the keplm model of an adapter around its base encoder checkpoint and apply the adapter; returns the
    ``PeftModel``. ``base_model_name_or_path`` overrides the base recorded in the adapter."""
    location = pinned_location(adapter_name_or_path, kwargs)
    model, base = _rebuild_base(adapter_name_or_path, base_model_name_or_path, dtype, location)
    peft_model = PeftModel.from_pretrained(model, adapter_name_or_path, **location)
    for peft_config in peft_model.peft_config.values():
        peft_config.base_model_name_or_path = base  # not the repo the Hub layout names: a re-save records this
    return peft_model


def _rebuild_base(adapter_name_or_path, base_model_name_or_path, dtype: torch.dtype, location: dict):
    """``(model, base encoder)``: the adapter's keplm model on its base encoder's weights, the adapter not applied."""
    config = AutoConfig.from_pretrained(adapter_name_or_path, **location)
    record = _adapter_record(adapter_name_or_path, **location)
    base = base_model_name_or_path or record.get("base_encoder")
    if not base:
        raise ValueError(
            f"{adapter_name_or_path} records no base encoder ({BASE_ENCODER_FILE}, adapter_config.json): "
            "pass base_model_name_or_path"
        )
    try:  # pip:<package> becomes the folder it ships; an existing folder or a Hub id stays (as a str)
        base = resolve_checkpoint(base)
    except FileNotFoundError:
        raise ValueError(
            f"{adapter_name_or_path} names the base encoder {base} ({BASE_ENCODER_FILE}), a folder that "
            "is not on this machine: pass base_model_name_or_path= (its Hub id or a local copy)"
        ) from None
    model = _model_class(config)(config)
    model.load_base_encoders(base, dtype=dtype)
    # the encoder the adapter is applied to may not be the one it was trained on (same shapes, other weights: the
    # adapter then predicts differently from the model that was saved); no digest: an adapter saved before it was
    # recorded, or from sharded weights
    recorded = record.get("base_encoder_weights")
    found = recorded and encoder_weights_digest(model, recorded["dtype"])
    if found and found["sha256"] != recorded["sha256"]:
        logger.warning(
            "the LoRA adapter %s was trained on other base encoder weights than those of %s (weights digest "
            "%s..., %s records %s...): its predictions will differ from the saved model's. Pass the encoder it was "
            "trained on as base_model_name_or_path",
            adapter_name_or_path,
            base,
            found["sha256"][:12],
            BASE_ENCODER_FILE,
            recorded["sha256"][:12],
        )
    if getattr(config, "uses_knowledge_assets", False):
        model.set_knowledge_assets(KnowledgeAssets.from_pretrained(adapter_name_or_path, **location))
    return model.to(dtype), base


class PeftBaseModel:
    """What peft's ``AutoPeftModel*`` classes load as a keplm adapter's base model (the ``auto_mapping`` that
    :func:`save_lora` writes; peft imports this module when ``import_allowlist=["keplm.modeling.lora"]`` is passed):
    the keplm model rebuilt on its base encoder without the adapter, which peft then applies once."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, dtype=None, **kwargs):
        """The base of the adapter at ``pretrained_model_name_or_path`` (peft passes the base model that
        ``adapter_config.json`` names: a pushed adapter names its own repo; ``revision`` and the other Hub keywords
        in ``kwargs``)."""
        location = pinned_location(pretrained_model_name_or_path, kwargs)
        if not is_adapter(pretrained_model_name_or_path, location):
            raise ValueError(
                f"{pretrained_model_name_or_path} is not a keplm LoRA adapter: peft's AutoPeftModel classes load the "
                "base model that adapter_config.json names, and an adapter saved to a folder (save_lora without "
                "repo_id) names its plain encoder there. Load it with keplm.modeling.lora.load_lora(<adapter folder>)"
            )
        return _rebuild_base(
            pretrained_model_name_or_path, None, dtype if isinstance(dtype, torch.dtype) else torch.float32, location
        )[0]


def is_adapter(name_or_path: str | os.PathLike, location: dict) -> bool:
    """Whether ``name_or_path`` holds a LoRA adapter (peft's ``adapter_config.json``) and no model weights."""
    if find_adapter_config_file(name_or_path, **{**location, "subfolder": ""}) is None:  # the top level's
        return False
    try:
        return not any(
            has_file(name_or_path, name, revision=location.get("revision"), token=location.get("token"))
            for name in ("model.safetensors", "model.safetensors.index.json")
        )
    except Exception:  # noqa: BLE001 - offline: the cached adapter config decides
        return True


def load_merged_adapter(
    cls,
    adapter_name_or_path: str | os.PathLike,
    dtype: torch.dtype | None = None,
    base_model_name_or_path: str | None = None,
    **kwargs,
):
    """``cls.from_pretrained`` of a LoRA adapter folder or repo, as transformers loads a plain adapter (its base
    model, then the adapter): :func:`load_lora`, merged into a plain keplm model in eval mode. ``cls`` must be the
    adapter's model class (a ValueError names it, its Auto class and :func:`load_lora` otherwise);
    ``base_model_name_or_path`` overrides the base encoder the adapter records."""
    location = pinned_location(adapter_name_or_path, kwargs)
    config = AutoConfig.from_pretrained(adapter_name_or_path, **location)
    saved = _model_class(config)
    if cls is not saved:
        raise ValueError(
            f"{adapter_name_or_path} holds a keplm LoRA adapter of {saved.__name__} (adapter_config.json, no model "
            f"weights), which {cls.__name__} cannot load: use "
            f"{auto_class_name(saved, config.model_type) or saved.__name__}.from_pretrained("
            f"{str(adapter_name_or_path)!r}) for the model with the adapter merged, or "
            f"keplm.modeling.lora.load_lora({str(adapter_name_or_path)!r}) for the peft model (its base encoder "
            "from adapter_config.json; base_model_name_or_path= to use another)"
        )
    peft_model = load_lora(adapter_name_or_path, base_model_name_or_path, dtype=dtype or torch.float32, **location)
    logger.info(
        "%s is a LoRA adapter: loaded onto its base encoder and merged (keplm.modeling.lora.load_lora gives "
        "the peft model, e.g. to train the adapter further)",
        adapter_name_or_path,
    )
    return peft_model.merge_and_unload().eval()


def _model_class(config):
    """The model class named in ``config.architectures``, among the registered methods' (keplm's and plug-ins')."""
    for name in config.architectures or []:
        if found := registered_model_class(name):
            return found
    raise ValueError(
        f"the adapter's config names no registered keplm model class (architectures={config.architectures})"
    )


__all__ = [
    "add_lora",
    "save_lora",
    "push_lora",
    "load_lora",
    "load_merged_adapter",
    "is_adapter",
    "base_encoder_of",
    "PeftBaseModel",
    "BASE_ENCODER_FILE",
    "fully_trained_modules",
    "DEFAULT_TARGET_MODULES",
]
