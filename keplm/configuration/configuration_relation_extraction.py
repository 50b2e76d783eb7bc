"""Configuration of the relation-extraction model that supplies KALA's facts (KALA appendix A)."""

from __future__ import annotations

from keplm.configuration.method_card import MethodCard

from .base import KeplmConfig
from .configuration_kala import KALA_PAPER

NO_RELATION = "no_relation"


class RelationExtractionCard(MethodCard):
    """The relation extractor's words in its model cards (KALA appendix A): a task without a Hub pipeline."""

    name = noun = "relation extractor (KALA appendix A)"
    paper = KALA_PAPER
    task = "relation-extraction"

    def usage_notes(self, spec) -> list[str]:
        return [
            "As KALA's fact source: `keplm.RelationExtractor.from_pretrained(<checkpoint>)`, then "
            "`extractor.annotate(text, annotation)` adds the extracted triplets to an annotation's linked "
            "mentions (`keplm build-kg --relation_source model --re_model <checkpoint>` does it for a "
            "dataset).",
            "",
        ]

    def limits(self, spec) -> list[str]:
        return [
            "Predicts at most one relation per ordered entity pair (top-1, or top-2 when `no_relation` "
            "wins and the runner-up is above the threshold); precision is low with the paper's 0.1 rule "
            "(see Results)."
        ]


class RelationExtractionConfig(KeplmConfig):
    r"""Configuration for [`KeplmForRelationExtraction`]: an encoder with a bilinear layer over entity pairs.

    ``id2label`` / ``label2id`` are the relation vocabulary: id 0 is ``no_relation_label``, the others are
    relation ids (Wikidata P-ids for DocRED).

    Args:
        encoder_config: config of the wrapped encoder (BERT, RoBERTa, ...).
        bilinear_dim: size of the tanh head/tail projections fed to the bilinear layer.
        dropout: dropout on entity representations; `None` = the encoder's hidden dropout.
        no_relation_label: name of label 0.
        top2_threshold: a pair whose top-1 relation is ``no_relation`` gets its top-2 relation when that has
            probability above this (KALA appendix A: 0.1).
        max_relations: how many of the most frequent training relations the vocabulary keeps (paper: 100).
        entity_types: names of entity types (type id i + 1; 0 = unknown); `None` = no type embedding.
    """

    model_type = "keplm_relation_extraction"
    method_card = RelationExtractionCard()
    keys_to_ignore_at_inference = ["entity_representations"]
    card_settings = ("bilinear_dim", "top2_threshold", "max_relations", "entity_types")

    bilinear_dim: int = 128
    dropout: float | None = None
    no_relation_label: str = NO_RELATION
    top2_threshold: float = 0.1
    max_relations: int = 100
    entity_types: list[str] | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        labels = dict(self.id2label)
        if labels.get(0) != self.no_relation_label:
            if all(name == f"LABEL_{i}" for i, name in labels.items()):  # no relation vocabulary given yet
                labels[0] = self.no_relation_label
            else:
                raise ValueError(f"label 0 must be {self.no_relation_label!r}, got {labels.get(0)!r}")
        if sorted(labels) != list(range(len(labels))) or len(labels) < 2:
            raise ValueError(f"id2label must number at least 2 labels 0..n-1, got ids {sorted(labels)}")
        if len(labels) - 1 > self.max_relations:
            raise ValueError(f"{len(labels) - 1} relations exceed max_relations={self.max_relations}")
        if not 0.0 <= self.top2_threshold <= 1.0:
            raise ValueError(f"top2_threshold must be a probability, got {self.top2_threshold}")
        if self.bilinear_dim < 1:
            raise ValueError(f"bilinear_dim must be >= 1, got {self.bilinear_dim}")
        self.id2label = labels
        self.label2id = {name: i for i, name in labels.items()}
        if self.entity_types is not None:
            self.entity_types = [str(t) for t in self.entity_types]

    @property
    def reads_graph(self) -> bool:
        return True

    @property
    def num_entity_types(self) -> int:
        """Rows of the entity-type embedding (unknown type 0 included); 0 = no type embedding."""
        return len(self.entity_types) + 1 if self.entity_types else 0


__all__ = ["RelationExtractionConfig", "NO_RELATION"]
