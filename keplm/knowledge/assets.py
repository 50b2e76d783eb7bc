"""Knowledge assets saved beside a model: entity vocabulary, relation vocabulary and the knowledge graph.

They live in ``knowledge/`` of a checkpoint (file names in :mod:`keplm.file_utils`; plain JSON/TSV files, no
pickles). A model and its processor hold the same assets and both save them: :func:`save_knowledge_assets`
writes them once per folder, and a processor never overwrites assets that differ from its own (those of the
model saved there), so a checkpoint never pairs a model with a processor built from other vocabularies.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from keplm.file_utils import (
    ASSETS_CONFIG_NAME,
    ASSETS_DIR,
    ENTITY_VOCAB_NAME,
    FORMAT_VERSION,
    KG_DIR,
    RELATION_VOCAB_NAME,
    check_format_version,
    resolve_folder,
)
from keplm.io_utils import read_json

from .graph import KnowledgeGraph

NULL_ENTITY = "[NULL]"
SELF_RELATION = "[SELF]"
UNKNOWN_RELATION = "[UNK]"


def _hash_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class KnowledgeAssets:
    """Entity/relation vocabularies of a knowledge-augmented model, and the KG it reads."""

    entity_vocab: list[str] = field(default_factory=lambda: [NULL_ENTITY])
    relation_vocab: list[str] = field(default_factory=lambda: [SELF_RELATION, UNKNOWN_RELATION])
    entity_counts: list[int] | None = None
    kg: KnowledgeGraph | None = None

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
        return self._entity_rows.get(entity_id, 0)

    def with_entities(self, entity_ids: Iterable[str]) -> KnowledgeAssets:
        """A copy whose vocabulary also has rows (appended, count 0) for those of ``entity_ids`` that the KG holds and
        the vocabulary lacks; the old rows keep their index. ``self`` when nothing is missing."""
        if self.kg is None:
            raise ValueError("with_entities: these knowledge assets have no KG to take the new entities from")
        new = [e for e in dict.fromkeys(map(str, entity_ids)) if e not in self._entity_rows and self.kg.has_entity(e)]
        if not new:
            return self
        counts = list(self.entity_counts) if self.entity_counts else [0] * self.num_entities
        return KnowledgeAssets([*self.entity_vocab, *new], list(self.relation_vocab), counts + [0] * len(new), self.kg)

    def relation_row(self, relation_id: str) -> int:
        """Relation-vocabulary id; relations unseen in training map to the unknown relation (1)."""
        return self._relation_rows.get(relation_id, 1)

    def entity_coverage(self, annotations, max_examples: int = 5) -> dict:
        """Counts of how the entity ids of ``annotations`` (a ``knowledge`` column of dicts, or
        :class:`~keplm.knowledge.KnowledgeAnnotation` objects) meet the KG and the entity memory.

        Both an id missing from the KG (``unknown``: another KG's id, a typo in an annotation file) and an id in
        the KG but not in the entity memory (``unseen``: not among the training mentions, or pruned) are read as
        the null row; only the second is the paper's unseen entity. For mentions and for fact ends (``h``/``t``,
        counted per occurrence): ``total``, ``without_id``, ``in_memory``, ``unseen`` (in the KG, not in the
        memory), ``unknown`` (not in the KG; None without a KG), ``unknown_in_memory`` (of those, how many have a
        memory row) and the first ``unknown_examples``. For the facts' relations (``fact_relations``): ``total``,
        ``unknown`` (not a relation of the KG; None without a KG), ``outside_vocabulary`` (no row in the relation
        vocabulary: read as the unknown relation; None for a vocabulary without relations) and the first
        ``unknown_examples``. Returns a JSON-ready dict.
        """
        kg = self.kg
        unknown = 0 if kg is not None else None  # counted against a KG only

        def empty() -> dict:
            return {
                "total": 0,
                "without_id": 0,
                "in_memory": 0,
                "unseen": 0,
                "unknown": unknown,
                "unknown_in_memory": unknown,
                "unknown_examples": [],
            }

        report = {"mentions": empty(), "fact_entities": empty(), "kg": kg is not None}
        has_relations = len(self.relation_vocab) > 2  # beyond the reserved ids: the model reads relation ids
        relations = report["fact_relations"] = {
            "total": 0,
            "unknown": unknown,
            "outside_vocabulary": 0 if has_relations else None,
            "unknown_examples": [],
        }

        def unknown_example(part: dict, value: str) -> None:
            if len(part["unknown_examples"]) < max_examples and value not in part["unknown_examples"]:
                part["unknown_examples"].append(value)

        def count(part: dict, entity_id) -> None:
            part["total"] += 1
            if entity_id is None or entity_id == "":
                part["without_id"] += 1
                return
            entity_id = str(entity_id)
            in_memory = entity_id in self._entity_rows and entity_id != NULL_ENTITY
            part["in_memory"] += in_memory
            if kg is not None and not kg.has_entity(entity_id):
                part["unknown"] += 1
                part["unknown_in_memory"] += in_memory
                unknown_example(part, entity_id)
            elif not in_memory:
                part["unseen"] += 1

        for annotation in annotations:
            if annotation is None:
                continue
            as_dict = annotation if isinstance(annotation, dict) else annotation.to_dict()
            for mention in as_dict.get("entities") or []:
                count(report["mentions"], mention.get("id"))
            for fact in as_dict.get("triplets") or []:
                count(report["fact_entities"], fact.get("h"))
                count(report["fact_entities"], fact.get("t"))
                relation = str(fact.get("r"))
                relations["total"] += 1
                if has_relations and relation not in self._relation_rows:
                    relations["outside_vocabulary"] += 1
                if kg is not None and not kg.has_relation(relation):
                    relations["unknown"] += 1
                    unknown_example(relations, relation)
        return report

    def with_kg(self, kg: KnowledgeGraph | None) -> KnowledgeAssets:
        """The same vocabularies with another KG (e.g. a KG-only processor getting its entity vocabulary)."""
        return KnowledgeAssets(self.entity_vocab, self.relation_vocab, self.entity_counts, kg)

    def kg_change(self, kg: KnowledgeGraph, max_examples: int = 5) -> dict:
        """What replacing this KG by ``kg`` changes for a trained model, as a JSON-ready dict: entities and facts
        added and removed; new entities (no memory row: read as unseen, represented by their neighbours); entities
        with a memory row that left the KG (their row stays, their facts are gone); facts whose relation is not
        in the relation vocabulary (read as the unknown relation)."""
        old = self.kg
        old_entities = set(old.entity_ids) if old is not None else set()
        new_entities = set(kg.entity_ids)
        old_facts = set(old.fact_ids()) if old is not None else set()
        new_facts = set(kg.fact_ids())
        added = sorted(new_entities - old_entities)
        # a vocabulary of the reserved ids alone: a model without relation embeddings (e.g. one reading names)
        has_relations = len(self.relation_vocab) > 2
        unknown_relation_facts = [f for f in new_facts if has_relations and f[1] not in self._relation_rows]
        return {
            "entities_added": len(added),
            "entities_removed": len(old_entities - new_entities),
            "facts_added": len(new_facts - old_facts),
            "facts_removed": len(old_facts - new_facts),
            "added_without_memory_row": sum(e not in self._entity_rows for e in added),
            "memory_entities_missing_from_kg": sum(e not in new_entities for e in self.entity_vocab[1:]),
            "facts_with_unknown_relation": len(unknown_relation_facts),
            "unknown_relations": sorted({f[1] for f in unknown_relation_facts})[:max_examples],
            "added_examples": added[:max_examples],
            "old_kg_hash": old.content_hash() if old is not None else None,
            "new_kg_hash": kg.content_hash(),
        }

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        entity_ids: Iterable[str | None],
        relation_ids: Iterable[str] = (),
        kg: KnowledgeGraph | None = None,
        min_count: int = 1,
        max_entities: int | None = None,
    ) -> KnowledgeAssets:
        """Entity vocabulary from training mentions (with repetition), pruned by frequency (KALA appendix C.2).

        Entities seen fewer than ``min_count`` times (and beyond the ``max_entities`` most frequent) are left
        out and will be treated as unseen (null) entities.
        """
        counts = Counter(entity for entity in entity_ids if entity is not None and entity != NULL_ENTITY)
        ranked = sorted((e for e, c in counts.items() if c >= min_count), key=lambda e: (-counts[e], e))
        if max_entities is not None:
            ranked = ranked[:max_entities]
        relations = (set(relation_ids) - {SELF_RELATION, UNKNOWN_RELATION}) | set(
            kg.relation_ids if kg is not None else ()
        )
        return cls(
            entity_vocab=[NULL_ENTITY, *ranked],
            relation_vocab=[SELF_RELATION, UNKNOWN_RELATION, *sorted(relations)],
            entity_counts=[0, *(counts[e] for e in ranked)],
            kg=kg,
        )

    # ------------------------------------------------------------------ files
    def content_hash(self) -> str:
        """sha256 of the vocabularies (what the model's tables are indexed by)."""
        return _hash_json({"entities": self.entity_vocab, "relations": self.relation_vocab})

    def save_pretrained(self, save_directory: str | os.PathLike, overwrite: bool = True) -> None:
        """Write ``knowledge/`` into ``save_directory`` (see :func:`save_knowledge_assets`)."""
        save_knowledge_assets(save_directory, self, overwrite=overwrite)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, reuse: KnowledgeAssets | None = None, **kwargs
    ) -> KnowledgeAssets:
        """Load from a checkpoint directory or a Hub repo id (downloads only ``knowledge/``). ``reuse``: assets
        already in memory (e.g. the model's, loaded from the same folder) returned as they are when the folder's
        recorded hashes are theirs, so a model and its processor read the KG once."""
        directory = resolve_folder(pretrained_model_name_or_path, ASSETS_DIR, **kwargs)
        config_file = directory / ASSETS_CONFIG_NAME
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{pretrained_model_name_or_path} has no {ASSETS_DIR}/{ASSETS_CONFIG_NAME}: this checkpoint was saved "
                "without its knowledge assets (entity/relation vocabulary, KG), either by a model that had none (built "
                "from its config: set them with model.set_knowledge_assets(assets) and save again) or by a tool "
                "other than keplm's save_pretrained."
            )
        config = read_json(config_file)
        check_format_version(config, config_file)
        if reuse is not None and all(
            config.get(key, value) == value
            for key, value in _assets_config(reuse).items()
            if key in ("format_version", "vocab_hash", "kg_hash", "counts_hash")
        ):
            return reuse
        vocab = {}
        for name, key in ((ENTITY_VOCAB_NAME, "entities"), (RELATION_VOCAB_NAME, "relations")):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"knowledge asset {directory / name} is missing")
            vocab[key] = read_json(directory / name)
            if not isinstance(vocab[key], dict) or not isinstance(vocab[key].get(key), list):
                raise ValueError(f"{directory / name}: expected a JSON object with a {key!r} list")
        entity_data, relation_data = vocab["entities"], vocab["relations"]
        kg = None
        kg_dir = directory / KG_DIR
        if config.get("kg_hash"):
            if not kg_dir.is_dir():
                raise FileNotFoundError(f"knowledge graph directory {kg_dir} is missing (assets_config names a KG)")
            kg = KnowledgeGraph.from_pretrained(kg_dir)
            if kg.content_hash() != config["kg_hash"]:
                raise ValueError(f"knowledge graph in {kg_dir} does not match the hash recorded in {config_file}")
        elif kg_dir.is_dir() and any(kg_dir.iterdir()):
            # keplm removes kg/ when it saves assets without a KG: files there with no hash are not ours to trust
            raise ValueError(
                f"{config_file} records no knowledge graph (kg_hash {config.get('kg_hash')!r}) but {kg_dir} holds "
                "KG files: the folder is inconsistent (edited by hand, or files copied in); restore the kg_hash the "
                "KG was saved with, or remove the kg/ folder to load the checkpoint without a KG"
            )
        entity_counts = entity_data.get("counts")
        if "counts_hash" in config and _hash_json(entity_counts) != config["counts_hash"]:
            raise ValueError(f"entity counts in {directory / ENTITY_VOCAB_NAME} do not match the hash in {config_file}")
        assets = cls(entity_data["entities"], relation_data["relations"], entity_counts, kg)
        if assets.content_hash() != config["vocab_hash"]:
            raise ValueError(f"entity/relation vocabularies in {directory} do not match the hash in {config_file}")
        return assets


