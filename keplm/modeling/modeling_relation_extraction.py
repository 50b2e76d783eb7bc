"""Relation extraction over entity pairs: the fact source of KALA's annotations (KALA appendix A).

An encoder gives every entity the mean state of its mention tokens (``node_context``); tanh projections of
head and tail feed one bilinear layer that scores every relation of the vocabulary for each candidate pair.
:class:`RelationExtractor` runs a trained model over the linked mentions of a text (``keplm build-kg
--relation_source model``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer
from transformers import initialization as init
from transformers.utils import ModelOutput, can_return_tuple

from keplm.configuration.configuration_relation_extraction import RelationExtractionConfig
from keplm.file_utils import hub_kwargs
from keplm.knowledge.annotation import KnowledgeAnnotation, Triplet
from keplm.registration import register_method
from keplm.tokenization.processing_relation_extraction import RelationExtractionProcessor

from .base import KeplmPreTrainedModel, ParameterGroup, build_encoder, check_index_range, check_input_ids, output_flags
from .families import hidden_dropout
from .heads import check_labels
from .modeling_kala import node_context


@dataclass
class RelationExtractionOutput(ModelOutput):
    """Output of [`KeplmForRelationExtraction`].

    loss: mean cross-entropy over candidate pairs whose ``edge_labels`` is not -100.
    logits: ``[num_pairs, num_relations]`` relation scores of each candidate (head, tail) pair.
    entity_representations: ``[num_entities, hidden_size]`` mean mention-token state of each entity.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    entity_representations: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def select_relations(logits: torch.Tensor, threshold: float, no_relation_id: int = 0):
    """KALA appendix A: the top-1 relation, or the top-2 one when no_relation is top-1 and top-2 has p > threshold.

    Returns ``(relation ids, their probabilities)``, each of shape ``logits.shape[:-1]``.
    """
    probs = logits.float().softmax(dim=-1)
    top = probs.topk(2, dim=-1)
    first, second = top.indices[..., 0], top.indices[..., 1]
    use_second = (first == no_relation_id) & (top.values[..., 1] > threshold)
    chosen = torch.where(use_second, second, first)
    return chosen, probs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)


