"""Bad inputs at KALA's per-feature graph and the entity memory (issue 11, items 4 and 10): multi-hop facts kept,
repeated facts one edge, unknown entity ids counted apart from unseen ones (catalogue: docs/reliability.md)."""

from __future__ import annotations

import logging

import pytest

from keplm import KalaProcessor
from keplm.knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeAssets, KnowledgeGraph

# a chain Alpha -> Beta -> Gamma -> Delta plus a side branch Alpha -> Epsilon -> Zeta
CHAIN = [("A", "r1", "B"), ("B", "r2", "C"), ("C", "r3", "D"), ("A", "r4", "E"), ("E", "r5", "F")]
NAMES = {"A": "Alpha", "B": "Beta", "C": "Gamma", "D": "Delta", "E": "Epsilon", "F": "Zeta"}


@pytest.fixture()
def chain_kg():
    return KnowledgeGraph.from_triples(CHAIN, entity_names=NAMES)


def edges_of(features) -> list[tuple[int, int, int]]:
    sources, targets = features["edge_index"]
    return list(zip(sources, targets, features["edge_relation_ids"]))


def test_two_hop_linker_facts_all_reach_the_graph(tokenizer, chain_kg):
    """``EntityLinker(hops=2)`` returns 4 facts for "alpha": the graph used to keep only the 2 touching the
    mention (everything the second hop added was lost)."""
    annotation = EntityLinker(chain_kg, hops=2).link("alpha")
    assert len(annotation.triplets) == 4  # A-B, A-E (one hop), B-C, E-F (two hops); C-D is three hops away
    assets = KnowledgeAssets.build(["A"], kg=chain_kg)
    features = KalaProcessor(tokenizer, assets)("alpha", annotation=annotation)
    assert len(features["node_entity_ids"]) == 5  # A, B, C, E, F
    assert len(edges_of(features)) == 8  # every fact, both directions
    one_hop = KalaProcessor(tokenizer, assets)("alpha", annotation=EntityLinker(chain_kg, hops=1).link("alpha"))
    assert len(edges_of(one_hop)) == 4


def test_repeated_facts_are_one_edge(tokenizer, chain_kg):
    """A repeated triplet used to become a repeated edge (and change the logits through attention)."""
    assets = KnowledgeAssets.build(["A"], kg=chain_kg)
    fact = {"h": "A", "r": "r1", "t": "B"}
    annotation = {"entities": [{"text": "alpha", "start": 0, "end": 5, "id": "A"}], "triplets": [fact, fact, fact]}
    features = KalaProcessor(tokenizer, assets)("alpha", annotation=annotation)
    r1 = assets.relation_row("r1")
    assert edges_of(features) == [(1, 0, r1), (0, 1, r1 + assets.num_relations)]


def test_a_window_gets_no_facts_of_mentions_outside_it_through_a_shared_neighbour(tokenizer, chain_kg):
    """With a 1-hop annotation a window keeps exactly the facts touching its own mentions (the graph of every
    1-hop annotation is what it was): B is mentioned outside the window and shares no fact path within one hop."""
    processor = KalaProcessor(tokenizer, KnowledgeAssets.build(["A", "B"], kg=chain_kg))
    facts = [{"h": "A", "r": "r1", "t": "B"}, {"h": "B", "r": "r2", "t": "C"}, {"h": "A", "r": "r4", "t": "E"}]
    nodes, edges, relations, mention_nodes = processor.build_graph(["A"], facts, annotation_mention_ids=["A", "B"])
    assert len(relations) == 4 and len(nodes) == 3  # A-B and A-E; B-C belongs to B's window
    nodes, edges, relations, _ = processor.build_graph(["A"], facts)  # the window holds every mention
    assert len(relations) == 6


def test_unknown_entity_ids_are_counted_apart_from_unseen_ones(tokenizer, kg, assets, caplog):
    """An id missing from the KG and an id in the KG but not in the memory both read the null row; only the
    second is unseen."""
    knowledge = [
        {
            "entities": [
                {"text": "paris", "start": 0, "end": 5, "id": "Q90"},  # in memory
                {"text": "unknownia", "start": 6, "end": 15, "id": "Q999"},  # in the KG, unseen
                {"text": "atlantis", "start": 16, "end": 24, "id": "Q-typo"},  # not in the KG
                {"text": "somewhere", "start": 25, "end": 34, "id": None},
            ],
            "triplets": [{"h": "Q90", "r": "P17", "t": "Q142"}, {"h": "Q-typo", "r": "P17", "t": "Q142"}],
        },
        KnowledgeAnnotation(),
    ]
    processor = KalaProcessor(tokenizer, assets)
    with caplog.at_level(logging.WARNING, logger="keplm.tokenization.processing_kala"):
        report = processor.entity_coverage(knowledge)
    mentions = report["mentions"]
    assert (
        mentions["total"],
        mentions["without_id"],
        mentions["in_memory"],
        mentions["unseen"],
        mentions["unknown"],
    ) == (4, 1, 1, 1, 1)
    assert mentions["unknown_examples"] == ["Q-typo"]
    facts = report["fact_entities"]
    assert (facts["total"], facts["in_memory"], facts["unknown"]) == (4, 3, 1)
    assert "1 of 4 mentions have an entity id that is not in the knowledge graph (e.g. ['Q-typo'])" in caplog.text
    without_kg = KalaProcessor(tokenizer, assets.with_kg(None)).entity_coverage(knowledge)
    assert without_kg["mentions"]["unknown"] is None and without_kg["mentions"]["unseen"] == 2
