"""Shared knowledge layer: graph storage and loaders, the knowledge assets saved with a model, annotations and
entity linking. A leaf package: it imports no other keplm package but the file helpers."""

from .annotation import (
    KNOWLEDGE_FEATURE,
    EntityMention,
    KnowledgeAnnotation,
    Triplet,
    read_kala_annotations,
    write_kala_annotations,
)
from .assets import KnowledgeAssets, save_knowledge_assets
from .builder import KnowledgeGraphBuilder
from .graph import KnowledgeGraph
from .linker import EntityLinker, link_dataset
from .loaders import load_fb15k237, load_jsonl_kg, load_kg, load_trex, load_tsv_kg, load_wn18rr, merge_kgs

__all__ = [
    "KnowledgeGraph",
    "KnowledgeGraphBuilder",
    "KnowledgeAssets",
    "save_knowledge_assets",
    "EntityMention",
    "Triplet",
    "KnowledgeAnnotation",
    "KNOWLEDGE_FEATURE",
    "read_kala_annotations",
    "write_kala_annotations",
    "EntityLinker",
    "link_dataset",
    "load_tsv_kg",
    "load_fb15k237",
    "load_wn18rr",
    "load_trex",
    "load_jsonl_kg",
    "load_kg",
    "merge_kgs",
]
