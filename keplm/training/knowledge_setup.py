"""Knowledge, features and models for the run scripts: one place for what NER and QA share.

* :func:`prepare_processor` builds the :class:`~keplm.KalaProcessor` (tokenizer + knowledge assets): the entity
  vocabulary comes from the training split's mentions (linked against the KG or read from KALA annotations),
  pruned by frequency; a keplm checkpoint brings its own.
* :class:`NerFeaturizer` / :class:`QaFeaturizer` are the ``datasets.map(batched=True)`` functions and
  :func:`featurize` runs them with a fingerprint derived from the data, the vocabularies, the KG, the
  tokenizer and the feature arguments (hashing the processor's KG with ``dill`` on every call is avoidable).
* :func:`build_model` wraps a base encoder (``from_base_pretrained``) or reloads a keplm checkpoint.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterable

from transformers import AutoConfig, AutoTokenizer

from keplm.configuration import DEFAULT_KFM_LAYERS
from keplm.hub.assets import KnowledgeAssets
from keplm.knowledge import KnowledgeAnnotation, load_kg, read_kala_annotations
from keplm.tokenization import KalaProcessor

from .arguments import KnowledgeArguments, ModelArguments

logger = logging.getLogger(__name__)

EMPTY_ANNOTATION = KnowledgeAnnotation()


def _hub_kwargs(model_args: ModelArguments) -> dict:
    return {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision, "token": model_args.token}


def is_keplm_checkpoint(name_or_path: str, **hub_kwargs) -> bool:
    """Whether ``name_or_path`` is a saved keplm (KALA) model rather than a base encoder."""
    try:
        return AutoConfig.from_pretrained(name_or_path, **hub_kwargs).model_type == "kala"
    except (OSError, ValueError):
        return False


def system_config(knowledge_args: KnowledgeArguments, task: str) -> dict:
    """KalaConfig arguments of a system: the vanilla baseline, +1 layer, pointwise or relational KALA."""
    if knowledge_args.system == "vanilla":
        return {"retrieval_mode": "none", "num_extra_layers": 0}
    if knowledge_args.system == "more_params":
        return {"retrieval_mode": "none", "num_extra_layers": 1}
    kfm_layers = knowledge_args.kfm_layers or DEFAULT_KFM_LAYERS[task]
    return {"retrieval_mode": knowledge_args.system, "num_extra_layers": 0, "kfm_layers": list(kfm_layers),
            "sparse_entity_memory": knowledge_args.sparse_entity_memory}


# ---------------------------------------------------------------------------------------------- annotations
def load_annotations(knowledge_args: KnowledgeArguments) -> dict[str, dict[str, KnowledgeAnnotation]]:
    """``{split: {example id: annotation}}`` from ``--annotation_files`` (only with ``--knowledge annotations``)."""
    if knowledge_args.knowledge != "annotations":
        return {}
    return {split: read_kala_annotations(path) for split, path in knowledge_args.annotation_paths().items()}


def _unique_texts(dataset, task: str) -> Iterable[tuple[str, object]]:
    """(example id, text) of the training split; QA contexts repeat over questions and are counted once."""
    if task == "ner":
        yield from zip(dataset["id"], dataset["tokens"])
        return
    seen = set()
    for example_id, context in zip(dataset["id"], dataset["context"]):
        if context not in seen:
            seen.add(context)
            yield example_id, context


def training_entity_ids(dataset, task: str, linker=None, annotations=None) -> list[str]:
    """Entity id of every training mention, with repetition (for frequency pruning)."""
    ids = []
    missing = 0
    for example_id, text in _unique_texts(dataset, task):
        if annotations is not None:
            annotation = annotations.get(str(example_id))
            missing += annotation is None
        else:
            annotation = linker.link_tokens(text) if task == "ner" else linker.link(text)
        if annotation is not None:
            ids.extend(m.id for m in annotation.entities if m.id is not None)
    if missing:
        logger.warning("%d training examples have no annotation (treated as entity-free)", missing)
    return ids


def prepare_processor(
    model_args: ModelArguments,
    knowledge_args: KnowledgeArguments,
    train_dataset,
    task: str,
    annotations: dict[str, dict[str, KnowledgeAnnotation]] | None = None,
) -> KalaProcessor:
    """Tokenizer + knowledge assets: from a keplm checkpoint, or built from the training split's entities."""
    path = model_args.model_name_or_path
    hub = _hub_kwargs(model_args)
    if is_keplm_checkpoint(path, **hub):
        logger.info("%s is a keplm checkpoint: using its tokenizer, vocabularies and KG", path)
        if knowledge_args.kg:
            logger.warning("--kg is ignored: the checkpoint %s brings its own knowledge graph", path)
        return KalaProcessor.from_pretrained(path, **hub)
    tokenizer = AutoTokenizer.from_pretrained(path, **hub)
    linker_kwargs = {"max_neighbors_per_entity": knowledge_args.max_neighbors_per_entity,
                     "lowercase": not knowledge_args.link_case_sensitive}
    if not knowledge_args.uses_knowledge:
        return KalaProcessor(tokenizer, KnowledgeAssets(), linker_kwargs=linker_kwargs)
    if knowledge_args.knowledge == "link" and not knowledge_args.kg:
        raise ValueError("--knowledge link needs a knowledge graph: pass --kg (e.g. fb15k237:<dir>)")
    kg = load_kg(knowledge_args.kg) if knowledge_args.kg else None
    if kg is not None:
        logger.info("Loaded %r from %s", kg, knowledge_args.kg)
    if train_dataset is None:
        raise ValueError("building the entity vocabulary of a new model needs a training split (--do_train)")
    relation_ids: list[str] = []
    if knowledge_args.knowledge == "annotations":
        train_annotations = (annotations or {}).get("train")
        if train_annotations is None:
            raise ValueError("--knowledge annotations needs a train=PATH entry in --annotation_files")
        entity_ids = training_entity_ids(train_dataset, task, annotations=train_annotations)
        relation_ids = sorted({t.r for a in train_annotations.values() for t in a.triplets})
    else:
        linker = KalaProcessor(tokenizer, KnowledgeAssets(kg=kg), linker_kwargs=linker_kwargs).linker
        entity_ids = training_entity_ids(train_dataset, task, linker=linker)
    assets = KnowledgeAssets.build(
        entity_ids, relation_ids, kg=kg, min_count=knowledge_args.entity_min_count,
        max_entities=knowledge_args.max_entities,
    )
    logger.info(
        "Entity memory: %d rows from %d training mentions of %d distinct entities (min count %d); %d relations",
        assets.num_entities, len(entity_ids), len(set(entity_ids)), knowledge_args.entity_min_count,
        assets.num_relations,
    )
    return KalaProcessor(tokenizer, assets, linker_kwargs=linker_kwargs)


