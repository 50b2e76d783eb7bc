"""What every keplm model shares: stock HF encoders built from (and loaded into) named slots, extra transformer
layers on top of them, the optimizer parameter-group hook, and knowledge assets saved and loaded beside the
weights."""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import has_file

from keplm.file_utils import pinned_location
from keplm.hub.card import build_model_card, write_model_card
from keplm.io_utils import committed_save
from keplm.knowledge.assets import KnowledgeAssets, holds_assets
from keplm.push_utils import MODEL_FILES, WEIGHT_FILES, push_folder
from keplm.tokenization.processing_utils import tokenizer_fingerprint

from .families import check_extra_layers, encoder_blocks, encoder_prefix, modulated_norms
from .lora import is_adapter, load_merged_adapter
from .zero3 import construct, full_state_dict, gathered

try:
    from transformers.masking_utils import create_bidirectional_mask
except ImportError:  # pragma: no cover - older transformers
    create_bidirectional_mask = None

logger = logging.getLogger(__name__)


def build_encoder(encoder_config, auto_class=AutoModel) -> PreTrainedModel:
    """A stock HF encoder (BERT, RoBERTa, ELECTRA, ...) from its config, without a pooler where possible;
    ``auto_class``: another Auto class that builds the stock model (``AutoModelForSeq2SeqLM``: a whole
    encoder-decoder with its LM head)."""
    try:
        return auto_class.from_config(encoder_config, add_pooling_layer=False)
    except TypeError:
        return auto_class.from_config(encoder_config)


def encoder_layers(encoder: nn.Module, depth: int | None = None) -> list[nn.Module]:
    """The encoder's transformer blocks, one per layer (``encoder.layer`` for BERT-likes; found by
    ``keplm.modeling.families.encoder_blocks``); a ValueError for an encoder that shares its blocks across layers
    (ALBERT), which has no distinct layers to copy or stack on."""
    blocks = encoder_blocks(encoder, depth)
    if len({id(block) for block in blocks}) != len(blocks):
        raise ValueError(
            f"{type(encoder).__name__} shares its transformer layers: it has no list of "
            f"{len(blocks)} layers to copy or stack on"
        )
    return blocks


def layer_norms(layer: nn.Module) -> list[nn.Module]:
    """The two modules of a transformer block whose outputs KALA's KFM modulates, in execution order: the LayerNorms
    after attention and after the FFN of a post-LN block, the pre-norms of a known pre-LN block
    (``keplm.modeling.families.modulated_norms``)."""
    return modulated_norms(layer)


