"""Knowledge, features and models for the run scripts: one place for what NER and QA share.

The steps, in order:

1. :func:`prepare_processor`: a keplm checkpoint's processor, or the base encoder's tokenizer with the ``--kg``
   knowledge graph.
2. :func:`add_knowledge`: every split gets a ``knowledge`` column (mentions + facts) from the one linking pass
   (:meth:`~keplm.KeplmProcessor.link_dataset`), from KALA annotation files, or empty. Everything after reads it.
3. :func:`build_entity_vocabulary`: a new model's entity memory from the training split's mentions.
4. :func:`build_model`, then :func:`featurize` with a :class:`Featurizer` (``datasets.map`` cached under a
   fingerprint of the data, the processor and the feature arguments).
"""

from __future__ import annotations

import logging

from transformers import AutoConfig, AutoTokenizer

from keplm.configuration import DEFAULT_KFM_LAYERS, KeplmConfig
from keplm.data import TEXT_COLUMNS
from keplm.io_utils import fingerprinted_map
from keplm.knowledge import (
    KNOWLEDGE_FEATURE,
    KnowledgeAnnotation,
    KnowledgeAssets,
    load_kg,
    read_kala_annotations,
)
from keplm.tokenization import KalaProcessor, KeplmProcessor

from .arguments import KnowledgeArguments, ModelArguments

logger = logging.getLogger(__name__)

EMPTY_ANNOTATION = KnowledgeAnnotation().to_dict()


def is_keplm_checkpoint(name_or_path: str, **hub_kwargs) -> bool:
    """Whether ``name_or_path`` is a saved keplm model rather than a base encoder."""
    try:
        return isinstance(AutoConfig.from_pretrained(name_or_path, **hub_kwargs), KeplmConfig)
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
            "sparse_entity_memory": knowledge_args.sparse_entity_memory,
            "entity_dropout": knowledge_args.entity_dropout,
            **({"relation_message": knowledge_args.relation_message} if knowledge_args.system == "relational" else {})}


# ---------------------------------------------------------------------------------------------- knowledge
def checkpoint_processor(path: str, kg: str | None = None, **hub) -> KeplmProcessor:
    """A keplm checkpoint's processor; with ``kg`` (a ``load_kg`` spec) a knowledge update without retraining: the
    same vocabularies, the new graph (``processor.update_knowledge``; the model builders give the model the same
    assets), new entities read as unseen, through their facts."""
    processor = KeplmProcessor.from_pretrained(path, **hub)
    if kg:
        logger.info("--kg %s replaces the checkpoint's knowledge graph", kg)
        processor.update_knowledge(load_kg(kg))
    return processor


def prepare_processor(model_args: ModelArguments, knowledge_args: KnowledgeArguments) -> KeplmProcessor:
    """The processor of a keplm checkpoint, or a new one: the base encoder's tokenizer and the ``--kg`` graph
    (its entity vocabulary comes later, from the training split: :func:`build_entity_vocabulary`)."""
    path = model_args.model_name_or_path
    hub = model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        logger.info("%s is a keplm checkpoint: using its tokenizer, vocabularies and KG", path)
        processor = checkpoint_processor(path, knowledge_args.kg if knowledge_args.knowledge != "none" else None,
                                         **hub)
        if processor.kg is None and knowledge_args.knowledge == "link":
            # a baseline's checkpoint keeps no KG: nothing to link against, and its model reads no knowledge
            logger.info("%s holds no knowledge graph: its inputs are not linked (--kg would give the seen/unseen "
                        "subsets)", path)
            knowledge_args.knowledge = "none"
        return processor
    tokenizer = AutoTokenizer.from_pretrained(path, **hub)
    linker_kwargs = knowledge_args.linker_kwargs(max_neighbors_per_entity=knowledge_args.max_neighbors_per_entity)
    if knowledge_args.knowledge == "link" and not knowledge_args.kg:
        raise ValueError("--knowledge link needs a knowledge graph: pass --kg (e.g. fb15k237:<dir>)")
    kg = None
    if knowledge_args.kg and knowledge_args.knowledge != "none":
        logger.info("Loading the knowledge graph %s", knowledge_args.kg)
        kg = load_kg(knowledge_args.kg)
        logger.info("Loaded %r", kg)
    return KalaProcessor(tokenizer, KnowledgeAssets(kg=kg), linker_kwargs=linker_kwargs)


