"""Shared knowledge-graph layer: graph storage, loaders, annotations and entity linking."""

from .annotation import (
    EntityMention,
    KnowledgeAnnotation,
    Triplet,
    read_kala_annotations,
    write_kala_annotations,
)
from .graph import KnowledgeGraph, merge_kgs
from .linker import EntityLinker
from .loaders import load_fb15k237, load_jsonl_kg, load_kg, load_trex, load_tsv_kg, load_wn18rr

__all__ = [
    "KnowledgeGraph",
    "EntityMention",
    "Triplet",
    "KnowledgeAnnotation",
    "read_kala_annotations",
    "write_kala_annotations",
    "EntityLinker",
    "load_tsv_kg",
    "load_fb15k237",
    "load_wn18rr",
    "load_trex",
    "load_jsonl_kg",
    "load_kg",
    "merge_kgs",
]
