"""KALA for encoder-decoder models (Kang et al., 2022, section 5.6: "applicable to encoder-decoder PLMs by applying
the KFM to the encoder"; generative QA with T5-small).

:class:`KalaForConditionalGeneration` wraps a stock seq2seq model (``T5ForConditionalGeneration``,
``BartForConditionalGeneration``, ... whatever ``AutoModelForSeq2SeqLM`` builds for the nested config) inside
:class:`~keplm.modeling.modeling_kala.KalaModel`: the entity memory, relational retrieval and KFM hooks are KALA's
own, placed in the seq2seq model's encoder stack (``keplm.modeling.families``: which blocks, which norms); the decoder
and LM head stay stock. ``generate()`` is transformers' own, given the output of the KALA encoder (which takes the
knowledge inputs), so it decodes from the encoder's output, beams included.
"""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils import can_return_tuple

from keplm.configuration.configuration_kala import KalaConfig

from .families import check_seq2seq
from .modeling_kala import KalaModel, KalaPreTrainedModel

#: KALA's knowledge inputs, read by the encoder only
KNOWLEDGE_INPUTS = ("entity_token_map", "node_entity_ids", "edge_index", "edge_relation_ids")


class KalaForConditionalGeneration(KalaPreTrainedModel, GenerationMixin):
    """KALA on an encoder-decoder model: KFM + relational retrieval in the encoder, a stock decoder and LM head.

    ``kala.encoder`` is the whole stock seq2seq model (its weights keep their stock names under ``kala.encoder.``);
    :meth:`forward` encodes with knowledge (unless ``encoder_outputs`` are given) and lets the stock model decode,
    shift ``labels`` into decoder inputs and compute the loss. Build it on a plain checkpoint with
    ``KalaForConditionalGeneration.from_base_pretrained("t5-small", knowledge_assets=...)``.
    """

    base_auto_class = AutoModelForSeq2SeqLM
    main_input_name = "input_ids"

    def __init__(self, config: KalaConfig):
        check_seq2seq(config.encoder_config)
        if config.num_extra_layers:
            raise ValueError(
                "KalaForConditionalGeneration has no extra layers (num_extra_layers must be 0): the "
                "'+ more params' baseline stacks encoder layers, which a seq2seq encoder's blocks "
                "(relative position biases, cross-attention masks) do not run alone"
            )
        super().__init__(config)
        self.kala = KalaModel(config, encoder_auto_class=AutoModelForSeq2SeqLM)
        # generation settings (decoder start, pad and eos tokens) are the stock model's
        self.generation_config = copy.deepcopy(self.seq2seq.generation_config)
        self.post_init()

    @classmethod
    def is_custom_code(cls) -> bool:
        """False: the weights are those of the transformers model it wraps, and transformers' custom-code shortcut
        would skip the modules whose stock init sits on the parent (T5's attention initialises its q/k/v/o), leaving
        such weights a checkpoint lacks uninitialised. KALA's own init leaves loaded weights as they are."""
        return False

    @property
    def seq2seq(self):
        """The stock seq2seq model (encoder, decoder, LM head) inside the KALA model."""
        return self.kala.encoder

    # ------------------------------------------------------------------ what GenerationMixin and the Trainer ask
    def get_encoder(self, modality: str | None = None):
        """The KALA encoder (:class:`KalaModel`): ``generate()`` calls it once with the knowledge inputs."""
        return self.kala if modality is None else super().get_encoder(modality)

    def get_decoder(self):
        return self.seq2seq.get_decoder()

    def get_output_embeddings(self):
        return self.seq2seq.get_output_embeddings()

    def set_output_embeddings(self, new_embeddings):
        self.seq2seq.set_output_embeddings(new_embeddings)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Decoder inputs from labels, the stock model's way (labels shifted right after the decoder start token)."""
        return self.seq2seq.prepare_decoder_input_ids_from_labels(labels=labels)

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        """transformers' ``generate()``, the encoder run here once on the knowledge inputs and passed as
        ``encoder_outputs``: decoding reads the encoder's output only, and beam search would otherwise repeat the
        batched graph's node and edge tensors as if they were per-example rows."""
        knowledge = {name: kwargs.pop(name, None) for name in KNOWLEDGE_INPUTS}
        if kwargs.get("encoder_outputs") is None:
            config = generation_config if generation_config is not None else self.generation_config
            ids = inputs if inputs is not None else kwargs.get("input_ids")
            if kwargs.get("attention_mask") is None and ids is not None:  # as generate() infers it: pads masked
                pad = config.pad_token_id
                kwargs["attention_mask"] = ids.ne(pad).long() if pad is not None else torch.ones_like(ids)
            flags = {
                name: kwargs.get(name, getattr(config, name, None))
                for name in ("output_attentions", "output_hidden_states")
            }
            with torch.no_grad():
                kwargs["encoder_outputs"] = self.kala(
                    input_ids=ids,
                    attention_mask=kwargs.get("attention_mask"),
                    inputs_embeds=kwargs.get("inputs_embeds"),
                    **knowledge,
                    **flags,
                    return_dict=True,
                )
        return super().generate(inputs, generation_config, **kwargs)

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        entity_token_map: torch.Tensor | None = None,
        node_entity_ids: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        edge_relation_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`): target token ids, -100 = ignored; the
            stock model shifts them right into `decoder_input_ids` when those are not given, and returns the
            cross-entropy loss.
        entity_token_map, node_entity_ids, edge_index, edge_relation_ids: KALA's knowledge inputs of the encoder
            input (as for [`KalaModel`]); not needed when `encoder_outputs` are given.
        Other keyword arguments (`cache`, `cache_position`, ...) go to the stock model.
        """
        # flags left unset come from this model's config (the stock model inside would read its own)
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if encoder_outputs is None:
            encoder_outputs = self.kala(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                entity_token_map=entity_token_map,
                node_entity_ids=node_entity_ids,
                edge_index=edge_index,
                edge_relation_ids=edge_relation_ids,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        return self.seq2seq(
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )


__all__ = ["KNOWLEDGE_INPUTS", "KalaForConditionalGeneration"]
