"""Tests that kill one-line bugs the suite used to miss (issue 43, "what the suite does not catch"): each checks a
value by hand where a plausible slip (a hash over shapes, a vocabulary left out of a hash, the shorter of two aliases,
an off-by-one rank) would give another one."""

from __future__ import annotations

import numpy as np

from keplm.knowledge import EntityLinker, KnowledgeAssets, KnowledgeGraph


def _kg(triples) -> KnowledgeGraph:
    return KnowledgeGraph.from_triples(triples)


def test_the_kg_hash_covers_the_triples_values_not_only_their_shape():
    def graph(triples):
        return KnowledgeGraph(["A", "B", "C"], ["r"], np.array(triples))

    one, other = graph([[0, 0, 1], [1, 0, 2]]), graph([[0, 0, 2], [1, 0, 1]])  # same entities, same shape
    assert one.content_hash() != other.content_hash()
    assert one.content_hash() == graph([[0, 0, 1], [1, 0, 2]]).content_hash()


def test_the_vocabulary_hash_covers_the_relation_vocabulary():
    kg = _kg([("A", "r", "B")])
    entities = ["A", "B"]
    first = KnowledgeAssets.build(entities, ["r1"], kg=None)
    second = KnowledgeAssets.build(entities, ["r2"], kg=None)
    assert first.entity_vocab == second.entity_vocab and first.relation_vocab != second.relation_vocab
    assert first.content_hash() != second.content_hash()
    assert (
        KnowledgeAssets.build(entities, kg=kg).content_hash() == KnowledgeAssets.build(entities, kg=kg).content_hash()
    )


def test_the_longest_alias_wins_among_matches_at_one_start():
    kg = KnowledgeGraph.from_triples([("Q1", "P1", "Q2")], entity_names={"Q1": "New York", "Q2": "New York City"})
    text = "She moved to New York City last year ."
    mentions = EntityLinker(kg).link(text).entities
    assert [(m.id, text[m.start : m.end]) for m in mentions] == [("Q2", "New York City")]
    assert [m.id for m in EntityLinker(kg).link("Back in New York .").entities] == ["Q1"]