def add_knowledge(raw, processor: KeplmProcessor, knowledge_args: KnowledgeArguments, task: str,
                  num_proc: int | None = None, report: dict | None = None):
    """Every split with a ``knowledge`` column: the processor's linking pass (``--knowledge link``), the KALA
    annotation files (``annotations``, by example id), or empty annotations (``none``). ``report`` receives, per
    split read from annotation files, ``{split: {"examples", "missing"}}``: examples without an annotation (each
    is treated as entity-free and counted in a WARNING)."""
    column, words = TEXT_COLUMNS[task]
    source = knowledge_args.knowledge
    files = knowledge_args.annotation_paths() if source == "annotations" else {}
    for split in list(raw):
        if source == "link":
            raw[split] = processor.link_dataset(raw[split], column, split_into_words=words, num_proc=num_proc,
                                                desc=f"Linking {split}")
        elif source == "annotations" and split in files:
            raw[split] = attach_annotations(raw[split], read_kala_annotations(files[split]), files[split],
                                            report=None if report is None else report.setdefault(split, {}))
        else:
            if source == "annotations":
                logger.warning("no --annotation_files entry for the %s split: its examples get no knowledge", split)
            raw[split] = attach_annotations(raw[split], {}, None)
    return raw


def attach_annotations(dataset, annotations: dict[str, KnowledgeAnnotation], path: str | None,
                       report: dict | None = None):
    """The dataset with a ``knowledge`` column holding each example's annotation by id (empty when missing; every
    example id is looked up, e.g. every question of a QA context); ``report`` gets the counts."""
    ids = [str(i) for i in dataset["id"]]
    missing = [i for i in ids if i not in annotations]
    if report is not None:
        report.update(examples=len(ids), missing=len(missing))
    if path is not None and missing:
        logger.warning("%d of %d examples have no annotation in %s (treated as entity-free), e.g. ids %s",
                       len(missing), len(ids), path, missing[:5])
    column = [annotations[i].to_dict() if i in annotations else EMPTY_ANNOTATION for i in ids]
    features = dataset.features.copy()
    features["knowledge"] = KNOWLEDGE_FEATURE
    if "knowledge" in dataset.column_names:
        dataset = dataset.remove_columns("knowledge")
    return dataset.add_column("knowledge", column, feature=features["knowledge"])


def training_entity_ids(train_dataset, task: str) -> list[str]:
    """Entity id of every training mention, with repetition (for frequency pruning); a QA context repeated over
    its questions counts once."""
    rows = train_dataset["knowledge"]
    if task == "qa":
        first = {}
        for index, context in enumerate(train_dataset["context"]):
            first.setdefault(context, index)
        rows = [rows[i] for i in sorted(first.values())]
    return [m["id"] for row in rows for m in row["entities"] if m["id"] is not None]