class BilinearPairScorer(nn.Module):
    """KALA appendix A ("a simple bilinear layer"): s_r(h, t) = tanh(W_h e_h)ᵀ U_r tanh(W_t e_t) + b_r."""

    def __init__(self, hidden_size: int, bilinear_dim: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.head_projection = nn.Linear(hidden_size, bilinear_dim)
        self.tail_projection = nn.Linear(hidden_size, bilinear_dim)
        self.bilinear = nn.Bilinear(bilinear_dim, bilinear_dim, num_labels)

    def forward(self, entities: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        entities = self.dropout(entities)
        heads = torch.tanh(self.head_projection(entities))  # projected once per entity, then gathered per pair
        tails = torch.tanh(self.tail_projection(entities))
        return self.bilinear(heads[edge_index[0]], tails[edge_index[1]])


class KeplmForRelationExtraction(KeplmPreTrainedModel):
    """An encoder with a bilinear relation classifier over candidate (head, tail) entity pairs.

    Inputs are batched like KALA's: ``entity_token_map`` marks the mention tokens of each entity (an index into
    the batch's entities, as [`KeplmDataCollator`] builds it) and ``edge_index`` lists the candidate pairs.
    It needs no knowledge assets.
    """

    config_class = RelationExtractionConfig
    base_model_prefix = "relation_extraction"  # no separate base model: the encoder is ``self.encoder``
    #: every parameter takes part in every step (the type embedding, when configured, in every forward)
    ddp_find_unused_parameters = False

    def __init__(self, config: RelationExtractionConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder_config)
        hidden = config.encoder_config.hidden_size
        dropout = config.dropout if config.dropout is not None else hidden_dropout(config.encoder_config)
        self.entity_type_embeddings = (
            nn.Embedding(config.num_entity_types, hidden, padding_idx=0) if config.num_entity_types else None
        )
        self.scorer = BilinearPairScorer(hidden, config.bilinear_dim, config.num_labels, dropout)
        self.post_init()

    def parameter_groups(self, learning_rate: float, head_learning_rate: float | None = None) -> list[ParameterGroup]:
        """``head_learning_rate``: the learning rate of everything but the encoder (projections, bilinear layer,
        entity-type embedding)."""
        if head_learning_rate is None:
            return []
        head = [p for name, p in self.named_parameters() if not name.startswith("encoder.") and p.requires_grad]
        return [ParameterGroup("head", head, head_learning_rate)]

    @torch.no_grad()
    def _init_weights(self, module):
        std = self.config.encoder_config.initializer_range
        if isinstance(module, (nn.Linear, nn.Bilinear)):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif module is self.entity_type_embeddings:
            init.normal_(module.weight, mean=0.0, std=std)
            if not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[0])  # the unknown type adds nothing
        else:
            super()._init_weights(module)

    def _check_inputs(self, input_shape, entity_token_map, node_entity_ids, edge_index, edge_labels) -> int:
        if entity_token_map is None or node_entity_ids is None or edge_index is None:
            raise ValueError(
                "relation extraction needs entity_token_map, node_entity_ids and edge_index "
                "(build batches with RelationExtractionProcessor and KeplmDataCollator)"
            )
        if tuple(entity_token_map.shape) != tuple(input_shape):
            raise ValueError(
                f"entity_token_map has shape {tuple(entity_token_map.shape)}, the input {tuple(input_shape)}"
            )
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must have shape [2, num_pairs], got {tuple(edge_index.shape)}")
        if edge_labels is not None and tuple(edge_labels.shape) != (edge_index.shape[1],):
            raise ValueError(f"edge_labels must have shape [{edge_index.shape[1]}], got {tuple(edge_labels.shape)}")
        num_entities = node_entity_ids.shape[0]
        check_index_range(
            entity_token_map, -1, num_entities, "entity_token_map points outside the {high} entities of the batch"
        )
        check_index_range(edge_index, 0, num_entities, "edge_index points outside the {high} entities of the batch")
        check_labels(
            edge_labels,
            self.config.num_labels,
            "edge_labels",
            f"a relation id must index the model's {self.config.num_labels} relations (config.id2label)",
        )
        if self.config.num_entity_types:
            limit = self.config.num_entity_types
            check_index_range(node_entity_ids, 0, limit, "node_entity_ids (entity types) must lie in [0, {high})")
        return num_entities

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        entity_token_map: torch.Tensor | None = None,
        node_entity_ids: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        edge_labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> RelationExtractionOutput:
        r"""
        entity_token_map (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            Entity (index into `node_entity_ids`) whose mention each token belongs to, -1 elsewhere.
        node_entity_ids (`torch.LongTensor` of shape `(num_entities,)`):
            Entity-type id of every entity of the batch (0 = unknown); used only if `config.entity_types` is set.
        edge_index (`torch.LongTensor` of shape `(2, num_pairs)`): head and tail entity of each candidate pair.
        edge_labels (`torch.LongTensor` of shape `(num_pairs,)`): gold relation id per pair (0 = no_relation,
            -100 = ignored). A pair with several gold relations appears once per relation.
        """
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        check_input_ids(input_ids, self.config)
        num_entities = self._check_inputs(ref.shape, entity_token_map, node_entity_ids, edge_index, edge_labels)
        encoder_kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        outputs = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **encoder_kwargs,
        )
        entities = node_context(outputs.last_hidden_state, entity_token_map, num_entities)
        if self.entity_type_embeddings is not None:
            entities = entities + self.entity_type_embeddings(node_entity_ids)
        logits = self.scorer(entities, edge_index)
        loss = None
        if edge_labels is not None:
            loss = pair_loss(logits, edge_labels)
        return RelationExtractionOutput(
            loss=loss,
            logits=logits,
            entity_representations=entities,
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
        )

    def predict_relations(self, logits: torch.Tensor, threshold: float | None = None):
        """Relation id (and probability) per pair by the top-1/top-2 rule with ``config.top2_threshold``."""
        threshold = self.config.top2_threshold if threshold is None else threshold
        return select_relations(logits, threshold, self.config.label2id[self.config.no_relation_label])


