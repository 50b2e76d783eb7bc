"""Relation-extraction processor (KALA appendix A): document rows → candidate entity pairs with their relations.

A row (see :func:`keplm.data.docred.docred_document_to_row`) holds ``text``, the character spans of every entity's
mentions, the entity types and the gold facts ``(h, t, r)``. Every entity is a graph node, every ordered pair of
entities with a mention inside the token window is a candidate edge, and ``edge_labels`` holds its gold relation.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from keplm.configuration.configuration_relation_extraction import NO_RELATION
from keplm.knowledge.assets import KnowledgeAssets

from .alignment import encode_entities
from .processing_utils import KeplmProcessor
from .schema import GraphSchema

#: the features' per-document counts of what truncation and the relation vocabulary cost
COUNT_COLUMNS = (
    "num_mentions",
    "num_dropped_mentions",
    "num_entities",
    "num_excluded_entities",
    "num_shadowed_entities",
    "num_facts",
    "num_lost_facts",
    "num_unknown_relation_facts",
)


def document_facts(row: dict) -> list[dict]:
    """The gold facts ``{"h", "t", "r"}`` of a row (a ``datasets`` row holds them as a dict of lists)."""
    facts = row.get("facts") or []
    if isinstance(facts, dict):
        return [{"h": h, "t": t, "r": r} for h, t, r in zip(facts["h"], facts["t"], facts["r"])]
    return list(facts)


class RelationExtractionProcessor(KeplmProcessor):
    """Turns document rows (text, entity mention spans, types, facts) into relation-extraction features.

    Every ordered pair of distinct entities that keep a mention in the window is a candidate; a pair with
    several gold relations gets one candidate row per relation (so the loss is cross-entropy against each
    gold relation), a pair without any gets one row labelled no_relation (0). Entities left without a token
    (mentions truncated away, or shadowed: see :func:`~keplm.tokenization.alignment.encode_entities`) are
    excluded and their gold facts counted in ``num_lost_facts``; facts whose relation is outside ``label2id``
    are counted in ``num_unknown_relation_facts`` and their pair is not a candidate (unless it has another,
    known relation). ``negative_ratio`` keeps, per document, at most that many no_relation pairs per positive
    pair (at least one), drawn with a seed fixed per document (training only). It reads no knowledge graph.

    Args:
        tokenizer: a fast tokenizer (offset mappings map mention spans to tokens).
        label2id: the model's relation vocabulary (``no_relation`` has id 0).
        max_length: tokens per document (longer documents are truncated; what that costs is counted).
        negative_ratio: no_relation pairs kept per positive pair (None: all).
        seed: seed of the negative sampling.
        entity_types: entity type names (type id i + 1; 0 = unknown); None: every entity has type 0.
    """

    model_input_names = [
        "input_ids",
        "token_type_ids",
        "attention_mask",
        "entity_token_map",
        "node_entity_ids",
        "edge_index",
    ]
    sequence_families = {"input_ids": ("input_ids", "attention_mask", "token_type_ids", "entity_token_map")}
    position_keys: dict[str, str] = {}
    graph_schema = GraphSchema(edge_values=("edge_labels",))

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets | None = None,
        *,
        label2id: dict[str, int],
        max_length: int = 512,
        negative_ratio: float | None = None,
        seed: int = 0,
        entity_types: Sequence[str] | None = None,
        linker_kwargs: dict | None = None,
    ):
        super().__init__(tokenizer, knowledge_assets, linker_kwargs)
        if label2id.get(NO_RELATION, 0) != 0:
            raise ValueError(f"{NO_RELATION!r} must have id 0 in label2id, got {label2id.get(NO_RELATION)}")
        if negative_ratio is not None and negative_ratio < 0:
            raise ValueError(f"negative_ratio must be >= 0, got {negative_ratio}")
        if max_length < 2:
            raise ValueError(f"max_length must leave room for the special tokens, got {max_length}")
        self.label2id = {str(name): int(i) for name, i in label2id.items()}
        self.max_length = max_length
        self.negative_ratio = negative_ratio
        self.seed = seed
        self.entity_types = [str(t) for t in entity_types] if entity_types else None
        self.type_ids = {name: i + 1 for i, name in enumerate(self.entity_types or ())}

    @classmethod
    def from_model_config(cls, tokenizer: PreTrainedTokenizerBase, config, **kwargs) -> RelationExtractionProcessor:
        """The processor of a :class:`~keplm.configuration.RelationExtractionConfig`: its relation vocabulary and
        entity types (``kwargs``: ``max_length``, ``negative_ratio``, ``seed``)."""
        return cls(tokenizer, label2id=config.label2id, entity_types=config.entity_types, **kwargs)

    def processor_config(self) -> dict:
        """The settings saved in ``processor_config.json``."""
        return {
            **super().processor_config(),
            "label2id": self.label2id,
            "max_length": self.max_length,
            "negative_ratio": self.negative_ratio,
            "seed": self.seed,
            "entity_types": self.entity_types,
        }

    def check_config(self, config) -> None:
        """ValueError when the model's relation vocabulary or entity types differ from the processor's."""
        super().check_config(config)
        label2id = getattr(config, "label2id", None)
        if getattr(config, "no_relation_label", None) is not None and dict(label2id) != self.label2id:
            raise ValueError(
                f"the processor's relation ids {self.label2id} differ from the model's {dict(label2id)}: "
                "the labels would name the wrong relations"
            )
        if hasattr(config, "entity_types") and (config.entity_types or None) != self.entity_types:
            raise ValueError(
                f"the processor's entity types {self.entity_types} differ from the model's {config.entity_types}"
            )

    # ------------------------------------------------------------------ features
    def __call__(
        self,
        text: str,
        entity_spans: Sequence[Sequence[Sequence[int]]],
        entity_types: Sequence[str] | None = None,
        facts: Sequence[dict] = (),
        return_tensors: str | None = None,
    ) -> dict:
        """Features of one document: ``entity_spans[e]`` the character spans of entity e's mentions.
        ``return_tensors="pt"``: the model's inputs (and ``edge_labels``) as a batch of one, else lists."""
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors must be None or 'pt' (PyTorch), got {return_tensors!r}")
        features = self.document_features(
            {"text": text, "entity_spans": entity_spans, "entity_types": entity_types, "facts": list(facts)}
        )
        if return_tensors is None:
            return features
        return self.as_tensors(
            {key: value for key, value in features.items() if key in (*self.model_input_names, "edge_labels")}
        )

    def prepare_relation_features(self, examples: dict) -> dict:
        """``datasets.map(batched=True)`` function: the features of every row of a batch."""
        out: dict[str, list] = {}
        for i in range(len(examples["text"])):
            for key, value in self.document_features({key: examples[key][i] for key in examples}).items():
                out.setdefault(key, []).append(value)
        return out

    def document_features(self, row: dict) -> dict:
        """Features of one document row: tokens, ``entity_token_map``, the candidate pairs and their labels."""
        for key in ("text", "entity_spans"):
            if key not in row:
                raise ValueError(f"a relation-extraction row needs {key!r} (it has {sorted(row)})")
        spans = row["entity_spans"]
        encoded = encode_entities(self.tokenizer, row["text"], spans, self.max_length)
        kept = encoded.pop("entity_kept")
        facts = document_facts(row)
        gold, lost, unknown = self._gold_pairs(facts, kept)
        entities = np.nonzero(kept)[0]
        negatives = [(h, t) for h in entities for t in entities if h != t and (h, t) not in gold]
        negatives = self._sample_negatives(negatives, sum(1 for r in gold.values() if r), row.get("title") or "")
        pairs = sorted([(h, t, r) for (h, t), rels in gold.items() for r in rels] + [(h, t, 0) for h, t in negatives])
        types = row.get("entity_types") or [""] * len(spans)
        encoded.update(
            node_entity_ids=[self.type_ids.get(name, 0) for name in types],
            edge_index=[[int(h) for h, _, _ in pairs], [int(t) for _, t, _ in pairs]],
            edge_labels=[r for _, _, r in pairs],
            num_entities=len(spans),
            num_excluded_entities=int((~kept).sum()),
            num_facts=len(facts),
            num_lost_facts=lost,
            num_unknown_relation_facts=unknown,
        )
        return encoded

    def _gold_pairs(self, facts: list[dict], kept: np.ndarray) -> tuple[dict[tuple[int, int], list[int]], int, int]:
        """Gold relation ids per kept pair, and the counts of facts lost to truncation / outside the vocabulary."""
        gold: dict[tuple[int, int], list[int]] = {}
        lost = unknown = 0
        for fact in facts:
            h, t = int(fact["h"]), int(fact["t"])
            if not (0 <= h < len(kept) and 0 <= t < len(kept)):
                raise ValueError(f"fact {fact} names an entity outside 0..{len(kept) - 1}")
            if not (kept[h] and kept[t]):
                lost += 1
            elif fact["r"] not in self.label2id:
                unknown += 1
                gold.setdefault((h, t), [])
            else:
                relation = self.label2id[fact["r"]]
                if relation not in gold.setdefault((h, t), []):
                    gold[(h, t)].append(relation)
        return gold, lost, unknown

    def _sample_negatives(self, negatives: list, num_positive: int, title: str) -> list:
        """At most ``negative_ratio`` × positives no_relation pairs (at least one), seeded per document title."""
        if self.negative_ratio is None:
            return negatives
        limit = max(int(np.ceil(self.negative_ratio * num_positive)), 1)
        if len(negatives) <= limit:
            return negatives
        rng = np.random.default_rng([self.seed, zlib.crc32(title.encode("utf-8"))])
        chosen = rng.choice(len(negatives), size=limit, replace=False)
        return [negatives[i] for i in sorted(chosen)]


__all__ = ["RelationExtractionProcessor", "COUNT_COLUMNS", "document_facts"]
