"""ToyKG's processor: the shared processor, and each mention token's entity row (``entity_ids``)."""

from __future__ import annotations

from keplm.tokenization.processing_utils import KeplmProcessor


class ToyKgProcessor(KeplmProcessor):
    model_input_names = ["input_ids", "token_type_ids", "attention_mask", "entity_ids"]
    sequence_families = {"input_ids": (*KeplmProcessor.sequence_families["input_ids"], "entity_ids")}

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """``entity_ids``: the entity row of the mention each token belongs to, 0 (null) elsewhere."""
        ids = [0] * len(offsets)
        for first, last, mention in self.mention_spans(offsets, masks, annotations):
            for position in range(first, last + 1):
                ids[position] = self.knowledge_assets.entity_row(mention.id)
        return {"entity_ids": ids}

    def facts_read(self, annotation: dict):
        return [], None  # reads no facts: only which entity each mention is