def build_entity_vocabulary(processor: KeplmProcessor, raw, model_args: ModelArguments,
                            knowledge_args: KnowledgeArguments, task: str) -> KeplmProcessor:
    """A new KALA model's entity vocabulary from the training split's mentions, pruned by frequency; a
    checkpoint keeps its own, and a system without knowledge needs none."""
    if not knowledge_args.uses_knowledge or is_keplm_checkpoint(model_args.model_name_or_path,
                                                                 **model_args.hub_kwargs()):
        return processor
    if "train" not in raw:
        raise ValueError("building the entity vocabulary of a new model needs a training split (--do_train)")
    entity_ids = training_entity_ids(raw["train"], task)
    if not entity_ids:
        logger.warning("the %s system reads knowledge, but its training split has no linked entity mention: the "
                       "model will train as the vanilla baseline would (check --kg and the linking settings)",
                       knowledge_args.system)
    relation_ids = sorted({t["r"] for row in raw["train"]["knowledge"] for t in row["triplets"]})
    assets = KnowledgeAssets.build(entity_ids, relation_ids, kg=processor.kg, min_count=knowledge_args.entity_min_count,
                                   max_entities=knowledge_args.max_entities)
    logger.info(
        "Entity memory: %d rows from %d training mentions of %d distinct entities (min count %d); %d relations",
        assets.num_entities, len(entity_ids), len(set(entity_ids)), knowledge_args.entity_min_count,
        assets.num_relations,
    )
    processor.knowledge_assets = assets
    return processor


# ---------------------------------------------------------------------------------------------- features
class Featurizer:
    """A picklable ``datasets.map(batched=True)`` function: one of the processor's feature functions
    (``prepare_ner_features``, ``prepare_qa_features``) with fixed arguments. ``with_knowledge=False`` (a model
    that reads no knowledge) leaves the knowledge inputs out."""

    def __init__(self, processor: KeplmProcessor, method: str, with_knowledge: bool = True, **arguments):
        if not callable(getattr(processor, method, None)):
            raise ValueError(f"{type(processor).__name__} has no feature function {method!r}")
        self.processor, self.method, self.with_knowledge, self.arguments = processor, method, with_knowledge, arguments

    def __call__(self, examples) -> dict:
        return getattr(self.processor, self.method)(examples, with_knowledge=self.with_knowledge, **self.arguments)

    def signature(self) -> dict:
        """Everything besides the input data that determines the features (for the cache fingerprint)."""
        return {**self.processor.signature(), "method": self.method, "with_knowledge": self.with_knowledge,
                "arguments": self.arguments}


def featurize(dataset, featurizer: Featurizer, num_proc: int | None = None, overwrite_cache: bool = False,
              desc: str | None = None):
    """``dataset.map(featurizer, batched=True)``, dropping the raw columns, under a content-derived fingerprint."""
    return fingerprinted_map(dataset, featurizer, featurizer.signature(), num_proc=num_proc,
                             overwrite_cache=overwrite_cache, remove_columns=dataset.column_names, desc=desc)


# ---------------------------------------------------------------------------------------------- model
def build_model(model_class, model_args: ModelArguments, knowledge_args: KnowledgeArguments,
                processor: KeplmProcessor, task: str, **config_kwargs):
    """A KALA model around ``model_name_or_path`` (a base encoder), or the keplm checkpoint itself (with the
    processor's assets when ``--kg`` updated its knowledge graph)."""
    path = model_args.model_name_or_path
    hub = model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        model = model_class.from_pretrained(path, **hub, **config_kwargs)
        if knowledge_args.kg and getattr(model, "knowledge_assets", None) is not None:
            model.set_knowledge_assets(processor.knowledge_assets)  # prepare_processor's knowledge update
        return model
    system = system_config(knowledge_args, task)
    assets = processor.knowledge_assets if system["retrieval_mode"] != "none" else None
    return model_class.from_base_pretrained(path, knowledge_assets=assets, **system,
                                            use_inverse_relations=processor.use_inverse_relations, **config_kwargs)