# ---------------------------------------------------------------------------------------------- features
def _annotations_hash(annotations: dict[str, KnowledgeAnnotation] | None) -> str | None:
    if annotations is None:
        return None
    payload = json.dumps({k: a.to_dict() for k, a in sorted(annotations.items())}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class _Featurizer:
    """A picklable ``datasets.map`` function: knowledge source + the processor's feature function."""

    def __init__(self, processor: KalaProcessor, source: str, annotations: dict[str, KnowledgeAnnotation] | None):
        if source not in ("link", "annotations", "none"):
            raise ValueError(f"unknown knowledge source {source!r}")
        if source == "link" and processor.knowledge_assets.kg is None:
            raise ValueError("linking needs a knowledge graph, and the processor's knowledge assets hold none")
        self.processor = processor
        self.source = source
        self.annotations = annotations or {}
        self._annotations_hash = _annotations_hash(annotations) if source == "annotations" else None

    def knowledge(self, example_ids) -> list[KnowledgeAnnotation | None]:
        if self.source == "link":
            return [None] * len(example_ids)  # the processor links the text
        if self.source == "none":
            return [EMPTY_ANNOTATION] * len(example_ids)
        return [self.annotations.get(str(i), EMPTY_ANNOTATION) for i in example_ids]

    def signature(self) -> dict:
        """Everything besides the input data that determines the features (for the cache fingerprint)."""
        processor = self.processor
        assets = processor.knowledge_assets
        from datasets.fingerprint import Hasher

        return {
            "featurizer": type(self).__name__,
            "source": self.source,
            "annotations": self._annotations_hash,
            "vocab": assets.content_hash(),
            "kg": assets.kg.content_hash() if assets.kg is not None else None,
            "tokenizer": Hasher.hash(processor.tokenizer),
            "use_inverse_relations": processor.use_inverse_relations,
            "linker_kwargs": processor.linker_kwargs,
        }

    def __getstate__(self):  # ship the processor to worker processes without its built linker automaton
        state = self.__dict__.copy()
        processor = copy.copy(self.processor)
        processor._linker = None
        state["processor"] = processor
        return state


class NerFeaturizer(_Featurizer):
    def __init__(self, processor, source, annotations=None, max_length=128, label_all_tokens=False, with_labels=True):
        super().__init__(processor, source, annotations)
        self.max_length = max_length
        self.label_all_tokens = label_all_tokens
        self.with_labels = with_labels

    def signature(self) -> dict:
        return super().signature() | {"max_length": self.max_length, "label_all_tokens": self.label_all_tokens,
                                      "with_labels": self.with_labels}

    def __call__(self, examples) -> dict:
        batch = {"tokens": examples["tokens"], "knowledge": self.knowledge(examples["id"])}
        if self.with_labels:
            batch["ner_tags"] = examples["ner_tags"]
        return self.processor.prepare_ner_features(
            batch, label_column="ner_tags" if self.with_labels else None, annotation_column="knowledge",
            max_length=self.max_length, label_all_tokens=self.label_all_tokens,
        )


class QaFeaturizer(_Featurizer):
    def __init__(self, processor, source, annotations=None, max_length=384, doc_stride=128, training=True):
        super().__init__(processor, source, annotations)
        self.max_length = max_length
        self.doc_stride = doc_stride
        self.training = training

    def signature(self) -> dict:
        return super().signature() | {"max_length": self.max_length, "doc_stride": self.doc_stride,
                                      "training": self.training}

    def __call__(self, examples) -> dict:
        batch = {key: examples[key] for key in ("id", "question", "context")}
        if self.training:
            batch["answers"] = examples["answers"]
        batch["knowledge"] = self.knowledge(examples["id"])
        return self.processor.prepare_qa_features(
            batch, max_length=self.max_length, doc_stride=self.doc_stride, training=self.training,
            annotation_column="knowledge", question_annotation_column=None,
        )


def features_fingerprint(dataset, featurizer: _Featurizer) -> str:
    payload = json.dumps({"data": dataset._fingerprint, **featurizer.signature()}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def featurize(dataset, featurizer: _Featurizer, num_proc: int | None = None, overwrite_cache: bool = False,
              desc: str | None = None):
    """``dataset.map(featurizer, batched=True)``, dropping the raw columns, with a content-derived fingerprint."""
    return dataset.map(
        featurizer,
        batched=True,
        num_proc=num_proc,
        remove_columns=dataset.column_names,
        load_from_cache_file=not overwrite_cache,
        new_fingerprint=features_fingerprint(dataset, featurizer),
        desc=desc,
    )


def knowledge_source(knowledge_args: KnowledgeArguments, processor: KalaProcessor, model_config=None) -> str:
    """The knowledge source the features are built from: none when the model reads no knowledge."""
    uses = model_config.uses_knowledge if model_config is not None else knowledge_args.uses_knowledge
    if not uses or knowledge_args.knowledge == "none":
        return "none"
    return knowledge_args.knowledge


# ---------------------------------------------------------------------------------------------- model
def build_model(model_class, model_args: ModelArguments, knowledge_args: KnowledgeArguments,
                processor: KalaProcessor, task: str, **config_kwargs):
    """A KALA model around ``model_name_or_path`` (a base encoder), or the keplm checkpoint itself."""
    path = model_args.model_name_or_path
    hub = _hub_kwargs(model_args)
    if is_keplm_checkpoint(path, **hub):
        model = model_class.from_pretrained(path, **hub, **config_kwargs)
    else:
        system = system_config(knowledge_args, task)
        assets = processor.knowledge_assets if system["retrieval_mode"] != "none" else None
        model = model_class.from_base_pretrained(path, knowledge_assets=assets, **system, **config_kwargs)
    return model


__all__ = [
    "is_keplm_checkpoint",
    "system_config",
    "load_annotations",
    "training_entity_ids",
    "prepare_processor",
    "NerFeaturizer",
    "QaFeaturizer",
    "featurize",
    "features_fingerprint",
    "knowledge_source",
    "build_model",
]
