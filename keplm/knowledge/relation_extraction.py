"""Relation extraction as a fact source for KALA annotations (KALA appendix A).

:class:`RelationExtractor` runs a trained [`KeplmForRelationExtraction`] over the entity mentions of a
:class:`KnowledgeAnnotation` and returns the predicted facts as :class:`Triplet`s between entity ids.
"""

from __future__ import annotations

import os

import torch
from transformers import AutoTokenizer

from keplm.data.docred import encode_entities
from keplm.modeling.modeling_relation_extraction import KeplmForRelationExtraction

from .annotation import KnowledgeAnnotation, Triplet


class RelationExtractor:
    """Predict facts between the linked entities of a text.

    Every distinct mention id is one entity (mentions without an id are ignored); every ordered pair of
    entities with a mention inside the first ``max_length`` tokens is scored, and a pair gets its top-1
    relation, or its top-2 one when no_relation wins but the runner-up has probability above ``threshold``
    (default: the model's ``top2_threshold``).
    """

    def __init__(self, model: KeplmForRelationExtraction, tokenizer, threshold: float | None = None,
                 max_length: int | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.threshold = model.config.top2_threshold if threshold is None else threshold
        positions = model.config.encoder_config.max_position_embeddings
        self.max_length = min(max_length or positions, positions)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, threshold: float | None = None, **kwargs) -> RelationExtractor:
        """Load the model and tokenizer saved together in ``path`` (a directory or Hub id)."""
        model = KeplmForRelationExtraction.from_pretrained(path, **kwargs)
        return cls(model, AutoTokenizer.from_pretrained(path), threshold=threshold)

    @torch.no_grad()
    def extract(self, text: str, annotation: KnowledgeAnnotation,
                entity_types: dict[str, str] | None = None) -> list[Triplet]:
        """Facts between the mentioned entities of ``text``; ``entity_types`` maps entity id → type name
        (used only by models trained with entity types)."""
        spans: dict[str, list[list[int]]] = {}
        for mention in annotation.validate(text).entities:
            if mention.id is not None:
                spans.setdefault(mention.id, []).append([mention.start, mention.end])
        ids = list(spans)
        if len(ids) < 2:
            return []
        encoded = encode_entities(self.tokenizer, text, list(spans.values()), self.max_length)
        kept = [i for i, keep in enumerate(encoded["entity_kept"]) if keep]
        pairs = [(h, t) for h in kept for t in kept if h != t]
        if not pairs:
            return []
        config = self.model.config
        type_ids = {name: i + 1 for i, name in enumerate(config.entity_types or ())}
        device = self.model.device
        inputs = {key: torch.tensor([encoded[key]], device=device)
                  for key in ("input_ids", "attention_mask", "token_type_ids", "entity_token_map") if key in encoded}
        logits = self.model(
            **inputs,
            node_entity_ids=torch.tensor([type_ids.get((entity_types or {}).get(i, ""), 0) for i in ids], device=device),
            edge_index=torch.tensor(pairs, device=device).T,
        ).logits
        relations, _ = self.model.predict_relations(logits, self.threshold)
        no_relation = config.label2id[config.no_relation_label]
        return [Triplet(h=ids[h], r=config.id2label[r], t=ids[t])
                for (h, t), r in zip(pairs, relations.tolist()) if r != no_relation]

    def annotate(self, text: str, annotation: KnowledgeAnnotation, **kwargs) -> KnowledgeAnnotation:
        """A copy of ``annotation`` whose triplets are the extracted facts (the KALA relation-extraction source)."""
        return KnowledgeAnnotation(entities=list(annotation.entities), triplets=self.extract(text, annotation, **kwargs))


__all__ = ["RelationExtractor"]