def _assets_config(assets: KnowledgeAssets) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "num_entities": assets.num_entities,
        "num_relations": assets.num_relations,
        "vocab_hash": assets.content_hash(),
        "kg_hash": assets.kg.content_hash() if assets.kg is not None else None,
        # the entity counts (frequency pruning, reports) are hashed apart from the vocabularies: folders saved
        # before this key existed have none and load unchecked
        "counts_hash": _hash_json(assets.entity_counts),
    }


def assets_conflict(
    save_directory: str | os.PathLike, assets: KnowledgeAssets | None, counts: bool = False
) -> str | None:
    """What is wrong when ``save_directory`` already holds other knowledge assets than ``assets`` (``None``: none
    should be there) would be saved as, else None; ``counts``: entity counts differing count too."""
    config_file = Path(save_directory) / ASSETS_DIR / ASSETS_CONFIG_NAME
    if not config_file.is_file():
        return None
    try:
        existing = read_json(config_file)
    except ValueError:
        existing = {}
    config = _assets_config(assets) if assets is not None else {"vocab_hash": None, "kg_hash": None}
    keys = ("format_version", "vocab_hash", "kg_hash") if assets is not None else ("vocab_hash", "kg_hash")
    same = all(existing.get(key) == config[key] for key in keys) and (
        not counts or existing.get("counts_hash", config.get("counts_hash")) == config.get("counts_hash")
    )
    if same:
        return None
    return (
        f"{config_file.parent} already holds other knowledge assets (vocabulary hash "
        f"{existing.get('vocab_hash')!r}, KG hash {existing.get('kg_hash')!r}) than the ones being saved "
        f"({config['vocab_hash']!r}, {config['kg_hash']!r})"
    )


