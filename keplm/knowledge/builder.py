"""Where a knowledge graph's string ids get their positions: :class:`KnowledgeGraphBuilder` (used by every loader
and :meth:`KnowledgeGraph.from_triples`, with one policy for duplicates: merged and counted) and :func:`merge_kgs`
(the union of several graphs)."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np

from .graph import KnowledgeGraph, alias_list

logger = logging.getLogger(__name__)

#: what :class:`KnowledgeGraphBuilder` merges and counts (``KnowledgeGraph.build_report``)
DUPLICATE_KINDS = {
    "duplicate_triples": "repeated (head, relation, tail) facts dropped",
    "entity_redeclared": "entities declared again (merged into the first declaration)",
    "names_kept_as_aliases": "other names of an entity that already had one (kept as aliases)",
    "relation_redeclared": "relations declared again (merged into the first declaration)",
    "relation_names_dropped": "other names of a relation that already had one (the first name is kept)",
}
_SHOWN = 5


class KnowledgeGraphBuilder:
    """Accumulates string triples, names and aliases, then builds a :class:`KnowledgeGraph`.

    The one place where string ids get their positions (first seen, first indexed) and where duplicates get one
    policy for every loader: **merged and counted**. A repeated fact is kept once; an entity declared again keeps
    its first name, and a different later name becomes an alias (nothing is lost whichever line comes first); a
    relation keeps its first name. :meth:`build` puts the counts and the first offenders (``file:line``) in
    ``KnowledgeGraph.build_report`` and logs them at WARNING (at INFO for a source whose files overlap by design,
    ``expected_duplicates=True``: the LAMA T-REx files repeat facts).
    """

    def __init__(self, source: str = "knowledge graph", expected_duplicates: bool = False):
        self.source = source
        self.expected_duplicates = expected_duplicates
        self.e_index: dict[str, int] = {}
        self.r_index: dict[str, int] = {}
        self.rows: list[tuple[int, int, int]] = []
        self._row_set: set[tuple[int, int, int]] = set()
        self.names: dict[str, str] = {}
        self.aliases: dict[str, list[str]] = {}
        self.rel_names: dict[str, str] = {}
        self._declared: set[str] = set()
        self._declared_relations: set[str] = set()
        self.counts: dict[str, int] = dict.fromkeys(DUPLICATE_KINDS, 0)
        self.examples: dict[str, list[str]] = {kind: [] for kind in DUPLICATE_KINDS}

    def _count(self, kind: str, what: str, where) -> None:
        """Count one merged duplicate; ``where`` is a string or a ``(file, line)`` pair, formatted only when shown."""
        self.counts[kind] += 1
        if len(self.examples[kind]) < _SHOWN:
            if isinstance(where, tuple):
                where = f"{where[0]}:{where[1]}"
            self.examples[kind].append(f"{where}: {what}" if where else what)

    def entity(self, eid: str) -> int:
        return self.e_index.setdefault(eid, len(self.e_index))

    def relation(self, rid: str) -> int:
        return self.r_index.setdefault(rid, len(self.r_index))

    def add(self, h: str, r: str, t: str, where=None) -> None:
        """Add the fact (h, r, t); a repeated fact is counted and kept once."""
        row = (self.entity(h), self.relation(r), self.entity(t))
        if row in self._row_set:
            self._count("duplicate_triples", f"{h} {r} {t}", where)
            return
        self._row_set.add(row)
        self.rows.append(row)

    def set_name(self, eid: str, name, where=None) -> None:
        """Name ``eid``; when it already has another name, this one becomes an alias (counted)."""
        name = str(name) if name is not None else ""
        if not name.strip():
            return
        if eid not in self.names:
            self.names[eid] = name
        elif self.names[eid] != name:
            self._count("names_kept_as_aliases", f"{eid} {name!r} (name {self.names[eid]!r})", where)
            self.add_alias(eid, name)

    def declare_entity(self, eid: str, name=None, aliases=None, where=None) -> None:
        """An entity declaration (JSONL ``{"type": "entity"}``): a second one for the same id is merged into the
        first and counted."""
        if eid in self._declared:
            self._count("entity_redeclared", eid, where)
        self._declared.add(eid)
        self.entity(eid)
        self.set_name(eid, name, where)
        for alias in alias_list(aliases, f"{where[0]}:{where[1]}" if isinstance(where, tuple) else where or eid):
            self.add_alias(eid, alias)

    def set_relation_name(self, rid: str, name, where=None) -> None:
        name = str(name) if name is not None else ""
        if not name.strip():
            return
        if rid not in self.rel_names:
            self.rel_names[rid] = name
        elif self.rel_names[rid] != name:
            self._count("relation_names_dropped", f"{rid} {name!r} (name {self.rel_names[rid]!r})", where)

    def declare_relation(self, rid: str, name=None, where=None) -> None:
        if rid in self._declared_relations:
            self._count("relation_redeclared", rid, where)
        self._declared_relations.add(rid)
        self.relation(rid)
        self.set_relation_name(rid, name, where)

    def add_alias(self, eid: str, alias: str) -> None:
        alias = " ".join(alias.split())
        if not alias:
            return
        lst = self.aliases.setdefault(eid, [])
        if alias != self.names.get(eid) and alias not in lst:
            lst.append(alias)

    def report(self) -> dict:
        """What was merged: counts per kind (:data:`DUPLICATE_KINDS`) and the first offenders of each."""
        return {
            "source": self.source,
            **self.counts,
            "examples": {kind: list(found) for kind, found in self.examples.items() if found},
        }

    def build(self) -> KnowledgeGraph:
        """The graph; repeated facts are already dropped."""
        ents, rels = list(self.e_index), list(self.r_index)
        names = [self.names.get(e, e) for e in ents]
        aliases = [[a for a in self.aliases.get(e, []) if a != n] for e, n in zip(ents, names)]
        kg = KnowledgeGraph(
            ents,
            rels,
            np.asarray(self.rows, dtype=np.int64).reshape(-1, 3),
            entity_names=names,
            entity_aliases=aliases,
            relation_names=[self.rel_names.get(r, r) for r in rels],
        )
        kg.build_report = self.report()
        merged = {kind: count for kind, count in self.counts.items() if count}
        if merged:
            level = logging.INFO if self.expected_duplicates else logging.WARNING
            logger.log(
                level,
                "%s: merged duplicates %s (e.g. %s)",
                self.source,
                ", ".join(f"{count} {DUPLICATE_KINDS[kind]}" for kind, count in merged.items()),
                {kind: self.examples[kind][:3] for kind in merged},
            )
        return kg


def merge_kgs(kgs, align_by_name: bool = True) -> KnowledgeGraph:
    """Union of several KGs (e.g. FB15k-237 names + T-REx Wikidata facts, KALA appendix A's "KG that fits the
    domain"). Equal ids are one entity/relation. With ``align_by_name``, an entity whose canonical name is held
    by exactly one entity of the merged graph so far, and by no other entity of its own KG, becomes that entity
    (its aliases and triples move to it); ambiguous names stay separate entities. Triples are deduplicated."""
    kgs = list(kgs)
    if not kgs:
        raise ValueError("merge_kgs needs at least one knowledge graph")
    if any(kg.entity_vectors is not None for kg in kgs):
        raise ValueError("cannot merge knowledge graphs that carry entity vectors; merge before adding vectors")
    e_index: dict[str, int] = {}
    ids: list[str] = []  # the first id given to a merged entity names it
    names: list[str] = []
    aliases: list[list[str]] = []
    r_index: dict[str, int] = {}
    rel_names: list[str] = []
    by_name: dict[str, int | None] = {}  # canonical name -> merged index (None: ambiguous)
    rows = []
    for kg in kgs:
        own_counts = Counter(kg.entity_names)
        e_map = np.empty(kg.num_entities, dtype=np.int64)
        for i, (eid, name) in enumerate(zip(kg.entity_ids, kg.entity_names)):
            idx = e_index.get(eid)
            if idx is None and align_by_name and own_counts[name] == 1 and by_name.get(name) is not None:
                idx = by_name[name]
            if idx is None:
                idx = e_index[eid] = len(names)
                ids.append(eid)
                names.append(name)
                aliases.append([])
            else:
                e_index.setdefault(eid, idx)
            e_map[i] = idx
            if by_name.get(name, idx) != idx or own_counts[name] > 1:
                by_name[name] = None
            elif name not in by_name:
                by_name[name] = idx
            for alias in [name, *kg.entity_aliases[i]]:
                if alias != names[idx] and alias not in aliases[idx]:
                    aliases[idx].append(alias)
        r_map = np.empty(kg.num_relations, dtype=np.int64)
        for j, (rid, rname) in enumerate(zip(kg.relation_ids, kg.relation_names)):
            if rid not in r_index:
                r_index[rid] = len(rel_names)
                rel_names.append(rname)
            r_map[j] = r_index[rid]
        if kg.num_triples:
            rows.append(np.stack([e_map[kg.triples[:, 0]], r_map[kg.triples[:, 1]], e_map[kg.triples[:, 2]]], 1))
    triples = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    shared = 0
    if len(triples):
        _, first = np.unique(triples, axis=0, return_index=True)
        shared = len(triples) - len(first)
        triples = triples[np.sort(first)]
    merged = KnowledgeGraph(
        ids, list(r_index), triples, entity_names=names, entity_aliases=aliases, relation_names=rel_names
    )
    merged.build_report = {
        "source": "merge_kgs",
        "facts_in_several_parts": int(shared),
        "parts": [kg.build_report for kg in kgs],
    }
    return merged
