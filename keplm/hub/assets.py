"""Knowledge assets saved beside a model: entity vocabulary, relation vocabulary and the knowledge graph.

Layout inside a checkpoint directory (plain files, no pickles)::

    knowledge/assets_config.json   sizes, content hashes, format version
    knowledge/entity_vocab.json    {"entities": [id, ...], "counts": [n, ...]}; row 0 is the null entity
    knowledge/relation_vocab.json  {"relations": [id, ...]}; 0 = self loop, 1 = unknown relation
    knowledge/kg/                  KnowledgeGraph.save_pretrained (optional)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ASSETS_DIR = "knowledge"
NULL_ENTITY = "[NULL]"
SELF_RELATION = "[SELF]"
UNKNOWN_RELATION = "[UNK]"
FORMAT_VERSION = 1


def _hash_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class KnowledgeAssets:
    """Entity/relation vocabularies of a knowledge-augmented model, and the KG it reads."""

    entity_vocab: list[str] = field(default_factory=lambda: [NULL_ENTITY])
    relation_vocab: list[str] = field(default_factory=lambda: [SELF_RELATION, UNKNOWN_RELATION])
    entity_counts: list[int] | None = None
    kg: object | None = None  # keplm.knowledge.KnowledgeGraph

    def __post_init__(self):
        if not self.entity_vocab or self.entity_vocab[0] != NULL_ENTITY:
            raise ValueError(f"entity_vocab must start with the null entity {NULL_ENTITY!r}")
        if self.relation_vocab[:2] != [SELF_RELATION, UNKNOWN_RELATION]:
            raise ValueError(f"relation_vocab must start with {SELF_RELATION!r}, {UNKNOWN_RELATION!r}")
        if len(set(self.entity_vocab)) != len(self.entity_vocab):
            raise ValueError("entity_vocab has duplicate ids")
        if len(set(self.relation_vocab)) != len(self.relation_vocab):
            raise ValueError("relation_vocab has duplicate ids")
        if self.entity_counts is not None and len(self.entity_counts) != len(self.entity_vocab):
            raise ValueError("entity_counts must have one count per entity_vocab row")
        self._entity_rows = {e: i for i, e in enumerate(self.entity_vocab)}
        self._relation_rows = {r: i for i, r in enumerate(self.relation_vocab)}

    # ------------------------------------------------------------------ lookups
    @property
    def num_entities(self) -> int:
        return len(self.entity_vocab)

    @property
    def num_relations(self) -> int:
        return len(self.relation_vocab)

    def entity_row(self, entity_id: str | None) -> int:
        """Entity-memory row of an entity id; unknown (unseen in training) entities map to the null row 0."""
        return self._entity_rows.get(entity_id, 0) if entity_id is not None else 0

    def relation_row(self, relation_id: str) -> int:
        """Relation-vocabulary id; relations unseen in training map to the unknown relation (1)."""
        return self._relation_rows.get(relation_id, 1)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        entity_ids: Iterable[str | None],
        relation_ids: Iterable[str] = (),
        kg=None,
        min_count: int = 1,
        max_entities: int | None = None,
    ) -> KnowledgeAssets:
        """Entity vocabulary from training mentions (with repetition), pruned by frequency (KALA appendix C.2).

        Entities seen fewer than ``min_count`` times (and beyond the ``max_entities`` most frequent) are left
        out and will be treated as unseen (null) entities.
        """
        counts: dict[str, int] = {}
        for entity in entity_ids:
            if entity is not None and entity != NULL_ENTITY:
                counts[entity] = counts.get(entity, 0) + 1
        ranked = sorted((e for e, c in counts.items() if c >= min_count), key=lambda e: (-counts[e], e))
        if max_entities is not None:
            ranked = ranked[:max_entities]
        relations = sorted({r for r in relation_ids} - {SELF_RELATION, UNKNOWN_RELATION})
        if kg is not None:
            relations = sorted(set(relations) | set(kg.relation_ids))
        return cls(
            entity_vocab=[NULL_ENTITY, *ranked],
            relation_vocab=[SELF_RELATION, UNKNOWN_RELATION, *relations],
            entity_counts=[0, *(counts[e] for e in ranked)],
            kg=kg,
        )

    # ------------------------------------------------------------------ files
    def content_hash(self) -> str:
        return _hash_json({"entities": self.entity_vocab, "relations": self.relation_vocab})

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        directory = Path(save_directory) / ASSETS_DIR
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "entity_vocab.json").write_text(
            json.dumps({"entities": self.entity_vocab, "counts": self.entity_counts}, ensure_ascii=False)
        )
        (directory / "relation_vocab.json").write_text(json.dumps({"relations": self.relation_vocab}, ensure_ascii=False))
        config = {
            "format_version": FORMAT_VERSION,
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "vocab_hash": self.content_hash(),
            "kg_hash": None,
        }
        if self.kg is not None:
            self.kg.save_pretrained(directory / "kg")
            config["kg_hash"] = self.kg.content_hash()
        (directory / "assets_config.json").write_text(json.dumps(config, indent=2))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **hub_kwargs) -> KnowledgeAssets:
        """Load from a checkpoint directory or a Hub repo id (downloads only ``knowledge/``)."""
        directory = resolve_assets_directory(pretrained_model_name_or_path, **hub_kwargs)
        config_file = directory / "assets_config.json"
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{pretrained_model_name_or_path} has no {ASSETS_DIR}/assets_config.json: this checkpoint was saved "
                "without its knowledge assets (entity/relation vocabulary, KG). Save it with keplm's save_pretrained."
            )
        config = json.loads(config_file.read_text())
        for name in ("entity_vocab.json", "relation_vocab.json"):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"knowledge asset {directory / name} is missing")
        entity_data = json.loads((directory / "entity_vocab.json").read_text())
        relation_data = json.loads((directory / "relation_vocab.json").read_text())
        kg = None
        if config.get("kg_hash"):
            from keplm.knowledge import KnowledgeGraph

            kg_dir = directory / "kg"
            if not kg_dir.is_dir():
                raise FileNotFoundError(f"knowledge graph directory {kg_dir} is missing (assets_config names a KG)")
            kg = KnowledgeGraph.from_pretrained(kg_dir)
            if kg.content_hash() != config["kg_hash"]:
                raise ValueError(f"knowledge graph in {kg_dir} does not match the hash recorded in {config_file}")
        assets = cls(entity_data["entities"], relation_data["relations"], entity_data.get("counts"), kg)
        if assets.content_hash() != config["vocab_hash"]:
            raise ValueError(f"entity/relation vocabularies in {directory} do not match the hash in {config_file}")
        return assets


def resolve_assets_directory(name_or_path: str | os.PathLike, **hub_kwargs) -> Path:
    """Local ``<dir>/knowledge`` or the ``knowledge/`` folder of a Hub repo, downloaded on demand."""
    if os.path.isdir(name_or_path):
        return Path(name_or_path) / ASSETS_DIR
    from huggingface_hub import snapshot_download

    allowed = {k: v for k, v in hub_kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")}
    root = snapshot_download(str(name_or_path), allow_patterns=[f"{ASSETS_DIR}/*", f"{ASSETS_DIR}/**"], **allowed)
    return Path(root) / ASSETS_DIR