def holds_assets(save_directory: str | os.PathLike, assets: KnowledgeAssets) -> bool:
    """Whether ``save_directory`` holds a complete ``knowledge/`` of exactly these assets (entity counts included)."""
    complete = (Path(save_directory) / ASSETS_DIR / ASSETS_CONFIG_NAME).is_file()
    return complete and assets_conflict(save_directory, assets, counts=True) is None


def save_knowledge_assets(save_directory: str | os.PathLike, assets: KnowledgeAssets, overwrite: bool = True) -> None:
    """Write ``knowledge/`` into ``save_directory``; a folder that already holds the same assets is left as it is.

    ``overwrite=False`` (a processor's save) makes different assets already in the folder a ValueError: they
    belong to the model saved there, and a processor built from other vocabularies or another KG must not be
    paired with it. A model's save (``overwrite=True``) replaces them: its weights are indexed by its own assets.
    """
    directory = Path(save_directory) / ASSETS_DIR
    config = _assets_config(assets)
    config_file = directory / ASSETS_CONFIG_NAME
    if config_file.is_file():
        conflict = assets_conflict(save_directory, assets, counts=overwrite)
        if conflict is None:
            return
        if overwrite:
            config_file.unlink()  # an interrupted rewrite must not leave the old config beside new files
        else:
            raise ValueError(
                f"{conflict}: the model saved there and this processor disagree; save them from the "
                "same assets or into separate folders"
            )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ENTITY_VOCAB_NAME).write_text(
        json.dumps({"entities": assets.entity_vocab, "counts": assets.entity_counts}, ensure_ascii=False)
    )
    (directory / RELATION_VOCAB_NAME).write_text(json.dumps({"relations": assets.relation_vocab}, ensure_ascii=False))
    if assets.kg is not None:
        assets.kg.save_pretrained(directory / KG_DIR)
    elif (directory / KG_DIR).is_dir():
        shutil.rmtree(directory / KG_DIR)  # another model's KG must not travel with this one
    config_file.write_text(json.dumps(config, indent=2))  # last: a folder without it was not saved completely


__all__ = [
    "KnowledgeAssets",
    "save_knowledge_assets",
    "assets_conflict",
    "holds_assets",
    "NULL_ENTITY",
    "SELF_RELATION",
    "UNKNOWN_RELATION",
]
