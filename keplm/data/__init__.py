"""Dataset readers and loaders (CoNLL NER, SQuAD v1.1 QA)."""

from .docred import build_relation_vocab, featurization_report, load_docred_dataset, read_docred
from .glue import GLUE_TASKS, GlueTask, load_glue_dataset  # noqa: F401  (GLUE tasks, keplm.data.glue)
from .lama import load_probe, split_held_out  # noqa: F401  (LAMA facts and queries, keplm.data.lama)
from .ner import get_label_list, load_ner_dataset, read_conll, sort_labels
from .splits import find_split_files, limit_samples
from .squad import load_qa_dataset, read_squad_json, squad_article_split

#: the text of each task's examples that gets linked: (column, whether it holds a list of words)
TEXT_COLUMNS = {"ner": ("tokens", True), "qa": ("context", False), "generative_qa": ("context", False)}

__all__ = [
    "build_relation_vocab",
    "featurization_report",
    "load_docred_dataset",
    "read_docred",
    "find_split_files",
    "limit_samples",
    "TEXT_COLUMNS",
    "get_label_list",
    "load_ner_dataset",
    "read_conll",
    "sort_labels",
    "load_qa_dataset",
    "read_squad_json",
    "squad_article_split",
]
