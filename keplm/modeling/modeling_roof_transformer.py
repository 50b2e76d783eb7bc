"""Roof-Transformer (Liao et al.): a TASK encoder for the text and a KB encoder for verbalised KB triples, fused by
a "roof" over their concatenated outputs, for sequence classification / regression and extractive QA."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, AutoModelForQuestionAnswering, AutoModelForSequenceClassification
from transformers.modeling_outputs import QuestionAnsweringModelOutput, SequenceClassifierOutput
from transformers.utils import ModelOutput, can_return_tuple

from keplm.configuration.configuration_roof_transformer import RoofTransformerConfig
from keplm.knowledge.assets import KnowledgeAssets
from keplm.registration import register_method
from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor

from .base import (
    RAW_TEXT_HINT,
    ExtraLayers,
    KeplmPreTrainedModel,
    ParameterGroup,
    build_encoder,
    check_input_ids,
    output_flags,
)
from .heads import check_labels, check_span_positions, classification_head
from .knowledge_cache import KnowledgeEncodingCache

logger = logging.getLogger(__name__)


@dataclass
class RoofTransformerModelOutput(ModelOutput):
    """Output of [`RoofTransformerModel`].

    last_hidden_state: ``[batch, M + N, hidden]`` fused states: M text positions, then N knowledge positions.
    attention_mask: ``[batch, M + N]`` which fused positions hold a token.
    text_length: M, the number of text positions.
    """

    last_hidden_state: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    text_length: int | None = None


class RoofFusion(nn.Module):
    """The "roof" of Roof-Transformer (paper §3.1, §4.5): fuses the concatenated TASK and KB encoder outputs.

    ``transformer``: transformer layers of the encoder's class (copies of the text encoder's last ``fusion_layers``
    layers after ``from_base_pretrained``, paper appendix 6.3; ``transformer_random``: randomly initialised);
    ``lstm``: a bidirectional LSTM (hidden/2 per direction); ``linear``: one linear layer with the encoder's
    activation. Padding positions are masked in the transformer's attention; the LSTM reads each row's tokens only
    (text then knowledge, skipping the text's padding between them) and gives zero at padding.
    """

    def __init__(self, config: RoofTransformerConfig, encoder: nn.Module):
        super().__init__()
        self.kind = config.fusion
        hidden = config.encoder_config.hidden_size
        if self.kind.startswith("transformer"):
            copy_from = "encoder" if self.kind == "transformer" else None
            self.layers = ExtraLayers(encoder, config.fusion_layers, copy_from=copy_from)
        elif self.kind == "lstm":
            if hidden % 2:
                raise ValueError(f"an LSTM roof splits the hidden size over two directions; {hidden} is odd")
            self.lstm = nn.LSTM(hidden, hidden // 2, batch_first=True, bidirectional=True)
        elif self.kind == "linear":
            self.linear = nn.Linear(hidden, hidden)
            self.activation = nn.GELU()

    def forward(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.kind.startswith("transformer"):
            return self.layers(states, attention_mask)
        if self.kind == "lstm":
            # the LSTM reads each row's tokens only, in order: a row's text padding lies between its text and its
            # knowledge tokens, so the tokens are first moved to the front (a stable sort keeps their order), and
            # the outputs moved back to their positions (zero at padding)
            keep = attention_mask.bool()
            order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)
            index = order.unsqueeze(-1).expand(-1, -1, states.shape[-1])
            lengths = keep.sum(-1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(
                states.gather(1, index), lengths, batch_first=True, enforce_sorted=False
            )
            out, _ = self.lstm(packed)
            out = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=states.shape[1])[0]
            return torch.empty_like(out).scatter_(1, index, out)
        return self.activation(self.linear(states))


def segment_ids(
    segmentation: str, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None, knowledge: bool
) -> torch.Tensor:
    """Token types an encoder reads (paper §4.5). ``type2``: every KB token A (0), every TASK token B (1).
    ``type1``: KB tokens A and padding B; TASK question A, passage B, padding A (the tokenizer's own types).
    ``none``: every token A (encoders with one token type)."""
    if segmentation == "none":
        return torch.zeros_like(attention_mask)
    if segmentation == "type2":
        return torch.zeros_like(attention_mask) if knowledge else torch.ones_like(attention_mask)
    if knowledge:
        return (1 - attention_mask).long()
    return token_type_ids if token_type_ids is not None else torch.zeros_like(attention_mask)


class RoofTransformerPreTrainedModel(KeplmPreTrainedModel):
    config_class = RoofTransformerConfig
    base_model_prefix = "roof"

    @staticmethod
    def encoder_config_name(name: str) -> str:
        return "encoder" if name.startswith("extra_text_encoders.") else name

    @property
    def ddp_find_unused_parameters(self) -> bool:  # text encoders past a short input's windows get no gradient
        return self.config.num_text_encoders > 1

    def parameter_groups(self, learning_rate: float, fusion_lr_multiplier: float | None = None) -> list[ParameterGroup]:
        """``fusion_lr_multiplier``: the roof trains at this multiple of the encoders' learning rate (paper §4.5,
        appendix 6.3: 10x)."""
        if fusion_lr_multiplier is None or fusion_lr_multiplier == 1:
            return []
        fusion = getattr(self.base_model, "fusion", None)
        if fusion is None:
            raise ValueError("fusion_lr_multiplier needs a roof, and this model has none (fusion='none')")
        parameters = [p for p in fusion.parameters() if p.requires_grad]
        return [ParameterGroup("fusion", parameters, learning_rate * fusion_lr_multiplier)]

    @classmethod
    def config_kwargs_from_assets(cls, assets: KnowledgeAssets | None) -> dict:
        return {}

    @property
    def knowledge_cache(self) -> KnowledgeEncodingCache | None:
        """The cached KB encoder's encodings (``knowledge_encoding="cached"``), else None."""
        return self.base_model.__dict__.get("_knowledge_cache")

    def set_knowledge_cache_directory(self, directory) -> None:
        """Where the cached KB encoder keeps its encodings (default ``$KEPLM_CACHE/knowledge_encodings``)."""
        if self.knowledge_cache is None:
            raise ValueError("set_knowledge_cache_directory needs knowledge_encoding='cached'")
        self.knowledge_cache.set_directory(directory)

    def save_pretrained(self, save_directory, *args, **kwargs):
        if self.knowledge_cache is not None:  # checkpoints and the final save also persist new encodings
            self.knowledge_cache.flush()
        return super().save_pretrained(save_directory, *args, **kwargs)


class RoofTransformerModel(RoofTransformerPreTrainedModel):
    """TASK encoder(s) + KB encoder + roof (paper §3.1). Returns the fused states of M text then N knowledge
    positions.

    Knowledge encoding: ``joint`` — the KB encoder reads ``[CLS] unit_1 [SEP] unit_2 [SEP] ...`` and trains;
    ``cached`` (paper §4.4) — a frozen KB encoder reads each unit alone, ``[CLS] unit_i [SEP]``, once: its
    encodings are cached (:class:`~keplm.modeling.knowledge_cache.KnowledgeEncodingCache`, keyed by the encoder's
    weights and the unit's tokens, kept on disk across epochs and runs) and placed at the unit's positions of the
    joint layout (its tokens, then its [SEP] at the joint [SEP] after it; the first unit's [CLS] stands at the
    joint [CLS]), so both modes give the roof the same positions and masks. The paper concatenates each triple's
    full output; keplm drops the other units' own [CLS] states to keep the two modes aligned.
    """

    def __init__(self, config: RoofTransformerConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder_config)
        self.extra_text_encoders = nn.ModuleList(
            build_encoder(config.encoder_config) for _ in range(config.num_text_encoders - 1)
        )
        self.knowledge_encoder = build_encoder(config.knowledge_encoder_config) if config.uses_knowledge else None
        self.fusion = RoofFusion(config, self.encoder) if config.fusion != "none" else None
        # a plain attribute, not a module: the cache holds no parameters and is never saved with the weights
        self.__dict__["_knowledge_cache"] = KnowledgeEncodingCache() if config.knowledge_encoding == "cached" else None
        if self.knowledge_cache is not None:
            self.knowledge_encoder.requires_grad_(False)
        self.post_init()

    def named_encoders(self) -> dict:
        encoders = {"encoder": self.encoder}
        encoders.update({f"extra_text_encoders.{i}": e for i, e in enumerate(self.extra_text_encoders)})
        if self.knowledge_encoder is not None:
            encoders["knowledge_encoder"] = self.knowledge_encoder
        return encoders

    def train(self, mode: bool = True):
        super().train(mode)
        if self.knowledge_cache is not None:  # the cached KB encoder is frozen and runs without dropout
            self.knowledge_encoder.eval()
        return self

    # ------------------------------------------------------------------ text
    def _encode_text(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        types = segment_ids(self.config.segmentation, attention_mask, token_type_ids, knowledge=False)
        window = self.config.text_window
        encoders = [self.encoder, *self.extra_text_encoders]
        if input_ids.shape[1] > window * len(encoders):
            raise ValueError(
                f"the text has {input_ids.shape[1]} tokens but {len(encoders)} text encoder(s) read "
                f"{window} each: raise num_text_encoders or lower max_seq_length"
            )
        states = []
        for i, encoder in enumerate(encoders):
            piece = slice(i * window, (i + 1) * window)
            if i > 0 and (input_ids.shape[1] <= i * window or not attention_mask[:, piece].any()):
                break
            states.append(
                encoder(
                    input_ids=input_ids[:, piece],
                    attention_mask=attention_mask[:, piece],
                    token_type_ids=types[:, piece],
                    return_dict=True,
                ).last_hidden_state
            )
        text = torch.cat(states, dim=1)
        return (
            text
            if text.shape[1] == input_ids.shape[1]
            else nn.functional.pad(text, (0, 0, 0, input_ids.shape[1] - text.shape[1]))
        )

    # ------------------------------------------------------------------ knowledge
    def _encode_knowledge(self, input_ids, attention_mask, unit_ids) -> torch.Tensor:
        if self.knowledge_cache is None:
            types = segment_ids(self.config.segmentation, attention_mask, None, knowledge=True)
            return self.knowledge_encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=types, return_dict=True
            ).last_hidden_state
        if unit_ids is None:
            raise ValueError("cached knowledge encoding needs knowledge_unit_ids (RoofTransformerProcessor makes them)")
        return self.knowledge_cache.encode(self.knowledge_encoder, input_ids, attention_mask, unit_ids)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        knowledge_input_ids: torch.Tensor | None = None,
        knowledge_attention_mask: torch.Tensor | None = None,
        knowledge_unit_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> RoofTransformerModelOutput:
        r"""
        knowledge_input_ids (`torch.LongTensor` of shape `(batch_size, knowledge_length)`):
            `[CLS] unit_1 [SEP] unit_2 [SEP] ...`: the verbalised triples selected for each example.
        knowledge_attention_mask (`torch.LongTensor` of shape `(batch_size, knowledge_length)`): 1 on knowledge tokens.
        knowledge_unit_ids (`torch.LongTensor` of shape `(batch_size, knowledge_length)`): the unit of each knowledge
            token (-1 on [CLS]/[SEP]); needed by the cached KB encoder.
        """
        if any(output_flags(self.config, output_attentions, output_hidden_states)):
            raise ValueError(
                "Roof-Transformer returns no per-layer hidden states or attentions: its text encoders, knowledge "
                "encoder and roof are separate stacks with no one sequence of layers; read last_hidden_state (the "
                "fused states) or call the encoders (model.roof.encoder, model.roof.knowledge_encoder) yourself"
            )
        if input_ids is None:
            raise ValueError("Roof-Transformer needs input_ids")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        check_input_ids(input_ids, self.config)
        text = self._encode_text(input_ids, attention_mask, token_type_ids)
        if not self.config.uses_knowledge:
            return RoofTransformerModelOutput(
                last_hidden_state=text, attention_mask=attention_mask, text_length=text.shape[1]
            )
        if knowledge_input_ids is None:
            raise ValueError(
                "Roof-Transformer reads knowledge: pass knowledge_input_ids (RoofTransformerProcessor), or "
                + RAW_TEXT_HINT
            )
        if knowledge_attention_mask is None:
            knowledge_attention_mask = torch.ones_like(knowledge_input_ids)
        if knowledge_input_ids.shape[1] > self.config.max_knowledge_length + 1:
            raise ValueError(
                f"knowledge_input_ids has {knowledge_input_ids.shape[1]} tokens, more than "
                f"max_knowledge_length + [CLS] = {self.config.max_knowledge_length + 1}"
            )
        knowledge = self._encode_knowledge(knowledge_input_ids, knowledge_attention_mask, knowledge_unit_ids)
        states = torch.cat([text, knowledge.to(text.dtype)], dim=1)
        mask = torch.cat([attention_mask, knowledge_attention_mask], dim=1)
        fused = self.fusion(states, mask)
        return RoofTransformerModelOutput(last_hidden_state=fused, attention_mask=mask, text_length=text.shape[1])


class RoofTransformerForSequenceClassification(RoofTransformerPreTrainedModel):
    """Roof-Transformer with a classification (or, with ``num_labels=1``, regression: STS-B) head over the mean of
    the fused text states (paper §3.1: the prediction layer reads the fusion layer's mean output)."""

    def __init__(self, config: RoofTransformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roof = RoofTransformerModel(config)
        self.dropout, self.classifier = classification_head(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        knowledge_input_ids=None,
        knowledge_attention_mask=None,
        knowledge_unit_ids=None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""labels (`torch.LongTensor` of shape `(batch_size,)`, float for regression): the class (or score)."""
        out = self.roof(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            knowledge_input_ids=knowledge_input_ids,
            knowledge_attention_mask=knowledge_attention_mask,
            knowledge_unit_ids=knowledge_unit_ids,
            **{name: kwargs[name] for name in ("output_attentions", "output_hidden_states") if name in kwargs},
            return_dict=True,
        )
        text = out.last_hidden_state[:, : out.text_length]
        mask = out.attention_mask[:, : out.text_length].unsqueeze(-1).to(text.dtype)
        pooled = (text * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.classifier(self.dropout(pooled))
        # transformers' sequence-classification loss: MSE for one label (regression), cross-entropy otherwise
        check_labels(labels, self.num_labels)
        loss = self.loss_function(labels, logits.float(), self.config) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


class RoofTransformerForQuestionAnswering(RoofTransformerPreTrainedModel):
    """Roof-Transformer with an extractive-QA head over the fused text positions (paper §3.1): start/end logits for
    the M text positions only, padding masked, so neither a knowledge position nor padding can be an answer."""

    def __init__(self, config: RoofTransformerConfig):
        super().__init__(config)
        self.roof = RoofTransformerModel(config)
        self.qa_outputs = nn.Linear(config.encoder_config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        knowledge_input_ids=None,
        knowledge_attention_mask=None,
        knowledge_unit_ids=None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        r"""start_positions / end_positions (`torch.LongTensor` of shape `(batch_size,)`): the answer's token span."""
        out = self.roof(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            knowledge_input_ids=knowledge_input_ids,
            knowledge_attention_mask=knowledge_attention_mask,
            knowledge_unit_ids=knowledge_unit_ids,
            **{name: kwargs[name] for name in ("output_attentions", "output_hidden_states") if name in kwargs},
            return_dict=True,
        )
        text = out.last_hidden_state[:, : out.text_length]
        logits = self.qa_outputs(text).float()
        padding = out.attention_mask[:, : out.text_length] == 0
        logits = logits.masked_fill(padding.unsqueeze(-1), torch.finfo(logits.dtype).min)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        # transformers' span loss: mean of the start and end cross-entropies (positions outside the feature refused)
        check_span_positions(start_positions, end_positions, start_logits.size(1))
        loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)


register_method(
    RoofTransformerConfig,
    {
        AutoModel: RoofTransformerModel,
        AutoModelForSequenceClassification: RoofTransformerForSequenceClassification,
        AutoModelForQuestionAnswering: RoofTransformerForQuestionAnswering,
    },
    processor=RoofTransformerProcessor,
    run_recipe="keplm.training.recipes.roof_transformer:RoofTransformerRunRecipe",
)

__all__ = [
    "RoofTransformerModel",
    "RoofTransformerModelOutput",
    "RoofTransformerPreTrainedModel",
    "RoofTransformerForSequenceClassification",
    "RoofTransformerForQuestionAnswering",
    "RoofFusion",
    "segment_ids",
]