def pair_loss(logits: torch.Tensor, edge_labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over pairs labelled other than -100 (zero, with gradient, when there are none)."""
    labelled = edge_labels != -100
    losses = nn.functional.cross_entropy(logits.float(), edge_labels.clamp(min=0), reduction="none")
    return (losses * labelled).sum() / labelled.sum().clamp(min=1)


class RelationExtractor:
    """Predict facts between the linked entities of a text.

    Every distinct mention id is one entity (mentions without an id are ignored); every ordered pair of
    entities with a mention inside the first ``max_length`` tokens is scored, and a pair gets its top-1
    relation, or its top-2 one when no_relation wins but the runner-up has probability above ``threshold``
    (default: the model's ``top2_threshold``).
    """

    def __init__(
        self,
        model: KeplmForRelationExtraction,
        tokenizer,
        threshold: float | None = None,
        max_length: int | None = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.threshold = model.config.top2_threshold if threshold is None else threshold
        positions = model.config.encoder_config.max_position_embeddings
        self.max_length = min(max_length or positions, positions)
        self.processor = RelationExtractionProcessor.from_model_config(
            tokenizer, model.config, max_length=self.max_length
        )

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, threshold: float | None = None, **kwargs) -> RelationExtractor:
        """Load the model and tokenizer saved together in ``path`` (a directory or Hub id)."""
        model = KeplmForRelationExtraction.from_pretrained(path, **kwargs)
        return cls(model, AutoTokenizer.from_pretrained(path, **hub_kwargs(kwargs)), threshold=threshold)

    @torch.no_grad()
    def extract(
        self, text: str, annotation: KnowledgeAnnotation, entity_types: dict[str, str] | None = None
    ) -> list[Triplet]:
        """Facts between the mentioned entities of ``text``; ``entity_types`` maps entity id → type name
        (used only by models trained with entity types)."""
        spans: dict[str, list[list[int]]] = {}
        for mention in annotation.validate(text).entities:
            if mention.id is not None:
                spans.setdefault(mention.id, []).append([mention.start, mention.end])
        ids = list(spans)
        if len(ids) < 2:
            return []
        types = [(entity_types or {}).get(entity_id, "") for entity_id in ids]
        features = self.processor(text, list(spans.values()), types)
        pairs = list(zip(*features["edge_index"]))
        if not pairs:
            return []
        config = self.model.config
        device = self.model.device
        inputs = {key: torch.tensor(features[key], device=device) for key in ("node_entity_ids", "edge_index")}
        inputs.update(
            {
                key: torch.tensor([features[key]], device=device)
                for key in self.processor.sequence_families["input_ids"]
                if key in features
            }
        )
        logits = self.model(**inputs).logits
        relations, _ = self.model.predict_relations(logits, self.threshold)
        no_relation = config.label2id[config.no_relation_label]
        return [
            Triplet(h=ids[h], r=config.id2label[r], t=ids[t])
            for (h, t), r in zip(pairs, relations.tolist())
            if r != no_relation
        ]

    def annotate(self, text: str, annotation: KnowledgeAnnotation, **kwargs) -> KnowledgeAnnotation:
        """A copy of ``annotation`` whose triplets are the extracted facts (the KALA relation-extraction source)."""
        return KnowledgeAnnotation(
            entities=list(annotation.entities), triplets=self.extract(text, annotation, **kwargs)
        )

    def __repr__(self) -> str:  # names the extractor in linking cache fingerprints
        return f"RelationExtractor({self.model.config.name_or_path!r}, threshold={self.threshold})"


# pair-level relation extraction (KALA appendix A) has no task-specific Auto class
register_method(
    RelationExtractionConfig, {AutoModel: KeplmForRelationExtraction}, processor=RelationExtractionProcessor
)

__all__ = [
    "RelationExtractor",
    "KeplmForRelationExtraction",
    "RelationExtractionOutput",
    "BilinearPairScorer",
    "select_relations",
    "pair_loss",
]
