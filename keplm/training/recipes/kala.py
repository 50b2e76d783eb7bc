"""KALA's run recipe: its options (the systems vanilla, +1 layer, pointwise and relational; the knowledge source;
the knowledge modules' training settings) and its steps in the task scripts.

In order: :func:`prepare_processor` (a keplm checkpoint's processor, or the base encoder's tokenizer with the
``--kg`` graph); :func:`add_knowledge` (every split gets a ``knowledge`` column, mentions + facts, from the one
linking pass, from KALA annotation files, or empty; everything after reads it); :func:`build_entity_vocabulary` (a
new model's entity memory from the training split's mentions); :func:`build_model`; the graph collator, the entity
memory's initialisation (appendix B.1), the knowledge modules' parameter groups and KALA 5.4's unseen-entity subsets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

from transformers import AutoTokenizer

from keplm.configuration import DEFAULT_KFM_LAYERS
from keplm.data import TEXT_COLUMNS
from keplm.data.collator import KeplmDataCollator
from keplm.knowledge import KNOWLEDGE_FEATURE, KnowledgeAnnotation, KnowledgeAssets, load_kg, read_kala_annotations
from keplm.modeling.modeling_kala import ENTITY_MEMORY_OPTIMIZERS
from keplm.tokenization import KalaProcessor, KeplmProcessor
from keplm.training.optim import schedule_has_warmup

from ..arguments import LinkingArguments, ModelArguments, option, split_paths
from ..entity_init import initialize_entity_memory_from_encoder
from ..knowledge_setup import checkpoint_processor, is_keplm_checkpoint
from ..run_recipe import RunRecipe
from ..runtime import flatten, linked_share
from ..subsets import UnseenEntityCounter

logger = logging.getLogger(__name__)

EMPTY_ANNOTATION = KnowledgeAnnotation().to_dict()
SYSTEMS = ("vanilla", "more_params", "pointwise", "relational")
#: the knowledge modules' own warm-up, a share of the training steps (--knowledge_warmup_steps): at 0.1, the encoder's,
#: the 5e-4 knowledge rate cost 8 F1 points on WNUT-17 (29.3 vs 37.2 before it); at 0.5 it got 38.1 and 38.6 (seeds 1,
#: 2) and the synthetic checks still pass (docs/knowledge_checks.md)
DEFAULT_KNOWLEDGE_WARMUP = 0.5


@dataclass
class KnowledgeArguments(LinkingArguments):
    _argument_group_name = "KALA (--model_type kala): knowledge and systems"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "entity_dropout": "[0, 1)",
        "entity_min_count": "[1, inf)",
        "max_entities": "[1, inf)",
        "max_neighbors_per_entity": "[0, inf)",
        "knowledge_learning_rate": "[0, inf)",
        "graph_pad_to_multiple_of": "[1, inf)",
        "entity_memory_learning_rate": "[0, inf)",
        "knowledge_warmup_steps": "[0, inf)",
        "knowledge_weight_decay": "[0, inf)",
    }

    knowledge: Literal["link", "annotations", "none"] = option(
        "link",
        "Where entity mentions and facts come from: 'link' (dictionary-link the text against --kg), "
        "'annotations' (precomputed KALA JSON, --annotation_files) or 'none' (no knowledge).",
    )
    kg: str | None = option(
        None,
        "Knowledge graph spec for keplm.knowledge.load_kg, e.g. 'fb15k237:<dir>' or 'trex:<dir>'. "
        "With a keplm checkpoint: a knowledge update without retraining (the checkpoint's vocabularies, "
        "this graph; processor.update_knowledge).",
    )
    annotation_files: list[str] | None = option(
        None, "KALA annotation JSON per split as SPLIT=PATH (train=..., validation=..., test=...), keyed by example id."
    )
    system: Literal["vanilla", "more_params", "pointwise", "relational"] = option(
        "relational",
        "vanilla fine-tuning, more_params (+1 transformer layer, no knowledge), pointwise (entity "
        "memory only) or relational (KALA: entity memory + relational retrieval).",
    )
    kfm_layers: list[int] | None = option(
        None, "Encoder layers with knowledge modulation (negative = from the end); default per task."
    )
    relation_message: Literal["entity", "composition"] = option(
        "composition",
        "What a KG neighbour sends in relational retrieval: 'composition' (the neighbour's vector "
        "composed with the fact's relation, e_j + W_m r_ij; keplm's default) or 'entity' (KALA eq. 3: "
        "the neighbour's vector only, the relation weighs it). docs/knowledge_checks.md has the "
        "measurements.",
    )
    entity_dropout: float = option(
        0.3,
        "In training, the share of mentioned entities that read the null row as unseen ones do, so "
        "the model learns to represent a mention from its KG neighbours (keplm's default; the paper has "
        "0).",
    )
    entity_min_count: int = option(1, "Entities mentioned fewer times in training are treated as unseen (null).")
    max_entities: int | None = option(None, "Keep at most this many frequent entities.")
    max_neighbors_per_entity: int = option(8, "KG facts to outside neighbours kept per linked entity ('link' mode).")
    init_entity_memory: bool = option(
        False, "Initialise the entity memory with the encoder's mean mention states (KALA appendix B.1)."
    )
    knowledge_learning_rate: float | None = option(
        5e-4,
        "Learning rate of KALA's knowledge modules (entity memory, KFM, relational retrieval), "
        "which start from random weights: at the encoder's rate they barely move in a short fine-tuning "
        "and the model ignores its KG (docs/knowledge_checks.md). 0: --learning_rate. Knowledge systems "
        "only.",
    )
    graph_pad_to_multiple_of: int | None = option(
        None, "Pad batched graph nodes/edges to a multiple of this (fewer shapes for torch_compile)."
    )
    sparse_entity_memory: bool = option(
        False,
        "Sparse entity-memory gradients updated by SparseAdam (lazy Adam) or row-wise AdaGrad "
        "(--entity_memory_optimizer), no weight decay on the memory: much cheaper steps with large "
        "memories. Single process or gloo DDP; under --torch_compile the lookup falls back to eager.",
    )
    entity_memory_optimizer: str = option(
        "adam",
        "Optimizer of the entity memory: 'adam' (the Trainer's optimizer; SparseAdam with "
        "--sparse_entity_memory) or 'rowwise_adagrad' (its own optimizer, one accumulator per row: the "
        "table's optimizer state shrinks from 8 B per weight to 4 B per row; with dense gradients the "
        "model still compiles with --torch_compile).",
        choices=list(ENTITY_MEMORY_OPTIMIZERS),
    )
    entity_memory_learning_rate: float | None = option(
        None,
        "Learning rate of the entity memory when it has its own optimizer (SparseAdam or "
        "row-wise AdaGrad; default: --knowledge_learning_rate, else "
        "--learning_rate). Row-wise AdaGrad usually wants a larger one than Adam.",
    )

    knowledge_warmup_steps: float | None = option(
        None,
        "A warm-up of the knowledge modules' own (entity memory, KFM, relational retrieval) in the "
        "--lr_scheduler_type schedule: >= 1 steps, < 1 a share of the training steps, as --warmup_steps. "
        f"Default: {DEFAULT_KNOWLEDGE_WARMUP} (half the steps) with a schedule that has warm-ups (linear, "
        "cosine, ...), which keeps the 5e-4 knowledge rate from hurting noisy real data "
        "(docs/knowledge_checks.md); with other schedules none. Knowledge systems only.",
    )

    knowledge_optimizer: str | None = option(
        None,
        "'adamw': the knowledge modules train with an AdamW of their own (at "
        "--knowledge_learning_rate and --knowledge_weight_decay) instead of in the Trainer's optimizer: the "
        "paper's T5 setup with --optim adafactor for the rest (KALA 5.6). Knowledge systems only.",
        choices=["adamw"],
    )
    knowledge_weight_decay: float = option(0.01, "Weight decay of --knowledge_optimizer adamw (paper: 0.01).")

    def __post_init__(self):
        if self.knowledge == "annotations" and not self.annotation_files:
            raise ValueError("--knowledge annotations needs --annotation_files train=PATH [validation=PATH ...]")
        self.annotation_paths()  # validates the SPLIT=PATH entries

    @property
    def uses_knowledge(self) -> bool:
        """Whether the chosen system reads knowledge (vanilla and more_params do not)."""
        return self.system in ("pointwise", "relational") and self.knowledge != "none"

    def parameter_group_options(self, lr_scheduler_type="linear", lr_scheduler_kwargs: dict | None = None) -> dict:
        """The KALA model's training options (``KalaPreTrainedModel.parameter_groups``) set on the command line, the
        knowledge warm-up defaulting to :data:`DEFAULT_KNOWLEDGE_WARMUP` where ``lr_scheduler_type`` has warm-ups."""
        knowledge_lr = self.knowledge_learning_rate
        if not self.uses_knowledge or (knowledge_lr is not None and knowledge_lr <= 0):
            knowledge_lr = None  # the encoder's rate; a baseline has no knowledge modules to give a rate
        warmup = self.knowledge_warmup_steps
        if warmup is None and self.uses_knowledge and schedule_has_warmup(lr_scheduler_type, lr_scheduler_kwargs):
            warmup = DEFAULT_KNOWLEDGE_WARMUP
        own_optimizer = self.knowledge_optimizer if self.uses_knowledge else None
        return {
            "knowledge_learning_rate": knowledge_lr,
            **(
                {"knowledge_optimizer": own_optimizer, "knowledge_weight_decay": self.knowledge_weight_decay}
                if own_optimizer
                else {}
            ),
            "entity_memory_optimizer": self.entity_memory_optimizer,
            "entity_memory_learning_rate": self.entity_memory_learning_rate,
            "knowledge_warmup_steps": warmup,
        }

    def annotation_paths(self) -> dict[str, str]:
        return split_paths(self.annotation_files, "--annotation_files")


def system_config(knowledge_args: KnowledgeArguments, task: str) -> dict:
    """KalaConfig arguments of a system: the vanilla baseline, +1 layer, pointwise or relational KALA."""
    if knowledge_args.system == "vanilla":
        return {"retrieval_mode": "none", "num_extra_layers": 0}
    if knowledge_args.system == "more_params":
        return {"retrieval_mode": "none", "num_extra_layers": 1}
    kfm_layers = knowledge_args.kfm_layers or DEFAULT_KFM_LAYERS[task]
    return {
        "retrieval_mode": knowledge_args.system,
        "num_extra_layers": 0,
        "kfm_layers": list(kfm_layers),
        "sparse_entity_memory": knowledge_args.sparse_entity_memory,
        "entity_dropout": knowledge_args.entity_dropout,
        **({"relation_message": knowledge_args.relation_message} if knowledge_args.system == "relational" else {}),
    }


# ---------------------------------------------------------------------------------------------- knowledge
def prepare_processor(model_args: ModelArguments, knowledge_args: KnowledgeArguments) -> KeplmProcessor:
    """The processor of a keplm checkpoint, or a new one: the base encoder's tokenizer and the ``--kg`` graph
    (its entity vocabulary comes later, from the training split: :func:`build_entity_vocabulary`)."""
    path = model_args.model_name_or_path
    hub = model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        logger.info("%s is a keplm checkpoint: using its tokenizer, vocabularies and KG", path)
        processor = checkpoint_processor(path, knowledge_args.kg if knowledge_args.knowledge != "none" else None, **hub)
        if processor.kg is None and knowledge_args.knowledge == "link":
            # a baseline's checkpoint keeps no KG: nothing to link against, and its model reads no knowledge
            logger.info(
                "%s holds no knowledge graph: its inputs are not linked (--kg would give the seen/unseen subsets)", path
            )
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


def add_knowledge(
    raw,
    processor: KeplmProcessor,
    knowledge_args: KnowledgeArguments,
    task: str,
    num_proc: int | None = None,
    report: dict | None = None,
):
    """Every split with a ``knowledge`` column: the processor's linking pass (``--knowledge link``), the KALA
    annotation files (``annotations``, by example id), or empty annotations (``none``). ``report`` receives, per
    split read from annotation files, ``{split: {"examples", "missing"}}``: examples without an annotation (each
    is treated as entity-free and counted in a WARNING)."""
    column, words = TEXT_COLUMNS[task]
    source = knowledge_args.knowledge
    files = knowledge_args.annotation_paths() if source == "annotations" else {}
    for split in list(raw):
        if source == "link":
            raw[split] = processor.link_dataset(
                raw[split], column, split_into_words=words, num_proc=num_proc, desc=f"Linking {split}"
            )
        elif source == "annotations" and split in files:
            raw[split] = attach_annotations(
                raw[split],
                read_kala_annotations(files[split]),
                files[split],
                report=None if report is None else report.setdefault(split, {}),
            )
        else:
            if source == "annotations":
                logger.warning("no --annotation_files entry for the %s split: its examples get no knowledge", split)
            raw[split] = attach_annotations(raw[split], {}, None)
    return raw


def attach_annotations(
    dataset, annotations: dict[str, KnowledgeAnnotation], path: str | None, report: dict | None = None
):
    """The dataset with a ``knowledge`` column holding each example's annotation by id (empty when missing; every
    example id is looked up, e.g. every question of a QA context); ``report`` gets the counts."""
    ids = [str(i) for i in dataset["id"]]
    missing = [i for i in ids if i not in annotations]
    if report is not None:
        report.update(examples=len(ids), missing=len(missing))
    if path is not None and missing:
        logger.warning(
            "%d of %d examples have no annotation in %s (treated as entity-free), e.g. ids %s",
            len(missing),
            len(ids),
            path,
            missing[:5],
        )
    column = [annotations[i].to_dict() if i in annotations else EMPTY_ANNOTATION for i in ids]
    if "knowledge" in dataset.column_names:
        dataset = dataset.remove_columns("knowledge")
    return dataset.add_column("knowledge", column, feature=KNOWLEDGE_FEATURE)


def training_entity_ids(train_dataset, task: str) -> list[str]:
    """Entity id of every training mention, with repetition (for frequency pruning); a QA context repeated over
    its questions counts once."""
    rows = train_dataset["knowledge"]
    if TEXT_COLUMNS[task][0] == "context":  # extractive or generative QA
        first = {}
        for index, context in enumerate(train_dataset["context"]):
            first.setdefault(context, index)
        rows = [rows[i] for i in sorted(first.values())]
    return [m["id"] for row in rows for m in row["entities"] if m["id"] is not None]


def build_entity_vocabulary(
    processor: KeplmProcessor, raw, model_args: ModelArguments, knowledge_args: KnowledgeArguments, task: str
) -> KeplmProcessor:
    """A new KALA model's entity vocabulary from the training split's mentions, pruned by frequency; a
    checkpoint keeps its own, and a system without knowledge needs none."""
    if not knowledge_args.uses_knowledge or is_keplm_checkpoint(
        model_args.model_name_or_path, **model_args.hub_kwargs()
    ):
        return processor
    if "train" not in raw:
        raise ValueError("building the entity vocabulary of a new model needs a training split (--do_train)")
    entity_ids = training_entity_ids(raw["train"], task)
    if not entity_ids:
        logger.warning(
            "the %s system reads knowledge, but its training split has no linked entity mention: the "
            "model will train as the vanilla baseline would (check --kg and the linking settings)",
            knowledge_args.system,
        )
    relation_ids = sorted({t["r"] for row in raw["train"]["knowledge"] for t in row["triplets"]})
    assets = KnowledgeAssets.build(
        entity_ids,
        relation_ids,
        kg=processor.kg,
        min_count=knowledge_args.entity_min_count,
        max_entities=knowledge_args.max_entities,
    )
    logger.info(
        "Entity memory: %d rows from %d training mentions of %d distinct entities (min count %d); %d relations",
        assets.num_entities,
        len(entity_ids),
        len(set(entity_ids)),
        knowledge_args.entity_min_count,
        assets.num_relations,
    )
    processor.knowledge_assets = assets
    return processor


# ---------------------------------------------------------------------------------------------- model
def build_model(
    model_class,
    model_args: ModelArguments,
    knowledge_args: KnowledgeArguments,
    processor: KeplmProcessor,
    task: str,
    **config_kwargs,
):
    """A KALA model around ``model_name_or_path`` (a base encoder), or the keplm checkpoint itself (with the
    processor's assets when ``--kg`` updated its knowledge graph)."""
    path = model_args.model_name_or_path
    hub = model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        if knowledge_args.sparse_entity_memory:  # a training choice, not the architecture: it applies to checkpoints
            config_kwargs["sparse_entity_memory"] = True
        # the processor's assets when they are the checkpoint's: the process holds one KG, not one per object
        model = model_class.from_pretrained(path, knowledge_assets=processor.knowledge_assets, **hub, **config_kwargs)
        if knowledge_args.kg and getattr(model, "knowledge_assets", None) is not None:
            model.set_knowledge_assets(processor.knowledge_assets)  # prepare_processor's knowledge update
        return model
    system = system_config(knowledge_args, task)
    assets = processor.knowledge_assets if system["retrieval_mode"] != "none" else None
    return model_class.from_base_pretrained(
        path, knowledge_assets=assets, **system, use_inverse_relations=processor.use_inverse_relations, **config_kwargs
    )


def knowledge_coverage(processor, raw, uses_knowledge: bool) -> dict:
    """Per split, how the linked entity ids meet the KG and the entity memory (unknown ids apart from unseen ones,
    ``KalaProcessor.entity_coverage``), flattened for the results JSON; empty when the model reads no knowledge."""
    if not uses_knowledge or not hasattr(processor, "entity_coverage"):
        return {}
    return {
        key: value
        for split in raw
        if "knowledge" in raw[split].column_names
        for key, value in flatten(processor.entity_coverage(raw[split]["knowledge"]), f"{split}_entities").items()
    }


class KalaRunRecipe(RunRecipe):
    arguments: ClassVar[type] = KnowledgeArguments
    tasks: ClassVar[tuple[str, ...]] = ("ner", "qa", "generative_qa")

    def prepare(self, raw, text_columns, num_proc=None):
        self.annotation_report = {}
        processor = prepare_processor(self.model_args, self.args)
        raw = add_knowledge(raw, processor, self.args, self.task, num_proc, report=self.annotation_report)
        return build_entity_vocabulary(processor, raw, self.model_args, self.args, self.task), raw

    def build_model(self, processor, **config_kwargs):
        return build_model(self.model_class, self.model_args, self.args, processor, self.task, **config_kwargs)

    def finish(self, processor, model):
        uses_knowledge = model.config.uses_knowledge
        logger.info(
            "System %s (retrieval_mode=%s), knowledge from %s",
            self.args.system,
            model.config.retrieval_mode,
            self.args.knowledge if uses_knowledge else "none",
        )
        return processor if uses_knowledge else processor.without_knowledge()  # a baseline's checkpoint has no KG

    def feature_options(self, processor, data_args) -> dict:
        return {"question_annotation_column": None} if self.task in ("qa", "generative_qa") else {}

    def collator(self, processor, model, data_args):
        """The collator of the processor's features for ``model`` (graph batching only if the model reads one)."""
        return KeplmDataCollator.from_processor(
            processor,
            model,
            pad_to_multiple_of=data_args.pad_to_multiple_of,
            graph_pad_to_multiple_of=self.args.graph_pad_to_multiple_of,
        )

    def before_training(self, model, features, collator, training_args) -> None:
        """``--init_entity_memory``: KALA appendix B.1, before training."""
        if self.args.init_entity_memory and training_args.do_train:
            initialize_entity_memory_from_encoder(
                model.to(training_args.device),
                features["train"],
                collator,
                training_args.per_device_eval_batch_size,
                disable_tqdm=training_args.disable_tqdm,
            )

    def parameter_group_options(self, training_args) -> dict:
        return self.args.parameter_group_options(training_args.lr_scheduler_type, training_args.lr_scheduler_kwargs)

    def card_options(self, raw, model, group_options) -> dict:
        linked = model.config.uses_knowledge and "train" in raw
        return {
            "knowledge_args": {**vars(self.args), **group_options},
            "train_linked_share": linked_share(raw["train"]) if linked else None,
        }

    def data_results(self, processor, raw, features, model) -> dict:
        results = knowledge_coverage(processor, raw, model.config.uses_knowledge)
        results.update(flatten(self.annotation_report, "annotations"))
        return results

    def split_results(self, raw, split, prefix) -> dict:
        return {f"{prefix}_linked_share": linked_share(raw[split])} if split in raw else {}

    def unseen_entity_counts(self, raw, split):
        counter = UnseenEntityCounter.from_splits(raw) if self.args.knowledge != "none" else None
        return None if counter is None else counter.counts(raw[split]["knowledge"])
