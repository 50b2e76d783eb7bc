"""KALA processor: the shared processor plus one knowledge graph per feature (KALA section 3.3)."""

from __future__ import annotations

import logging

import numpy as np
from transformers import PreTrainedTokenizerBase

from keplm.knowledge.assets import KnowledgeAssets

from .processing_utils import KeplmProcessor

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
    graph_keys = GRAPH_COLUMNS

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
        model_inverse = getattr(config, "use_inverse_relations", self.use_inverse_relations)
        if getattr(config, "uses_knowledge", False) and model_inverse != self.use_inverse_relations:
            raise ValueError(
                f"the processor builds graphs with use_inverse_relations={self.use_inverse_relations} but the model "
                f"was configured with use_inverse_relations={model_inverse}: its relation ids would not match"
            )

    # ------------------------------------------------------------------ graph of one feature
    def build_graph(self, mention_ids: list[str | None], triplets) -> tuple[list[int], list[list[int]], list[int],
                                                                            list[int]]:
        """Nodes = mentioned entities (one per distinct id; one per id-less mention) + their fact neighbours.

        Every fact (h, r, t) with a mentioned end gives the edge t → h with relation id r and, with inverse
        relations, h → t with r + (number of relations). Returns ``(node_entity_ids, edge_index [2, E] as
        [sources, targets], edge_relation_ids, node of each mention)``.
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
        mentioned = set(node_of)
        sources, targets, relations = [], [], []
        inverse_offset = assets.num_relations
        for fact in triplets:
            h, r, t = (fact.h, fact.r, fact.t) if hasattr(fact, "h") else (fact["h"], fact["r"], fact["t"])
            h, t = str(h), str(t)
            if h not in mentioned and t not in mentioned:
                continue  # a fact about entities outside this window
            for entity_id in (h, t):
                if entity_id not in node_of:
                    node_of[entity_id] = len(nodes)
                    nodes.append(assets.entity_row(entity_id))
            relation = assets.relation_row(str(r))
            sources.append(node_of[t])  # message tail → head with r
            targets.append(node_of[h])
            relations.append(relation)
            if self.use_inverse_relations:  # message head → tail with r⁻¹
                sources.append(node_of[h])
                targets.append(node_of[t])
                relations.append(relation + inverse_offset)
        return nodes, [sources, targets], relations, mention_nodes

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """``entity_token_map`` and the graph of one feature from the mentions that have tokens in it."""
        token_map = np.full(len(offsets), -1, dtype=np.int64)
        spans = self.mention_spans(offsets, masks, annotations)
        triplets = [fact for annotation in annotations if annotation is not None for fact in annotation.triplets]
        mention_ids = [None if mention.id is None else str(mention.id) for _, _, mention in spans]
        nodes, edges, relations, mention_nodes = self.build_graph(mention_ids, triplets)
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


__all__ = ["KalaProcessor", "KNOWLEDGE_COLUMNS", "GRAPH_COLUMNS"]
