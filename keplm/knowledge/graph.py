"""In-memory knowledge graph with CSR adjacency, deterministic subgraph sampling and a JSON/TSV
on-disk format (``save_pretrained`` / ``from_pretrained``).

Directory layout written by :meth:`KnowledgeGraph.save_pretrained` (names in :mod:`keplm.file_utils`)::

    kg_config.json               {"format_version", "num_entities", "num_relations", "num_triples", "content_hash"}
    entities.jsonl               {"id", "name", "aliases"} per line, in index order
    relations.jsonl              {"id", "name"} per line, in index order
    triples.tsv                  head_id<TAB>relation_id<TAB>tail_id (string ids)
    entity_vectors.safetensors   optional, tensor "entity_vectors" [num_entities, dim]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from keplm.file_utils import (
    FORMAT_VERSION,
    KG_CONFIG_NAME,
    KG_ENTITIES_NAME,
    KG_RELATIONS_NAME,
    KG_TRIPLES_NAME,
    KG_VECTORS_NAME,
    check_format_version,
)
from keplm.io_utils import iter_jsonl, read_json

from .builder import KnowledgeGraphBuilder, alias_list

_VECTORS_KEY = "entity_vectors"
#: "keep this field" in :meth:`KnowledgeGraph.replace`
_KEEP = object()


def _check_unique(ids: list[str], what: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, x in enumerate(ids):
        if not isinstance(x, str) or not x:
            raise ValueError(f"{what} id at position {i} must be a non-empty string, got {x!r}")
        if x in index:
            raise ValueError(f"duplicate {what} id {x!r} at positions {index[x]} and {i}")
        index[x] = i
    return index


class KnowledgeGraph:
    """Entities (id, name, aliases), relations (id, name) and (h, r, t) triples, indexed by position."""

    def __init__(
        self,
        entity_ids: list[str],
        relation_ids: list[str],
        triples=None,
        entity_names: list[str] | None = None,
        entity_aliases: list[list[str]] | None = None,
        relation_names: list[str] | None = None,
        entity_vectors: np.ndarray | None = None,
    ):
        self.entity_ids = list(entity_ids)
        self.relation_ids = list(relation_ids)
        self._entity_index = _check_unique(self.entity_ids, "entity")
        self._relation_index = _check_unique(self.relation_ids, "relation")
        n, m = len(self.entity_ids), len(self.relation_ids)

        self.entity_names = list(entity_names) if entity_names is not None else list(self.entity_ids)
        if len(self.entity_names) != n:
            raise ValueError(f"entity_names has {len(self.entity_names)} items, expected {n}")
        if entity_aliases is None:
            self.entity_aliases = [[] for _ in range(n)]
        else:
            self.entity_aliases = [alias_list(a, f"entity_aliases[{i}]") for i, a in enumerate(entity_aliases)]
            if len(self.entity_aliases) != n:
                raise ValueError(f"entity_aliases has {len(self.entity_aliases)} items, expected {n}")
        self.relation_names = list(relation_names) if relation_names is not None else list(self.relation_ids)
        if len(self.relation_names) != m:
            raise ValueError(f"relation_names has {len(self.relation_names)} items, expected {m}")

        arr = np.asarray(triples if triples is not None else [])
        if arr.size == 0:
            arr = np.zeros((0, 3), dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise ValueError(f"triples must have shape [T, 3], got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"triples must be integer indices, got dtype {arr.dtype}")
        for col, bound, what in ((0, n, "head"), (1, m, "relation"), (2, n, "tail")):
            bad = np.nonzero((arr[:, col] < 0) | (arr[:, col] >= bound))[0]
            if len(bad):
                raise ValueError(
                    f"triple {int(bad[0])} has {what} index {int(arr[bad[0], col])} out of range [0, {bound})"
                )
        self.triples = arr.astype(np.int64, copy=True)

        if entity_vectors is not None:
            entity_vectors = np.asarray(entity_vectors)
            if entity_vectors.ndim != 2 or entity_vectors.shape[0] != n:
                raise ValueError(f"entity_vectors must have shape [{n}, dim], got {entity_vectors.shape}")
            bad = non_finite_rows(entity_vectors)
            if bad:
                raise ValueError(
                    f"entity_vectors hold NaN or inf in {len(bad)} rows (entities "
                    f"{[entity_ids[i] for i in bad[:5]]}{' ...' if len(bad) > 5 else ''})"
                )
        self.entity_vectors = entity_vectors
        self._csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._degree: np.ndarray | None = None
        #: what the loader merged (KnowledgeGraphBuilder.report); empty for a graph built or loaded otherwise
        self.build_report: dict = {}

    # ------------------------------------------------------------------ basics
    @property
    def num_entities(self) -> int:
        return len(self.entity_ids)

    @property
    def num_relations(self) -> int:
        return len(self.relation_ids)

    @property
    def num_triples(self) -> int:
        return int(self.triples.shape[0])

    def __len__(self) -> int:
        return self.num_entities

    def __repr__(self) -> str:
        vec = "" if self.entity_vectors is None else f", vector_dim={self.entity_vectors.shape[1]}"
        return (
            f"KnowledgeGraph(num_entities={self.num_entities}, num_relations={self.num_relations}, "
            f"num_triples={self.num_triples}{vec})"
        )

    def entity_index(self, entity_id: str) -> int:
        try:
            return self._entity_index[entity_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown entity id {entity_id!r} (graph has {self.num_entities} entities)") from None

    def relation_index(self, relation_id: str) -> int:
        try:
            return self._relation_index[relation_id]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown relation id {relation_id!r} (graph has {self.num_relations} relations)"
            ) from None

    def fact_ids(self) -> list[tuple[str, str, str]]:
        """The triples as ``(head id, relation id, tail id)`` strings."""
        e, r = self.entity_ids, self.relation_ids
        return [(e[h], r[rel], e[t]) for h, rel, t in self.triples.tolist()]

    def has_entity(self, entity_id) -> bool:
        return isinstance(entity_id, str) and entity_id in self._entity_index

    def has_relation(self, relation_id) -> bool:
        return isinstance(relation_id, str) and relation_id in self._relation_index

    # --------------------------------------------------------------- adjacency
    def degree(self) -> np.ndarray:
        """Number of triples touching each entity (a self-loop counts once)."""
        if self._degree is None:
            self._build_csr()
        return self._degree

    def _build_csr(self) -> None:
        n, t = self.num_entities, self.num_triples
        h, tl = self.triples[:, 0], self.triples[:, 2]
        tidx = np.arange(t, dtype=np.int64)
        not_loop = h != tl
        ent = np.concatenate([h, tl[not_loop]])
        other = np.concatenate([tl, h[not_loop]])
        tri = np.concatenate([tidx, tidx[not_loop]])
        counts = np.bincount(ent, minlength=n).astype(np.int64)
        counts.flags.writeable = False
        self._degree = counts
        # Rows per entity ordered by neighbour preference: highest degree, then index, then triple index.
        order = np.lexsort((tri, other, -counts[other], ent))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        self._csr = (indptr, other[order], tri[order])

    def _rows(self, entity_idx: int) -> tuple[np.ndarray, np.ndarray]:
        if self._csr is None:
            self._build_csr()
        idx = int(entity_idx)
        if not 0 <= idx < self.num_entities:
            raise ValueError(f"entity index {entity_idx} out of range [0, {self.num_entities})")
        indptr, other, tri = self._csr
        rows = slice(indptr[idx], indptr[idx + 1])
        return other[rows], tri[rows]

    def neighbors(self, entity_idx: int) -> np.ndarray:
        """Triples (h, r, t) touching ``entity_idx`` as head or tail, [k, 3] int64."""
        _, tri = self._rows(entity_idx)
        return self.triples[np.sort(tri)]

    def _check_idxs(self, entity_idxs) -> np.ndarray:
        arr = np.asarray(entity_idxs if isinstance(entity_idxs, np.ndarray) else list(entity_idxs))
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"entity indices must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64).reshape(-1)
        bad = (arr < 0) | (arr >= self.num_entities)
        if bad.any():
            raise ValueError(f"entity index {int(arr[bad][0])} out of range [0, {self.num_entities})")
        return arr

    def triples_among(self, entity_idxs, hops: int = 1, max_neighbors_per_entity: int | None = 8) -> np.ndarray:
        """Triples among ``entity_idxs`` plus up to ``max_neighbors_per_entity`` triples per entity to
        outside neighbours (highest-degree neighbours first, ties by index), expanded ``hops`` times.
        Returns deduplicated triples sorted by (h, r, t)."""
        if hops < 0:
            raise ValueError(f"hops must be >= 0, got {hops}")
        if max_neighbors_per_entity is not None and max_neighbors_per_entity < 0:
            raise ValueError(f"max_neighbors_per_entity must be >= 0 or None, got {max_neighbors_per_entity}")
        seeds = np.unique(self._check_idxs(entity_idxs))
        if seeds.size == 0 or self.num_triples == 0:
            return np.zeros((0, 3), dtype=np.int64)
        known = np.zeros(self.num_entities, dtype=bool)
        known[seeds] = True
        picked: list[np.ndarray] = []
        for e in seeds:  # triples with both ends among the seeds
            other, tri = self._rows(e)
            picked.append(tri[known[other]])
        frontier = seeds
        for _ in range(hops):
            new: list[np.ndarray] = []
            for e in frontier:
                other, tri = self._rows(e)
                outside = np.nonzero(~known[other])[0][:max_neighbors_per_entity]
                picked.append(tri[outside])
                new.append(other[outside])
            frontier = np.unique(np.concatenate(new))
            known[frontier] = True
            if frontier.size == 0:
                break
        tri = np.unique(np.concatenate(picked))
        if tri.size == 0:
            return np.zeros((0, 3), dtype=np.int64)
        return np.unique(self.triples[tri], axis=0)

    def subgraph(self, entity_idxs) -> KnowledgeGraph:
        """Graph restricted to ``entity_idxs`` (in the given order, duplicates dropped); all relations kept."""
        idxs = self._check_idxs(entity_idxs)
        _, first = np.unique(idxs, return_index=True)
        idxs = idxs[np.sort(first)]
        remap = np.full(self.num_entities, -1, dtype=np.int64)
        remap[idxs] = np.arange(len(idxs), dtype=np.int64)
        keep = (remap[self.triples[:, 0]] >= 0) & (remap[self.triples[:, 2]] >= 0)
        sub = self.triples[keep]
        sub[:, [0, 2]] = remap[sub[:, [0, 2]]]
        return KnowledgeGraph(
            [self.entity_ids[i] for i in idxs],
            self.relation_ids,
            sub,
            entity_names=[self.entity_names[i] for i in idxs],
            entity_aliases=[self.entity_aliases[i] for i in idxs],
            relation_names=self.relation_names,
            entity_vectors=None if self.entity_vectors is None else self.entity_vectors[idxs],
        )

    def replace(self, *, triples=_KEEP, entity_vectors=_KEEP) -> KnowledgeGraph:
        """The same entities, relations and names with other ``triples`` and/or ``entity_vectors`` (None: none),
        checked as a new graph is; the build report is not carried over."""
        return KnowledgeGraph(
            self.entity_ids,
            self.relation_ids,
            self.triples if triples is _KEEP else triples,
            entity_names=self.entity_names,
            entity_aliases=self.entity_aliases,
            relation_names=self.relation_names,
            entity_vectors=self.entity_vectors if entity_vectors is _KEEP else entity_vectors,
        )

    # ------------------------------------------------------------ persistence
    def content_hash(self) -> str:
        """sha256 over ids, names, aliases, relations, triples (and vectors if any); computed once per graph (a
        KnowledgeGraph is not changed in place: every operation that edits one builds a new graph)."""
        if "_content_hash" in self.__dict__:
            return self._content_hash
        h = hashlib.sha256()
        meta = {
            "entity_ids": self.entity_ids,
            "entity_names": self.entity_names,
            "entity_aliases": self.entity_aliases,
            "relation_ids": self.relation_ids,
            "relation_names": self.relation_names,
        }
        h.update(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        h.update(b"\x00triples")
        h.update(np.ascontiguousarray(self.triples, dtype="<i8").tobytes())
        if self.entity_vectors is not None:
            v = np.ascontiguousarray(self.entity_vectors)
            v = v.astype(v.dtype.newbyteorder("<"), copy=False)
            h.update(f"\x00vectors:{v.dtype.str}:{list(v.shape)}".encode())
            h.update(v.tobytes())
        self._content_hash = h.hexdigest()
        return self._content_hash

    def save_pretrained(self, directory) -> None:
        directory = Path(directory)
        for what, ids in (("entity", self.entity_ids), ("relation", self.relation_ids)):
            bad = next((x for x in ids if "\t" in x or "\n" in x or "\r" in x), None)
            if bad is not None:
                raise ValueError(f"{what} id {bad!r} contains a tab or newline and cannot be saved to TSV")
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / KG_ENTITIES_NAME, "w", encoding="utf-8") as f:
            for eid, name, aliases in zip(self.entity_ids, self.entity_names, self.entity_aliases):
                f.write(json.dumps({"id": eid, "name": name, "aliases": aliases}, ensure_ascii=False) + "\n")
        with open(directory / KG_RELATIONS_NAME, "w", encoding="utf-8") as f:
            for rid, name in zip(self.relation_ids, self.relation_names):
                f.write(json.dumps({"id": rid, "name": name}, ensure_ascii=False) + "\n")
        ents, rels = self.entity_ids, self.relation_ids
        with open(directory / KG_TRIPLES_NAME, "w", encoding="utf-8") as f:
            f.writelines(f"{ents[h]}\t{rels[r]}\t{ents[t]}\n" for h, r, t in self.triples.tolist())
        vec_path = directory / KG_VECTORS_NAME
        if self.entity_vectors is not None:
            save_file({_VECTORS_KEY: np.ascontiguousarray(self.entity_vectors)}, vec_path)
        else:
            vec_path.unlink(missing_ok=True)
        config = {
            "format_version": FORMAT_VERSION,
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "num_triples": self.num_triples,
            "content_hash": self.content_hash(),
        }
        with open(directory / KG_CONFIG_NAME, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")

    @classmethod
    def from_pretrained(cls, directory, verify_hash: bool = True) -> KnowledgeGraph:
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"knowledge graph directory not found: {directory}")
        for name in (KG_CONFIG_NAME, KG_ENTITIES_NAME, KG_RELATIONS_NAME, KG_TRIPLES_NAME):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"missing {name} in knowledge graph directory {directory}")
        config_path = directory / KG_CONFIG_NAME
        config = read_json(config_path)
        if not isinstance(config, dict):
            raise ValueError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
        check_format_version(config, config_path)

        ent_ids, ent_names, ent_aliases = [], [], []
        for path, lineno, obj in iter_jsonl(directory / KG_ENTITIES_NAME):
            if not isinstance(obj.get("id"), str):
                raise ValueError(f"{path}:{lineno}: entity line needs a string 'id'")
            ent_ids.append(obj["id"])
            ent_names.append(obj.get("name", obj["id"]))
            ent_aliases.append(alias_list(obj.get("aliases"), f"{path}:{lineno}"))
        rel_ids, rel_names = [], []
        for path, lineno, obj in iter_jsonl(directory / KG_RELATIONS_NAME):
            if not isinstance(obj.get("id"), str):
                raise ValueError(f"{path}:{lineno}: relation line needs a string 'id'")
            rel_ids.append(obj["id"])
            rel_names.append(obj.get("name", obj["id"]))
        e_index = _check_unique(ent_ids, "entity")
        r_index = _check_unique(rel_ids, "relation")

        triples = []
        tpath = directory / KG_TRIPLES_NAME
        with open(tpath, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line:
                    continue
                parts = line.split("\t")
                if len(parts) != 3:
                    raise ValueError(f"{tpath}:{lineno}: expected 3 tab-separated fields, got {len(parts)}")
                try:
                    triples.append((e_index[parts[0]], r_index[parts[1]], e_index[parts[2]]))
                except KeyError as e:
                    raise ValueError(f"{tpath}:{lineno}: unknown id {e.args[0]!r}") from None

        vectors = None
        vec_path = directory / KG_VECTORS_NAME
        if vec_path.is_file():
            tensors = load_file(vec_path)
            if _VECTORS_KEY not in tensors:
                raise ValueError(f"{vec_path}: no tensor named {_VECTORS_KEY!r}")
            vectors = tensors[_VECTORS_KEY]
            if vectors.ndim != 2 or vectors.shape[0] != len(ent_ids):
                raise ValueError(
                    f"{vec_path}: {_VECTORS_KEY} has shape {tuple(vectors.shape)}, but the KG has "
                    f"{len(ent_ids)} entities (one row each)"
                )
            bad = non_finite_rows(vectors)
            if bad:
                raise ValueError(
                    f"{vec_path}: {_VECTORS_KEY} hold NaN or inf in {len(bad)} rows (e.g. the KG "
                    "embeddings diverged): retrain them with `keplm train-kge`"
                )

        kg = cls(
            ent_ids,
            rel_ids,
            np.asarray(triples, dtype=np.int64).reshape(-1, 3),
            entity_names=ent_names,
            entity_aliases=ent_aliases,
            relation_names=rel_names,
            entity_vectors=vectors,
        )
        for key in ("num_entities", "num_relations", "num_triples"):
            if key in config and config[key] != getattr(kg, key):
                raise ValueError(f"{config_path}: {key}={config[key]} but files hold {getattr(kg, key)}")
        if verify_hash and config.get("content_hash") != kg.content_hash():
            raise ValueError(
                f"content hash mismatch in {directory}: kg_config.json says {config.get('content_hash')!r}, "
                f"files hash to {kg.content_hash()!r} (files modified or corrupted)"
            )
        return kg

    @classmethod
    def from_triples(
        cls,
        triples: Iterable[tuple[str, str, str]],
        entity_names: dict[str, str] | None = None,
        entity_aliases: dict[str, list[str]] | None = None,
        relation_names: dict[str, str] | None = None,
    ) -> KnowledgeGraph:
        """Build from string triples; ids get indices in first-seen order (triples first, then ids
        that only appear in ``entity_names``/``entity_aliases``/``relation_names``)."""
        b = KnowledgeGraphBuilder("from_triples")
        for i, trip in enumerate(triples):
            if len(trip) != 3:
                raise ValueError(f"triple {i} must be (head, relation, tail), got {trip!r}")
            b.add(*(str(x) for x in trip), where=("triple", i))
        for eid in [*(entity_names or {}), *(entity_aliases or {})]:
            b.entity(eid)
        for rid in relation_names or {}:
            b.relation(rid)
        b.names = dict(entity_names or {})
        b.aliases = {e: alias_list(a, f"entity_aliases[{e!r}]") for e, a in (entity_aliases or {}).items()}
        b.rel_names = dict(relation_names or {})
        return cls.from_builder(b)

    @classmethod
    def from_builder(cls, builder: KnowledgeGraphBuilder) -> KnowledgeGraph:
        """The graph a :class:`~keplm.knowledge.builder.KnowledgeGraphBuilder` accumulated, with what it merged in
        ``build_report``."""
        kg = cls(**builder.graph_parts())
        kg.build_report = builder.report()
        return kg


def non_finite_rows(vectors) -> list[int]:
    """Indices of the rows of a float matrix that hold a NaN or an infinity."""
    vectors = np.asarray(vectors)
    if not np.issubdtype(vectors.dtype, np.floating):
        return []
    return np.nonzero(~np.isfinite(vectors).all(axis=1))[0].tolist()