def output_flags(config, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
    """``(output_attentions, output_hidden_states)`` of a forward call, the model config's where the call leaves them
    None, as transformers' own models read them (an encoder given None reads its own, nested config instead)."""
    return (
        config.output_attentions if output_attentions is None else output_attentions,
        config.output_hidden_states if output_hidden_states is None else output_hidden_states,
    )


def _check_finite_weights(model: nn.Module, where) -> None:
    """A ValueError naming the parameters of a loaded checkpoint that hold NaN or infinite values: such a model
    predicts nothing useful (a NaN entity-memory row made the NER pipeline return no entity) without any error."""
    bad = [
        name
        for name, parameter in model.named_parameters()
        if parameter.numel() and parameter.device.type != "meta" and not torch.isfinite(parameter).all()
    ]
    if bad:
        raise ValueError(
            f"{where}: the saved weights hold NaN or infinite values in {bad[:5]}{' ...' if len(bad) > 5 else ''}; "
            "the checkpoint is corrupt or was saved after training diverged"
        )


def check_index_range(tensor: torch.Tensor | None, low: int, high: int, message: str) -> None:
    """ValueError(message.format(low=low, high=high)) if a value lies outside ``[low, high)``; checked only where
    it costs no device sync or graph break (CPU tensors, not under ``torch.compile``). The collator checks
    GPU-bound batches. ``message`` is a template formatted only on failure: formatting a size such as
    ``node_entity_ids.shape[0]`` eagerly would make torch.compile specialise on it and recompile every batch."""
    if tensor is None or not tensor.numel() or tensor.device.type != "cpu" or torch.compiler.is_compiling():
        return
    if int(tensor.min()) < low or int(tensor.max()) >= high:
        raise ValueError(message.format(low=low, high=high))


def check_input_ids(input_ids: torch.Tensor | None, config) -> None:
    """ValueError if a token id lies outside the encoder's vocabulary (``config.encoder_config.vocab_size``): ids
    made by another model's tokenizer would otherwise fail as an index error deep in the embedding."""
    check_index_range(
        input_ids,
        0,
        config.encoder_config.vocab_size,
        "input_ids must lie in [0, {high}), the encoder's vocabulary: were they made by another model's tokenizer?",
    )


class ExtraLayers(nn.ModuleList):
    """Transformer layers of an encoder's own class stacked on top of its output (a ``ModuleList`` of them).

    KALA's "+ more params" baseline uses randomly initialised ones; Roof-Transformer's roof copies the last
    layers of a pretrained encoder (``copy_from``: the encoder's name), which
    :meth:`KeplmPreTrainedModel.from_base_pretrained` does after loading the pretrained weights.
    """

    def __init__(self, encoder: PreTrainedModel, num_layers: int, copy_from: str | None = None):
        last = encoder_blocks(encoder)[-1]
        if num_layers:
            check_extra_layers(last)
        layer_class = type(last)
        first = encoder.config.num_hidden_layers
        super().__init__(_new_layer(layer_class, encoder.config, first + i) for i in range(num_layers))
        self.layer_config = encoder.config
        self.copy_from = copy_from

    @torch.no_grad()
    def copy_last_layers(self, encoder: nn.Module) -> None:
        """Load the weights of the encoder's last ``len(self)`` layers, in order."""
        source = encoder_blocks(encoder)  # a shared block (ALBERT) once per layer it runs
        if len(self) > len(source):
            raise ValueError(f"cannot copy the last {len(self)} layers of an encoder with {len(source)} layers")
        for target, layer in zip(self, source[len(source) - len(self) :]):
            with gathered([*target.parameters(), *layer.parameters()], modify=True):
                target.load_state_dict(layer.state_dict())

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the layers; ``attention_mask`` is the ``[batch, length]`` padding mask (1 = token)."""
        mask = None
        if attention_mask is not None:
            if create_bidirectional_mask is not None:
                mask = create_bidirectional_mask(
                    config=self.layer_config, inputs_embeds=hidden_states, attention_mask=attention_mask
                )
            else:
                mask = (1.0 - attention_mask[:, None, None, :].to(hidden_states.dtype)) * torch.finfo(
                    hidden_states.dtype
                ).min
        for layer in self:
            out = layer(hidden_states, attention_mask=mask)
            hidden_states = out[0] if isinstance(out, tuple) else out
        return hidden_states


def _new_layer(layer_class, config, layer_idx: int) -> nn.Module:
    try:
        return layer_class(config, layer_idx=layer_idx)
    except TypeError:
        return layer_class(config)


@dataclass
class ParameterGroup:
    """Parameters that train differently from the rest: their own learning rate and/or their own optimizer.

    ``learning_rate=None`` keeps the Trainer's; ``optimizer=None`` keeps the Trainer's optimizer (the group joins
    it, split by weight decay as the stock groups are), ``"sparse_adam"`` or ``"rowwise_adagrad"`` gives the
    group an optimizer of its own (``keplm.training.optim``). ``warmup_steps`` gives the group a warm-up of its own
    in the Trainer's schedule (>= 1: steps, < 1: a share of the training steps, as ``--warmup_steps``; None: the
    Trainer's). ``weight_decay``: the decay of a group with an optimizer of its own that takes one (``"adamw"``;
    None: the Trainer's). Returned by :meth:`KeplmPreTrainedModel.parameter_groups`.
    """

    name: str
    parameters: list[nn.Parameter] = field(default_factory=list)
    learning_rate: float | None = None
    optimizer: str | None = None
    warmup_steps: float | None = None
    weight_decay: float | None = None


#: weight files of an earlier save that a new save into the same folder removes when it does not write them itself
#: (the pushed ones, and the pickled weights an older save may have left)
STALE_WEIGHT_FILES = (*WEIGHT_FILES, "pytorch_model*.bin", "pytorch_model.bin.index.json")


def base_tokenizer_fingerprint(checkpoints: set[str]) -> str | None:
    """The fingerprint of the tokenizer saved with the base checkpoints (one tokenizer for all of them), or None
    when a checkpoint holds none or they differ: the processor a model built on them should use."""
    fingerprints = set()
    for checkpoint in checkpoints:
        try:  # transformers builds a tokenizer of special tokens only for a folder without tokenizer files
            saved = any(has_file(checkpoint, name) for name in ("tokenizer_config.json", "tokenizer.json"))
            tokenizer = AutoTokenizer.from_pretrained(checkpoint) if saved else None
        except (OSError, ValueError, TypeError) as error:
            logger.info(
                "the tokenizer of the base checkpoint %s does not load (%s): none is checked", checkpoint, error
            )
            return None
        if tokenizer is None:
            return None
        fingerprints.add(tokenizer_fingerprint(tokenizer))
    return fingerprints.pop() if len(fingerprints) == 1 else None


class KeplmPreTrainedModel(PreTrainedModel):
    """Base of keplm models.

    * Encoders: ``config.encoder_names`` name the stock HF encoders of the model; each lives at
      ``base_model.<name>`` and :meth:`from_base_pretrained` loads a pretrained checkpoint into each.
    * Training: :meth:`parameter_groups` is the one hook through which a model tells the Trainer which of its
      parameters train at another learning rate or with another optimizer; ``ddp_find_unused_parameters`` is
      the model's answer to DDP's unused-parameter question.
    * Knowledge assets (vocabularies, KG) travel with ``save_pretrained``/``from_pretrained``/``push_to_hub``.
    """

    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    #: losses are per-batch means: the Trainer must scale them for gradient accumulation itself
    accepts_loss_kwargs = False
    #: whether DDP must look for parameters without gradient (None: let the Trainer decide)
    ddp_find_unused_parameters: bool | None = None
    #: the Auto class whose stock model fills the encoder slots, built and loaded from base checkpoints (a model that
    #: wraps a whole encoder-decoder sets ``AutoModelForSeq2SeqLM``)
    base_auto_class = AutoModel

    knowledge_assets: KnowledgeAssets | None = None
    #: the commit ``from_pretrained`` read a Hub checkpoint at (None for a local folder or a model built in code)
    source_revision: str | None = None

    # ------------------------------------------------------------------ encoders
    def named_encoders(self) -> dict[str, PreTrainedModel]:
        """``{name: encoder module}`` of every encoder the model has (by default those of ``config.encoder_names``,
        found on the base model; a head model asks its base model)."""
        base = self.base_model
        if base is not self and isinstance(base, KeplmPreTrainedModel):
            return base.named_encoders()
        return {
            name: getattr(self, name) for name in self.config.encoder_names if getattr(self, name, None) is not None
        }

    @staticmethod
    def encoder_config_name(name: str) -> str:
        """The config encoder (``<name>_config``, base checkpoint) an encoder of ``named_encoders`` is built from."""
        return name

    def get_input_embeddings(self):
        return self.named_encoders()[self.config.encoder_names[0]].get_input_embeddings()

    def set_input_embeddings(self, value):
        self.named_encoders()[self.config.encoder_names[0]].set_input_embeddings(value)

    # ------------------------------------------------------------------ training hooks
    def parameter_groups(self, learning_rate: float, **options) -> list[ParameterGroup]:
        """Groups of parameters that train differently from the rest (none by default); ``options`` are the
        model's own training options (e.g. KALA's ``knowledge_learning_rate``), passed by the Trainer's
        ``parameter_group_options``. A model rejects options it does not know."""
        if options:
            raise ValueError(f"{type(self).__name__} takes no parameter-group options, got {sorted(options)}")
        return []

    def sharding_blockers(self, engine: str) -> list[str]:
        """What of this model, as it is set up now, ``engine`` (``"FSDP"`` or ``"DeepSpeed"``) cannot run, each with the
        option that avoids it (none by default); ``keplm.training.fsdp.shard_model`` and the KeplmTrainer refuse such
        a model."""
        return []

    # ------------------------------------------------------------------ saving / loading
    def save_pretrained(self, save_directory, *args, **kwargs):
        """As ``PreTrainedModel.save_pretrained``, with the knowledge assets (``knowledge/``), and whole or refused:
        the save is written beside the folder and moved in with ``config.json`` last, after the earlier one is
        removed (:func:`keplm.io_utils.committed_save`), so a save interrupted at any point leaves the earlier model
        or a folder without ``config.json``, which loading refuses, never new weights beside an old config (or the
        other way round); an earlier save's weight files the new one lacks (shards) are removed. Files the model does
        not write (the processor's, a run's results) stay."""
        if not kwargs.get("is_main_process", True) or kwargs.get("push_to_hub"):
            super().save_pretrained(save_directory, *args, **kwargs)  # other processes write nothing of their own
            if kwargs.get("is_main_process", True) and self.knowledge_assets is not None:
                self.knowledge_assets.save_pretrained(save_directory, overwrite=True)
            return
        same_assets = self.knowledge_assets is not None and holds_assets(save_directory, self.knowledge_assets)
        with committed_save(save_directory, "config.json", STALE_WEIGHT_FILES) as staging:
            super().save_pretrained(staging, *args, **kwargs)
            if self.knowledge_assets is not None and not same_assets:  # the same assets there: kept as they are
                self.knowledge_assets.save_pretrained(staging, overwrite=True)
        if self.knowledge_assets is None and getattr(self.config, "uses_knowledge_assets", False):
            logger.warning(
                "%s has no knowledge assets (built from its config without set_knowledge_assets): %s holds no "
                "knowledge/ folder, and from_pretrained will refuse it until the assets are saved there "
                "(model.set_knowledge_assets(assets), then save_pretrained again)",
                type(self).__name__,
                save_directory,
            )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``, with the knowledge assets: the revision is resolved to one commit
        first, so config, assets and weights come from the same commit; the assets are loaded (and their hashes
        checked) before the weights, so a checkpoint without them fails before downloading the weights;
        ``knowledge_assets=``: assets already in memory (e.g. the processor's, loaded from the same checkpoint), used
        as they are when the checkpoint's recorded hashes are theirs, so one process holds one KG. A LoRA
        adapter saved by keplm (``keplm.modeling.lora``) loads onto its base encoder (``base_model_name_or_path``:
        another copy of it), merged. With no path (``from_pretrained(None, config=..., state_dict=...)``) the
        knowledge assets come from ``knowledge_assets=`` or stay unset."""
        if pretrained_model_name_or_path is None:  # weights from config= and state_dict=, as transformers allows
            assets = kwargs.pop("knowledge_assets", None)
            loaded = super().from_pretrained(None, *args, **kwargs)
            model = loaded[0] if isinstance(loaded, tuple) else loaded
            if assets is not None:
                model.set_knowledge_assets(assets)
            return loaded
        location = pinned_location(pretrained_model_name_or_path, kwargs)
        if "revision" in location:
            kwargs["revision"] = location["revision"]
        # the commit read, recorded on the model (pipelines load its processor there); None for a local folder
        revision = None if os.path.isdir(pretrained_model_name_or_path) else location.get("revision")
        if is_adapter(pretrained_model_name_or_path, location):
            dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
            model = load_merged_adapter(
                cls,
                pretrained_model_name_or_path,
                dtype=dtype if isinstance(dtype, torch.dtype) else None,
                base_model_name_or_path=kwargs.get("base_model_name_or_path"),
                **location,
            )
            model.source_revision = revision
            return model
        assets, reuse = None, kwargs.pop("knowledge_assets", None)
        config = cls.config_class.from_pretrained(pretrained_model_name_or_path, **location)
        if getattr(config, "uses_knowledge_assets", False):
            assets = KnowledgeAssets.from_pretrained(pretrained_model_name_or_path, reuse=reuse, **location)
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        _check_finite_weights(model, pretrained_model_name_or_path)
        model.source_revision = revision
        if assets is not None and isinstance(model, KeplmPreTrainedModel) and model.config.uses_knowledge_assets:
            model.set_knowledge_assets(assets)
        return loaded

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
        base_model: str | None = None,
    ):
        """Upload the model (config, safetensors weights, ``knowledge/`` with its nested KG folder) to ``repo_id`` in
        one commit, with keplm's model card of this model (a card on the Hub is kept only while it still describes
        the pushed files: :func:`keplm.push_utils.card_is_current`). ``base_model``: the card's base encoder
        (default: the one the model was built on, its Hub id in the metadata when it has one). Push the processor too
        (``processor.push_to_hub(repo_id)``), or push with the Trainer, which saves both."""
        return push_folder(
            lambda folder: self.save_pretrained(folder, max_shard_size=max_shard_size),
            repo_id,
            write_card=lambda folder: self.write_model_card(folder, repo_id, tags, base_model=base_model),
            commit_message=commit_message,
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
            default_message=f"Upload {type(self).__name__}",
            replaces=MODEL_FILES,
            model_type=self.config.model_type,
        )

    def write_model_card(
        self,
        folder: str | os.PathLike,
        repo_id: str | None = None,
        tags: list[str] | None = None,
        model=None,
        base_model: str | None = None,
    ) -> None:
        """keplm's model card of ``model`` (default: this model; e.g. the peft model around it) as ``README.md`` in
        ``folder``, its figures in ``folder/figures``; ``tags`` added to the card's; ``base_model`` as in
        :meth:`push_to_hub`."""
        card = build_model_card(
            model if model is not None else self,
            base_model=base_model or self.base_encoder_name(),
            repo_id=repo_id,
            figures_dir=Path(folder) / "figures",
        )
        card.data.tags = list(dict.fromkeys([*(card.data.tags or []), *(tags or [])]))
        write_model_card(folder, card)

    def base_encoder_name(self) -> str | None:
        """The checkpoint the (first) encoder was loaded from in this process (``from_base_pretrained``,
        ``load_lora``): a Hub id or a local path; None for a model built from its config or loaded from a keplm
        checkpoint, whose saved config drops the encoder's origin."""
        return getattr(self.config.encoder_configs()[self.config.encoder_names[0]], "name_or_path", None) or None

    def set_knowledge_assets(self, assets: KnowledgeAssets) -> None:
        """Attach vocabularies/KG; their sizes must match the model's tables. A head model's base model (a keplm
        model of its own) gets them too, so that ``model.base_model.save_pretrained`` writes a loadable folder."""
        self.check_knowledge_assets(assets)
        self.knowledge_assets = assets
        base = getattr(self, self.base_model_prefix, None)
        if isinstance(base, KeplmPreTrainedModel) and base is not self:
            base.set_knowledge_assets(assets)

    def check_knowledge_assets(self, assets: KnowledgeAssets) -> None:  # overridden per model
        return None

    @classmethod
    def config_kwargs_from_assets(cls, assets: KnowledgeAssets | None) -> dict:
        return {}

    @classmethod
    def from_base_pretrained(
        cls,
        base_model_name_or_path: str | os.PathLike | dict[str, str | os.PathLike],
        knowledge_assets: KnowledgeAssets | None = None,
        dtype: torch.dtype = torch.float32,
        **config_kwargs,
    ):
        """Build this model around pretrained encoders: one checkpoint (a local directory or Hub id, e.g. MiniLM
        or BERT) for every encoder, or ``{encoder name: checkpoint}``; each encoder gets its own copy of the
        weights. Extra layers declared to copy an encoder's last layers get them.

        Every other module is newly initialised; the report of what is new is logged and kept in
        ``model.loading_report``. The model comes back in eval mode, as ``from_pretrained`` returns it.
        """
        names = cls.config_class.encoder_names
        if isinstance(base_model_name_or_path, dict):
            unknown = sorted(set(base_model_name_or_path) - set(names))
            if unknown or set(names) - set(base_model_name_or_path):
                raise ValueError(
                    f"base checkpoints must be given for the encoders {list(names)}, got "
                    f"{sorted(base_model_name_or_path)}"
                )
            sources = {name: base_model_name_or_path[name] for name in names}
        else:
            sources = dict.fromkeys(names, base_model_name_or_path)
        configs = {f"{name}_config": AutoConfig.from_pretrained(path) for name, path in sources.items()}
        config_kwargs = cls.config_kwargs_from_assets(knowledge_assets) | configs | config_kwargs
        model = construct(cls, cls.config_class(**config_kwargs))  # partitioned under DeepSpeed ZeRO-3
        model.load_base_encoders(sources, dtype=dtype)
        if getattr(model.config, "tokenizer_hash", "") is None:  # a processor over another tokenizer is refused
            model.config.tokenizer_hash = base_tokenizer_fingerprint(set(map(str, sources.values())))
        if knowledge_assets is not None:
            model.set_knowledge_assets(knowledge_assets)
        return model.to(dtype).eval()  # as from_pretrained returns it; the Trainer switches to training mode

    def load_base_encoders(self, sources: str | os.PathLike | dict, dtype: torch.dtype = torch.float32) -> dict:
        """Load pretrained weights into every encoder (one checkpoint for all, or ``{encoder name: checkpoint}``),
        then copy encoder layers into the ``ExtraLayers`` that ask for it; returns (and keeps in
        ``loading_report``) what was loaded, copied and newly initialised."""
        names = self.config.encoder_names
        if not isinstance(sources, dict):
            sources = dict.fromkeys(names, sources)
        pretrained_cache: dict[str, dict] = {}
        missing_weights = {}
        for name, encoder in self.named_encoders().items():
            path = sources[self.encoder_config_name(name)]
            key = str(path)
            if key not in pretrained_cache:
                pretrained_cache[key] = full_state_dict(self.base_auto_class.from_pretrained(path, dtype=dtype))
            with gathered(encoder, modify=True):
                missing, unexpected = encoder.load_state_dict(copy.copy(pretrained_cache[key]), strict=False)
            unexpected = [k for k in unexpected if not k.startswith("pooler.")]
            if unexpected:
                raise ValueError(f"{path} does not fit the {name}: unexpected weights {unexpected[:5]}")
            if missing:
                missing_weights[name] = list(missing)
        copied = []
        for module_name, module in self.named_modules():
            if isinstance(module, ExtraLayers) and module.copy_from is not None:
                module.copy_last_layers(self.named_encoders()[module.copy_from])
                copied.append(module_name)
        encoder_prefixes = tuple(f"{encoder_prefix(self, name)}." for name in self.named_encoders())
        new_modules = sorted(
            {
                ".".join(name.split(".")[:2]) if name.startswith(f"{self.base_model_prefix}.") else name.split(".")[0]
                for name, _ in self.named_parameters()
                if not name.startswith(encoder_prefixes) and not any(name.startswith(f"{c}.") for c in copied)
            }
        )
        self.loading_report = {
            "base_model": {n: str(p) for n, p in sources.items()},
            "newly_initialized": new_modules,
            "copied_from_encoder_layers": copied,
            "encoder_missing": missing_weights,
        }
        # new modules are the expected state of a model built on an encoder (INFO); missing encoder weights are not
        logger.log(
            logging.WARNING if missing_weights else logging.INFO,
            "Built %s on %s: newly initialised modules %s%s%s",
            type(self).__name__,
            _describe(sources),
            new_modules,
            f"; copied from the encoders' last layers: {copied}" if copied else "",
            f"; encoder weights missing from the checkpoint: {missing_weights}" if missing_weights else "",
        )
        return self.loading_report


def _describe(sources: dict[str, str]) -> str:
    unique = set(map(str, sources.values()))
    return next(iter(unique)) if len(unique) == 1 else ", ".join(f"{n}={p}" for n, p in sources.items())


#: what a model that reads knowledge says when called without its knowledge inputs (e.g. by a stock pipeline)
RAW_TEXT_HINT = (
    "on raw text use the keplm pipelines, which link the text and build these inputs: pipeline('keplm-ner' | "
    "'keplm-qa' | 'keplm-text-classification' | 'keplm-text2text', model=...); transformers' stock pipelines pass "
    "text inputs only"
)


__all__ = [
    "RAW_TEXT_HINT",
    "output_flags",
    "KeplmPreTrainedModel",
    "ParameterGroup",
    "ExtraLayers",
    "build_encoder",
    "encoder_layers",
    "layer_norms",
    "check_index_range",
    "check_input_ids",
]
