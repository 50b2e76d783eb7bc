"""KALA's task heads (Kang et al., 2022): token classification (NER) and extractive QA over :class:`KalaModel`, and
KALA's registration with the Auto classes (these heads, the encoder-decoder head of ``modeling_kala_generation.py``
and the bare :class:`KalaModel`)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForTokenClassification,
)
from transformers.modeling_outputs import QuestionAnsweringModelOutput, TokenClassifierOutput
from transformers.utils import can_return_tuple

from keplm.configuration.configuration_kala import KalaConfig
from keplm.registration import register_method
from keplm.tokenization.processing_kala import KalaProcessor

from .heads import check_labels, check_span_positions, classification_head
from .modeling_kala import KalaModel, KalaPreTrainedModel
from .modeling_kala_generation import KalaForConditionalGeneration


def _knowledge_kwargs(entity_token_map, node_entity_ids, edge_index, edge_relation_ids) -> dict:
    return {
        "entity_token_map": entity_token_map,
        "node_entity_ids": node_entity_ids,
        "edge_index": edge_index,
        "edge_relation_ids": edge_relation_ids,
    }


class KalaForTokenClassification(KalaPreTrainedModel):
    """KALA with a token-classification (NER) head."""

    def __init__(self, config: KalaConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.kala = KalaModel(config)
        self.dropout, self.classifier = classification_head(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        entity_token_map=None,
        node_entity_ids=None,
        edge_index=None,
        edge_relation_ids=None,
        labels: torch.Tensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`): tag ids, -100 = ignored."""
        outputs = self.kala(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **_knowledge_kwargs(entity_token_map, node_entity_ids, edge_index, edge_relation_ids),
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        # transformers' token-classification loss (cross-entropy in float32, -100 ignored)
        check_labels(labels, self.num_labels)
        loss = self.loss_function(logits, labels, self.config) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class KalaForQuestionAnswering(KalaPreTrainedModel):
    """KALA with an extractive-QA span head (start/end logits)."""

    def __init__(self, config: KalaConfig):
        super().__init__(config)
        self.kala = KalaModel(config)
        self.qa_outputs = nn.Linear(config.encoder_config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        entity_token_map=None,
        node_entity_ids=None,
        edge_index=None,
        edge_relation_ids=None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        r"""start_positions / end_positions (`torch.LongTensor` of shape `(batch_size,)`): answer token span."""
        outputs = self.kala(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **_knowledge_kwargs(entity_token_map, node_entity_ids, edge_index, edge_relation_ids),
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        # transformers' span loss: mean of the start and end cross-entropies (positions outside the feature refused)
        check_span_positions(start_positions, end_positions, start_logits.size(1))
        loss = self.loss_function(start_logits.float(), end_logits.float(), start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


register_method(
    KalaConfig,
    {
        AutoModel: KalaModel,
        AutoModelForTokenClassification: KalaForTokenClassification,
        AutoModelForQuestionAnswering: KalaForQuestionAnswering,
        AutoModelForSeq2SeqLM: KalaForConditionalGeneration,
    },
    processor=KalaProcessor,
    run_recipe="keplm.training.recipes.kala:KalaRunRecipe",
)

__all__ = ["KalaForTokenClassification", "KalaForQuestionAnswering"]
