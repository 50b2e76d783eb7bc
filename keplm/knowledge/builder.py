"""Where a knowledge graph's string ids get their positions: :class:`KnowledgeGraphBuilder`, used by every loader
and :meth:`KnowledgeGraph.from_triples`, with one policy for duplicates: merged and counted. A leaf module: the graph
is made from it by ``KnowledgeGraph.from_builder``."""

from __future__ import annotations

import logging

import numpy as np

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
    """Accumulates string triples, names and aliases for a ``KnowledgeGraph`` (``KnowledgeGraph.from_builder(b)``).

    The one place where string ids get their positions (first seen, first indexed) and where duplicates get one
    policy for every loader: **merged and counted**. A repeated fact is kept once; an entity declared again keeps
    its first name, and a different later name becomes an alias (nothing is lost whichever line comes first); a
    relation keeps its first name. The counts and the first offenders (``file:line``) go to the graph's
    ``build_report`` (:meth:`report`), and :meth:`graph_parts` logs them at WARNING (at INFO for a source whose files
    overlap by design, ``expected_duplicates=True``: the LAMA T-REx files repeat facts).
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

    def graph_parts(self) -> dict:
        """The accumulated graph as :class:`~keplm.knowledge.graph.KnowledgeGraph` arguments (repeated facts already
        dropped; built by ``KnowledgeGraph.from_builder``); logs what was merged."""
        ents, rels = list(self.e_index), list(self.r_index)
        names = [self.names.get(e, e) for e in ents]
        merged = {kind: count for kind, count in self.counts.items() if count}
        if merged:
            level = logging.INFO if self.expected_duplicates else logging.WARNING
            logger.log(
                level,
                "%s: merged duplicates %s",
                self.source,
                "; ".join(
                    f"{count} {DUPLICATE_KINDS[kind]}, e.g. {' | '.join(self.examples[kind][:3])}"
                    for kind, count in merged.items()
                ),
            )
        return {
            "entity_ids": ents,
            "relation_ids": rels,
            "triples": np.asarray(self.rows, dtype=np.int64).reshape(-1, 3),
            "entity_names": names,
            "entity_aliases": [[a for a in self.aliases.get(e, []) if a != n] for e, n in zip(ents, names)],
            "relation_names": [self.rel_names.get(r, r) for r in rels],
        }


def alias_list(value, where: str = "aliases") -> list[str]:
    """Aliases as a list of strings: a string is one alias (``"Paname"``, not five letters), None none; anything
    else but a list/tuple of strings is a ValueError naming ``where``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value):
        return list(value)
    raise ValueError(f"{where}: aliases must be a string or a list of strings, got {value!r}")
