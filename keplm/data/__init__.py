"""Dataset readers and loaders (CoNLL NER, SQuAD v1.1 QA)."""

from .docred import DocREDFeaturizer, FactMetrics, build_relation_vocab, load_docred_dataset, read_docred
from .ner import find_split_files, get_label_list, load_ner_dataset, read_conll, sort_labels
from .squad import load_qa_dataset, read_squad_json, squad_article_split

__all__ = [
    "DocREDFeaturizer",
    "FactMetrics",
    "build_relation_vocab",
    "load_docred_dataset",
    "read_docred",
    "find_split_files",
    "get_label_list",
    "load_ner_dataset",
    "read_conll",
    "sort_labels",
    "load_qa_dataset",
    "read_squad_json",
    "squad_article_split",
]