# ---------------------------------------------------------------------------------------------- Roof-Transformer
def prepare_roof_knowledge(model_args: ModelArguments, roof_args, raw, text_columns, num_proc: int | None = None):
    """The Roof-Transformer processor (a checkpoint's, or the base tokenizer with ``--kg`` and the selection and
    verbalisation settings) and the splits with what selection reads: the linked ``knowledge`` columns of their
    text columns (one linking pass per split), or the ``--triple_files`` lists."""
    from keplm.tokenization.processing_roof_transformer import (
        RoofTransformerProcessor,
        add_triples_column,
        read_triple_lists,
    )

    path = model_args.model_name_or_path
    if is_keplm_checkpoint(path, **model_args.hub_kwargs()):
        processor = checkpoint_processor(path, roof_args.kg if roof_args.uses_knowledge else None,
                                         **model_args.hub_kwargs())
    else:
        kg = None
        if roof_args.uses_knowledge and roof_args.kg:
            logger.info("Loading the knowledge graph %s", roof_args.kg)
            kg = load_kg(roof_args.kg)
            logger.info("Loaded %r", kg)
        processor = RoofTransformerProcessor(
            AutoTokenizer.from_pretrained(path, **model_args.hub_kwargs()), KnowledgeAssets(kg=kg),
            selection=roof_args.selection, verbalization=roof_args.verbalization,
            max_knowledge_length=roof_args.max_knowledge_length,
            linker_kwargs=roof_args.linker_kwargs())
    if not roof_args.uses_knowledge:
        return processor.without_knowledge(), raw
    files = roof_args.triple_paths()
    if files:
        for split in list(raw):
            if split not in files:
                raise ValueError(f"--triple_files has no entry for the {split} split")
            id_column = "idx" if "idx" in raw[split].column_names else "id"
            raw[split] = add_triples_column(raw[split], read_triple_lists(files[split]), id_column=id_column)
        return processor, raw
    if processor.kg is None:
        raise ValueError("Roof-Transformer's knowledge needs --kg (or --triple_files)")
    for split in list(raw):
        raw[split] = processor.link_text_columns(raw[split], list(text_columns), num_proc=num_proc)
    return processor, raw


def build_roof_model(model_class, model_args: ModelArguments, roof_args, processor: KeplmProcessor,
                     **config_kwargs):
    """A Roof-Transformer (or baseline) model around ``model_name_or_path``, or the keplm checkpoint itself."""
    path = model_args.model_name_or_path
    if is_keplm_checkpoint(path, **model_args.hub_kwargs()):
        model = model_class.from_pretrained(path, **model_args.hub_kwargs())
        if roof_args.kg and getattr(model, "knowledge_assets", None) is not None:
            model.set_knowledge_assets(processor.knowledge_assets)  # prepare_roof_knowledge's knowledge update
    else:
        assets = processor.knowledge_assets if roof_args.system == "roof" else None
        model = model_class.from_base_pretrained(path, knowledge_assets=assets, **roof_args.model_config(),
                                                 **config_kwargs)
    if getattr(roof_args, "knowledge_cache_dir", None) and model.knowledge_cache is not None:
        model.set_knowledge_cache_directory(roof_args.knowledge_cache_dir)
    return model


def maybe_add_lora(model, model_args: ModelArguments):
    """``--lora_r``: LoRA adapters on the encoder (peft), the knowledge modules and head trained fully."""
    if model_args.lora_r is None:
        return model
    from keplm.modeling.lora import add_lora

    peft_model = add_lora(model, r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout,
                          target_modules=model_args.lora_target_modules)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    logger.info("LoRA r=%d on %s: %d of %d parameters train", model_args.lora_r, model_args.lora_target_modules,
                trainable, sum(p.numel() for p in peft_model.parameters()))
    return peft_model


def load_for_inference(model_dir: str, auto_class):
    """A saved model through its Auto class, or a saved LoRA adapter rebuilt on its base (``load_lora``)."""
    import os

    if os.path.isfile(os.path.join(model_dir, "adapter_config.json")):
        from keplm.modeling.lora import load_lora

        return load_lora(model_dir)
    return auto_class.from_pretrained(model_dir)


__all__ = [
    "prepare_roof_knowledge",
    "build_roof_model",
    "maybe_add_lora",
    "load_for_inference",
    "is_keplm_checkpoint",
    "system_config",
    "prepare_processor",
    "add_knowledge",
    "attach_annotations",
    "training_entity_ids",
    "build_entity_vocabulary",
    "Featurizer",
    "featurize",
    "build_model",
]
