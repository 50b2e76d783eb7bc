"""KALA processor: the shared processor plus one knowledge graph per feature (KALA section 3.3)."""

from __future__ import annotations

import logging

import numpy as np
from transformers import PreTrainedTokenizerBase

from keplm.knowledge.assets import KnowledgeAssets

from .processing_utils import KeplmProcessor
from .schema import GraphSchema

logger = logging.getLogger(__name__)

GRAPH_COLUMNS = ("node_entity_ids", "edge_index", "edge_relation_ids")
KNOWLEDGE_COLUMNS = ("entity_token_map", *GRAPH_COLUMNS)


class KalaProcessor(KeplmProcessor):
    """Turns text (and a question) with character-level entity mentions into KALA model inputs.

    Per feature it adds ``entity_token_map`` (the local graph node of each token's mention, -1 elsewhere),
    ``node_entity_ids`` (entity-memory row per node; unseen entities → null row 0 but still a node, so relational
    retrieval can represent them from their neighbours), ``edge_index`` and ``edge_relation_ids`` (the KG facts
    touching the feature's mentions). Knowledge comes from precomputed annotations (KALA format, or the
    ``knowledge`` column of :meth:`link_dataset`) or, when none is given, from linking the text.

    ``use_inverse_relations`` must agree with the model's config (checked when they meet).
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask", *KNOWLEDGE_COLUMNS]
    sequence_families = {"input_ids": (*KeplmProcessor.sequence_families["input_ids"], "entity_token_map")}
    graph_schema = GraphSchema(edge_values=("edge_relation_ids",))

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets | None = None,
        use_inverse_relations: bool = True,
        linker_kwargs: dict | None = None,
    ):
        super().__init__(tokenizer, knowledge_assets, linker_kwargs)
        self.use_inverse_relations = use_inverse_relations

    def processor_config(self) -> dict:
        return {**super().processor_config(), "use_inverse_relations": self.use_inverse_relations}

    def check_config(self, config) -> None:
        super().check_config(config)
        model_inverse = getattr(config, "use_inverse_relations", self.use_inverse_relations)
        if getattr(config, "uses_knowledge", False) and model_inverse != self.use_inverse_relations:
            raise ValueError(
                f"the processor builds graphs with use_inverse_relations={self.use_inverse_relations} but the model "
                f"was configured with use_inverse_relations={model_inverse}: its relation ids would not match"
            )

    # ------------------------------------------------------------------ graph of one feature
    def build_graph(
        self, mention_ids: list[str | None], triplets, annotation_mention_ids=None
    ) -> tuple[list[int], list[list[int]], list[int], list[int]]:
        """Nodes = mentioned entities (one per distinct id; one per id-less mention) + the entities of their facts.

        A fact is kept when it connects to a mention of the feature through the annotation's facts, up to as many
        hops as the annotation itself reaches from all its mentions (``annotation_mention_ids``, default: the
        feature's): a linker annotation made with ``hops=k`` gives its window every fact within k hops of the
        window's mentions, and a 1-hop annotation exactly the facts touching them (facts of mentions outside a
        QA window or a truncated sentence do not leak in through a shared neighbour).

        Every kept fact (h, r, t) gives the edge t → h with relation id r and, with inverse relations, h → t with
        r + (number of relations); an edge repeated with the same source, target and relation id (a repeated
        fact, or two relations unknown to the vocabulary) is kept once. Nodes and edges come in fact order.
        Returns ``(node_entity_ids, edge_index [2, E] as [sources, targets], edge_relation_ids, node of each
        mention)``.
        """
        assets = self.knowledge_assets
        node_of: dict[str, int] = {}
        nodes: list[int] = []
        mention_nodes = []
        for entity_id in mention_ids:
            if entity_id is None:
                mention_nodes.append(len(nodes))
                nodes.append(0)
                continue
            if entity_id not in node_of:
                node_of[entity_id] = len(nodes)
                nodes.append(assets.entity_row(entity_id))
            mention_nodes.append(node_of[entity_id])
        facts = [
            (str(h), str(r), str(t))
            for h, r, t in ((f.h, f.r, f.t) if hasattr(f, "h") else (f["h"], f["r"], f["t"]) for f in triplets)
        ]
        annotation_ids = (
            set(node_of)
            if annotation_mention_ids is None
            else {str(e) for e in annotation_mention_ids if e is not None} | set(node_of)
        )
        reach = max((d for d in fact_depths(annotation_ids, facts) if d is not None), default=0)
        depths = fact_depths(set(node_of), facts)
        sources, targets, relations = [], [], []
        edges_seen: set[tuple[int, int, int]] = set()
        inverse_offset = assets.num_relations
        for (h, r, t), depth in zip(facts, depths):
            if depth is None or depth > reach:
                continue  # a fact about entities outside this window
            for entity_id in (h, t):
                if entity_id not in node_of:
                    node_of[entity_id] = len(nodes)
                    nodes.append(assets.entity_row(entity_id))
            relation = assets.relation_row(r)
            edges = [(node_of[t], node_of[h], relation)]  # message tail → head with r
            if self.use_inverse_relations:  # message head → tail with r⁻¹
                edges.append((node_of[h], node_of[t], relation + inverse_offset))
            for edge in edges:
                if edge not in edges_seen:
                    edges_seen.add(edge)
                    sources.append(edge[0])
                    targets.append(edge[1])
                    relations.append(edge[2])
        return nodes, [sources, targets], relations, mention_nodes

    def entity_coverage(self, knowledge, max_examples: int = 5) -> dict:
        """How the entity and relation ids of a ``knowledge`` column (or any annotations) meet the KG and the entity
        memory: :meth:`~keplm.knowledge.KnowledgeAssets.entity_coverage`, logged at WARNING when ids are missing from
        the KG (a typo or another KG's ids: an entity reads the null row like an unseen one without being unseen, a
        relation reads the unknown relation)."""
        report = self.knowledge_assets.entity_coverage(knowledge, max_examples=max_examples)
        for part in ("mentions", "fact_entities"):
            if report[part]["unknown"]:
                logger.warning(
                    "%d of %d %s have an entity id that is not in the knowledge graph (e.g. %s): they are "
                    "read as the null entity",
                    report[part]["unknown"],
                    report[part]["total"],
                    part.replace("_", " "),
                    report[part]["unknown_examples"],
                )
        relations = report["fact_relations"]
        if relations["unknown"]:
            logger.warning(
                "%d of %d facts have a relation that is not in the knowledge graph (e.g. %s): they are read "
                "as the unknown relation",
                relations["unknown"],
                relations["total"],
                relations["unknown_examples"],
            )
        return report

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """``entity_token_map`` and the graph of one feature from the mentions that have tokens in it."""
        token_map = np.full(len(offsets), -1, dtype=np.int64)
        spans = self.mention_spans(offsets, masks, annotations)
        triplets = [fact for annotation in annotations if annotation is not None for fact in annotation.triplets]
        mention_ids = [None if mention.id is None else str(mention.id) for _, _, mention in spans]
        annotation_ids = [m.id for annotation in annotations if annotation is not None for m in annotation.entities]
        nodes, edges, relations, mention_nodes = self.build_graph(mention_ids, triplets, annotation_ids)
        overlaps = 0
        for (first, last, _), node in zip(spans, mention_nodes):
            window = token_map[first : last + 1]
            overlaps += int((window >= 0).any())
            window[window < 0] = node  # the earlier (leftmost) mention keeps overlapping tokens
        if overlaps:
            logger.warning("%d overlapping entity mentions share tokens; the earlier mention keeps them", overlaps)
        return {
            "entity_token_map": token_map.tolist(),
            "node_entity_ids": nodes,
            "edge_index": edges,
            "edge_relation_ids": relations,
        }


def fact_depths(sources: set[str], facts: list[tuple[str, str, str]]) -> list[int | None]:
    """Hop distance of each fact ``(h, r, t)`` from the entities ``sources``: 1 for a fact touching a source,
    k + 1 for a fact touching an entity first reached at depth k, None for a fact not connected to any source."""
    depths: list[int | None] = [None] * len(facts)
    reached, frontier, remaining, level = set(sources), set(sources), list(range(len(facts))), 0
    while frontier and remaining:
        level += 1
        following, left = set(), []
        for index in remaining:
            h, _, t = facts[index]
            if h in frontier or t in frontier:
                depths[index] = level
                following.update(e for e in (h, t) if e not in reached)
            else:
                left.append(index)
        reached |= following
        frontier, remaining = following, left
    return depths


__all__ = ["KalaProcessor", "KNOWLEDGE_COLUMNS", "GRAPH_COLUMNS", "fact_depths"]
