"""The processor base shared by every keplm model: tokenizer + knowledge → model inputs.

:class:`KeplmProcessor` alone owns the knowledge graph and its entity linker (one linking pass per split,
:meth:`KeplmProcessor.link_dataset`), maps character spans of entity mentions to token spans, aligns word-level
NER labels, cuts QA contexts into stride windows, and saves/loads itself (``AutoProcessor`` finds it through
``processor_config.json``). A model's processor subclass adds only what its model reads from the knowledge
(:meth:`KeplmProcessor.knowledge_features`): KALA a graph per feature, Roof-Transformer a knowledge sequence,
TRELM entity positions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import torch
from datasets.fingerprint import Hasher
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from keplm.file_utils import (
    FORMAT_VERSION,
    PROCESSOR_CONFIG_NAME,
    check_format_version,
    pinned_location,
    resolve_file,
)
from keplm.io_utils import named_json_errors, read_json
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.assets import KnowledgeAssets
from keplm.knowledge.graph import KnowledgeGraph
from keplm.knowledge.linker import EntityLinker, link_dataset
from keplm.knowledge.loaders import load_kg
from keplm.push_utils import PROCESSOR_FILES, push_folder

from .alignment import char_spans_to_token_spans
from .schema import GraphSchema
from .task_features import (  # noqa: F401  (re-exported)
    TaskFeatures,
    align_word_labels,
    annotation_columns_for,
    answer_token_positions,
    as_annotation,
)

logger = logging.getLogger(__name__)

#: file name of the processor settings before format 1 named it (still read)
LEGACY_PROCESSOR_CONFIG_NAME = "keplm_processor_config.json"
#: every keplm processor class by name (``processor_class`` in ``processor_config.json``)
PROCESSOR_CLASSES: dict[str, type[KeplmProcessor]] = {}


class KeplmProcessor(TaskFeatures):
    """Turns text (and questions) with entity mentions into model inputs; the base of every keplm processor.

    Args:
        tokenizer: a fast tokenizer (offset mappings map character spans to tokens).
        knowledge_assets: entity/relation vocabularies and the KG (``KnowledgeAssets(kg=kg)`` for a KG alone).
        linker_kwargs: settings of the :class:`~keplm.knowledge.EntityLinker` built from the KG on first use.

    Subclasses set the class attributes that describe their features and override
    :meth:`knowledge_features`; ``model_input_names`` are the inputs their model's ``forward`` takes.
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    #: token-level feature keys by sequence family (a family is named by the key of its token ids): the collator
    #: pads each key to its family's length
    sequence_families: dict[str, tuple[str, ...]] = {
        "input_ids": ("input_ids", "attention_mask", "token_type_ids", "special_tokens_mask", "labels"),
    }
    #: scalar features holding a token position in a family (they move when the collator pads on the left)
    position_keys: dict[str, str] = {"start_positions": "input_ids", "end_positions": "input_ids"}
    #: which feature keys hold a per-example graph (batched by the collator into one graph); None: no graph
    graph_schema: GraphSchema | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        PROCESSOR_CLASSES[cls.__name__] = cls

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets | None = None,
        linker_kwargs: dict | None = None,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(
                f"{type(self).__name__} needs a fast tokenizer (offset mappings), got {type(tokenizer).__name__}"
            )
        self.tokenizer = tokenizer
        self.knowledge_assets = knowledge_assets if knowledge_assets is not None else KnowledgeAssets()
        self.linker_kwargs = dict(linker_kwargs or {})
        self._linker = None  # (KG, linker settings, the EntityLinker built over them), built on first use

    def processor_config(self) -> dict:
        """The settings saved in ``processor_config.json`` (the constructor's keyword arguments)."""
        return {"linker_kwargs": self.linker_kwargs}

    def __getstate__(self):  # ship the processor to worker processes without its built linker automaton or counts
        return {key: value for key, value in {**self.__dict__, "_linker": None}.items() if key != "_widened"}

    # ------------------------------------------------------------------ basics
    @property
    def kg(self):
        return self.knowledge_assets.kg

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id

    def without_knowledge(self) -> KeplmProcessor:
        """A copy without KG and vocabularies (the processor of a baseline that reads no knowledge)."""
        return type(self)(self.tokenizer, **{**self.processor_config(), "knowledge_assets": KnowledgeAssets()})

    def update_knowledge(self, kg, model=None) -> dict:
        """Give a trained model a changed or extended KG without retraining: new entities (read as unseen, through
        their facts to known ones), removed or corrected facts. ``kg``: a :class:`~keplm.knowledge.KnowledgeGraph`
        or a ``load_kg`` spec. The vocabularies stay (the model's tables are indexed by them), so ``model`` (if
        given) takes the same assets; the next ``save_pretrained`` / ``push_to_hub`` of both writes the new
        ``knowledge/`` with its new KG hash. Returns (and logs) :meth:`KnowledgeAssets.kg_change`'s report."""
        if isinstance(kg, (str, os.PathLike)):
            kg = load_kg(kg)
        if not isinstance(kg, KnowledgeGraph):
            raise ValueError(f"update_knowledge takes a KnowledgeGraph or a KG spec, got {type(kg).__name__}")
        if (
            model is not None
            and getattr(model, "knowledge_assets", None) is not None
            and (model.knowledge_assets.content_hash() != self.knowledge_assets.content_hash())
        ):
            raise ValueError(
                "the model and the processor hold different vocabularies: update the processor that "
                "was saved with this model"
            )
        report = self.knowledge_assets.kg_change(kg)
        self.knowledge_assets = self.knowledge_assets.with_kg(kg)
        self._linker = None  # the linker's dictionary is the old KG's
        if model is not None:
            model.set_knowledge_assets(self.knowledge_assets)
        logger.info("Knowledge updated: %s", {k: v for k, v in report.items() if not k.endswith("_hash")})
        if report["facts_with_unknown_relation"]:
            logger.warning(
                "%d facts of the new KG have a relation the model was not trained with (e.g. %s): they "
                "are read as the unknown relation",
                report["facts_with_unknown_relation"],
                report["unknown_relations"],
            )
        return report

    def signature(self) -> dict:
        """Everything about the processor that determines its features (for ``datasets`` cache fingerprints)."""
        assets = self.knowledge_assets
        return {
            "processor": type(self).__name__,
            "config": self.processor_config(),
            "vocab": assets.content_hash(),
            "kg": self.kg.content_hash() if self.kg is not None else None,
            "tokenizer": Hasher.hash(self.tokenizer),
        }

    # ------------------------------------------------------------------ linking
    @property
    def linker(self) -> EntityLinker:
        """The entity linker over the KG, built on first use."""
        linker = self.cached_linker()
        if linker is None:
            if self.kg is None:
                raise ValueError("no annotation given and the processor holds no KG to link the text against")
            linker = EntityLinker(self.kg, **self.linker_kwargs)
            self._linker = (self.kg, dict(self.linker_kwargs), linker)
        return linker

    def cached_linker(self) -> EntityLinker | None:
        """The linker built earlier, if it was built over the processor's KG and linker settings as they are now
        (assigning ``knowledge_assets`` or ``linker_kwargs`` leaves it stale: it is then rebuilt); else None."""
        if self._linker is None:
            return None
        kg, settings, linker = self._linker
        return linker if kg is self.kg and settings == self.linker_kwargs else None

    def link(self, text: str) -> KnowledgeAnnotation:
        return self.linker.link(text)

    def link_dataset(
        self, dataset, column: str, split_into_words: bool = False, num_proc: int | None = None, desc: str | None = None
    ):
        """The dataset with a ``knowledge`` column: the linking pass of a split, read by everything after it
        (entity vocabulary, seen/unseen subsets, features). ``split_into_words``: the column holds word lists."""
        if self.kg is None:
            raise ValueError("linking needs a knowledge graph, and the processor holds none")
        return link_dataset(
            dataset,
            self.kg,
            self.linker_kwargs,
            column,
            split_into_words=split_into_words,
            linker=self.cached_linker(),
            num_proc=num_proc,
            desc=desc,
        )

    # ------------------------------------------------------------------ alignment
    def text_annotation(self, annotation, text: str) -> KnowledgeAnnotation:
        """The annotation of ``text`` the features read: ``annotation`` (a dict or an annotation; None: link the text)
        validated against ``text``, its mentions that cut through a word widened to the word (logged, the first
        few with their offsets, and counted in :meth:`alignment_report`)."""
        annotation = as_annotation(annotation)
        annotation = (self.link(text) if annotation is None else annotation).validate(text)
        widened, count = annotation.widened_to_words(text)
        if count:
            report = self.__dict__.setdefault("_widened", {"widened_mentions": 0, "widened_examples": []})
            report["widened_mentions"] += count
            for old, new in zip(annotation.entities, widened.entities):
                example = f"{old.text!r} [{old.start}, {old.end}) -> {new.text!r} [{new.start}, {new.end})"
                if new is not old and len(report["widened_examples"]) < 5 and example not in report["widened_examples"]:
                    report["widened_examples"].append(example)
                    logger.warning(
                        "mention %r [%d, %d) cuts through the word %r: widened to [%d, %d) (further "
                        "widenings are counted in alignment_report())",
                        old.text,
                        old.start,
                        old.end,
                        new.text,
                        new.start,
                        new.end,
                    )
        return widened

    def alignment_report(self) -> dict:
        """How many given mentions this processor widened to word boundaries (:meth:`text_annotation`), with the
        first few; counted in this process (a ``datasets.map`` with ``num_proc`` > 1 counts in its workers)."""
        report = self.__dict__.get("_widened", {"widened_mentions": 0, "widened_examples": []})
        return {"widened_mentions": report["widened_mentions"], "widened_examples": list(report["widened_examples"])}

    @staticmethod
    def mention_spans(offsets, masks, annotations) -> list[tuple[int, int, object]]:
        """``(first token, last token, mention)`` of every mention that has a token in the feature.

        ``annotations[i]`` refers to the text part whose tokens ``masks[i]`` selects (e.g. context and question
        of a QA window); ``offsets`` are the feature's character offsets into that text.
        """
        spans = []
        for annotation, mask in zip(annotations, masks):
            if annotation is None or not annotation.entities:
                continue
            token_spans = char_spans_to_token_spans(offsets, [(m.start, m.end) for m in annotation.entities], mask)
            spans.extend(
                (int(first), int(last), mention)
                for mention, (first, last) in zip(annotation.entities, token_spans)
                if first >= 0
            )
        return spans

    def facts_read(self, annotation: dict) -> tuple[list[dict], str | None]:
        """The facts ``{"h", "r", "t"}`` (KG ids) the model reads for a text with this annotation, and the feature
        column that carries them when they are not the annotation's own (None: the annotation's ``triplets``).
        What :mod:`keplm.checks.counterfactual` edits."""
        return list(annotation.get("triplets") or []), None

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """The knowledge inputs of one feature (none in the base class); see :meth:`mention_spans`."""
        return {}

    # ------------------------------------------------------------------ one text
    def __call__(
        self,
        text: str,
        annotation=None,
        max_length: int = 512,
        truncation: bool = True,
        with_knowledge: bool = True,
        return_tensors: str | None = None,
        **kwargs,
    ) -> dict:
        """Encode one text; links it against the KG when no annotation is given. ``return_tensors="pt"``: the model's
        inputs as a batch of one (``model(**processor(text, return_tensors="pt"))``), else lists."""
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors must be None or 'pt' (PyTorch), got {return_tensors!r}")
        encoding = self.tokenizer(
            text, max_length=max_length, truncation=truncation, return_offsets_mapping=True, **kwargs
        )
        offsets = encoding.pop("offset_mapping")
        features = dict(encoding)
        if with_knowledge:
            annotation = self.text_annotation(annotation, text)
            features.update(self.knowledge_features(offsets, [[s == 0 for s in encoding.sequence_ids()]], [annotation]))
        return features if return_tensors is None else self.as_tensors(features)

    def as_tensors(self, features: dict) -> dict:
        """One example's features as a batch of one, in PyTorch tensors: the keys of every declared sequence family
        gain a batch dimension; a declared graph stays one graph (nodes, ``[2, E]`` edges, per-edge values), as the
        collator would batch a single example."""
        token_keys = {key for family in self.sequence_families.values() for key in family}
        graph_keys = set(self.graph_schema.keys) if self.graph_schema is not None else set()
        tensors = {}
        for key, value in features.items():
            if key in token_keys:
                tensors[key] = torch.tensor([value], dtype=torch.long)
            elif key == getattr(self.graph_schema, "edges", None):
                tensors[key] = torch.tensor(value, dtype=torch.long).reshape(2, -1)
            elif key in graph_keys:
                tensors[key] = torch.tensor(value, dtype=torch.long)
            else:
                tensors[key] = torch.tensor(value)
        return tensors

    # ------------------------------------------------------------------ agreement with a model
    def check_config(self, config) -> None:
        """ValueError when a model config contradicts the processor: a tokenizer larger than the encoder's
        vocabulary (its ids would index past the embeddings); subclasses add their own settings."""
        encoders = config.encoder_configs() if hasattr(config, "encoder_configs") else {"encoder": config}
        for name, encoder_config in encoders.items():
            vocab_size = getattr(encoder_config, "vocab_size", None)
            if vocab_size is not None and len(self.tokenizer) > vocab_size:
                raise ValueError(
                    f"the tokenizer has {len(self.tokenizer)} tokens but the model's {name} embeds only "
                    f"{vocab_size}: the processor and the model come from different checkpoints"
                )
        recorded = getattr(config, "tokenizer_hash", None)
        if recorded is not None and recorded != tokenizer_fingerprint(self.tokenizer):
            raise ValueError(
                f"the processor's tokenizer (fingerprint {tokenizer_fingerprint(self.tokenizer)[:12]}) is "
                f"not the one the model was trained with ({recorded[:12]}: another vocabulary or casing): "
                "load the processor saved with the model (set config.tokenizer_hash = None if the "
                "tokenizer was changed on purpose)"
            )

    def check_model(self, model) -> None:
        """ValueError when ``model`` cannot read this processor's features: a tokenizer larger than the model's
        vocabulary, or knowledge assets other than the model's (their content hashes differ)."""
        self.check_config(model.config)
        model_assets = getattr(model, "knowledge_assets", None)
        if getattr(model.config, "uses_knowledge_assets", False):
            if model_assets is None:
                raise ValueError(f"{type(model).__name__} reads knowledge but has no knowledge assets attached")
            if model_assets.content_hash() != self.knowledge_assets.content_hash():
                raise ValueError(
                    f"the processor's entity/relation vocabularies ({self.knowledge_assets.num_entities} entities, "
                    f"hash {self.knowledge_assets.content_hash()[:12]}) differ from the model's "
                    f"({model_assets.num_entities} entities, hash {model_assets.content_hash()[:12]}): their ids "
                    "would index the wrong rows"
                )

    # ------------------------------------------------------------------ saving / loading
    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Write the tokenizer, ``processor_config.json`` and the knowledge assets (shared with the model saved in
        the same folder, see :func:`~keplm.knowledge.assets.save_knowledge_assets`)."""
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        # processor_config.json goes first and comes back last: a save interrupted in between leaves a folder that
        # loading refuses, not new tokenizer files beside the old processor's settings
        (directory / PROCESSOR_CONFIG_NAME).unlink(missing_ok=True)
        self.tokenizer.save_pretrained(directory)
        # a processor without knowledge (the relation extractor's) writes no empty knowledge/ files
        assets = self.knowledge_assets
        has_knowledge = assets.kg is not None or assets.content_hash() != KnowledgeAssets().content_hash()
        if has_knowledge:
            assets.save_pretrained(directory, overwrite=False)
        config = {"processor_class": type(self).__name__, "format_version": FORMAT_VERSION, **self.processor_config()}
        if not has_knowledge:
            config["knowledge_assets"] = False
        (directory / PROCESSOR_CONFIG_NAME).write_text(json.dumps(config, indent=2, default=repr))

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
    ):
        """Upload the processor (tokenizer, ``processor_config.json``, ``knowledge/``) to ``repo_id`` in one commit;
        ``from_pretrained(repo_id)`` / ``AutoProcessor`` load it back."""
        return push_folder(
            self.save_pretrained,
            repo_id,
            commit_message=commit_message,
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
            default_message=f"Upload {type(self).__name__}",
            replaces=PROCESSOR_FILES,
        )

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, knowledge_assets: KnowledgeAssets | None = None, **kwargs
    ) -> KeplmProcessor:
        """Load a processor saved with :meth:`save_pretrained` (a directory or a Hub repo id; ``revision``,
        ``token``, ``cache_dir``, ``local_files_only``, ``force_download`` as for models). Called on the base
        class (or through ``AutoProcessor``) it returns the saved processor's class. ``knowledge_assets``: assets
        already loaded (the model's), used instead of reading ``knowledge/`` again when they are the saved ones."""
        path = pretrained_model_name_or_path
        location = pinned_location(path, kwargs)
        config_file = resolve_file(path, PROCESSOR_CONFIG_NAME, **location)
        legacy = config_file is None
        if legacy:
            config_file = resolve_file(path, LEGACY_PROCESSOR_CONFIG_NAME, **location)
        if config_file is None:
            raise FileNotFoundError(f"{path} has no {PROCESSOR_CONFIG_NAME}: it holds no saved keplm processor")
        config = read_json(config_file)
        if not legacy:
            check_format_version(config, config_file)
        config.pop("format_version", None)
        name = config.pop("processor_class", cls.__name__)
        klass = PROCESSOR_CLASSES.get(name)
        if klass is None or not issubclass(klass, cls):
            raise ValueError(f"{config_file} names processor class {name!r}, which is not a {cls.__name__}")
        with named_json_errors(f"the tokenizer of {path}"):  # transformers raises a bare JSONDecodeError
            tokenizer = AutoTokenizer.from_pretrained(path, **location)
        if config.pop("knowledge_assets", True):
            assets = KnowledgeAssets.from_pretrained(path, reuse=knowledge_assets, **location)
        else:  # saved without knowledge (no knowledge/ folder)
            assets = KnowledgeAssets()
        processor = klass(tokenizer, assets, **config)
        if resolve_file(path, "config.json", **location) is not None:  # a model saved beside it: do they agree?
            try:
                model_config = AutoConfig.from_pretrained(path, **location)
            except (OSError, ValueError):
                model_config = None
            if model_config is not None:
                processor.check_config(model_config)
        return processor


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of what decides a tokenizer's ids: its vocabulary (token → id, added tokens included) and, for a fast
    tokenizer, its normalizer (lower-casing, accent stripping), so another vocabulary or casing differs."""
    digest = hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode("utf-8"))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(json.dumps(json.loads(backend.to_str()).get("normalizer"), sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


__all__ = [
    "KeplmProcessor",
    "PROCESSOR_CLASSES",
    "annotation_columns_for",
    "as_annotation",
    "align_word_labels",
    "answer_token_positions",
    "tokenizer_fingerprint",
]
