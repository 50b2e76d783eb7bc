"""TRELM (Yan et al.): knowledge-enhanced masked-LM pre-training — noise-aware knowledge injection, contrastive
knowledge assessing, a knowledge-augmented memory bank and dynamic knowledge routing around a stock HF encoder."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoModelForMaskedLM
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput
from transformers.models.bert.modeling_bert import BertLMPredictionHead
from transformers.utils import can_return_tuple

from keplm.configuration.configuration_trelm import TrelmConfig
from keplm.knowledge.assets import KnowledgeAssets
from keplm.registration import register_method
from keplm.tokenization.processing_trelm import TrelmProcessor

from .base import KeplmPreTrainedModel, build_encoder, check_index_range, check_input_ids, output_flags
from .heads import check_labels
from .knowledge_routing import KnowledgeRouter, RoutedLinear
from .trelm_modules import ContrastiveKnowledgeLoss, KnowledgeInjection, MemoryBank, NegativeSampler
from .zero3 import gathered

logger = logging.getLogger(__name__)

#: state-dict keys of the routing deltas, never saved (save_pretrained folds them into the weights first)
ROUTE_KEYS = (".route_weight", ".route_bias", ".route_index")


@dataclass
class TrelmMaskedLMOutput(MaskedLMOutput):
    """[`MaskedLMOutput`] with TRELM's two losses apart (eq. 3): ``mlm_loss`` and ``cka_loss`` (None when off or
    without targets). In training with labels, ``logits`` is None: only the masked positions are decoded."""

    mlm_loss: torch.FloatTensor | None = None
    cka_loss: torch.FloatTensor | None = None


class TrelmPreTrainedModel(KeplmPreTrainedModel):
    config_class = TrelmConfig
    base_model_prefix = "trelm"

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            module.bias.data.zero_()
        elif isinstance(module, (MemoryBank, KnowledgeInjection)):
            module.reset()

    @classmethod
    def config_kwargs_from_assets(cls, assets: KnowledgeAssets | None) -> dict:
        if assets is None:
            return {}
        kwargs = {"entity_vocab_size": assets.num_entities}
        vectors = getattr(assets.kg, "entity_vectors", None) if assets.kg is not None else None
        if vectors is not None:
            kwargs["kge_dim"] = int(vectors.shape[1])
        return kwargs

    def check_knowledge_assets(self, assets: KnowledgeAssets) -> None:
        if assets.num_entities != self.config.entity_vocab_size:
            raise ValueError(
                f"the knowledge assets have {assets.num_entities} entities but the model was built for "
                f"{self.config.entity_vocab_size}"
            )
        if self.config.use_injection and self.config.kge_dim:
            vectors = getattr(assets.kg, "entity_vectors", None) if assets.kg is not None else None
            if vectors is None:
                raise ValueError(
                    "knowledge injection needs KG embeddings: the assets' KG has no entity_vectors "
                    "(train them with `keplm train-kge`)"
                )
            if vectors.shape[1] != self.config.kge_dim:
                raise ValueError(
                    f"KG embeddings of dimension {vectors.shape[1]}, the model expects {self.config.kge_dim}"
                )

    def set_knowledge_assets(self, assets: KnowledgeAssets) -> None:
        """Attach the assets and fill the injection's KG-embedding table: entity-vocabulary row → its KG vector
        (entities without one are never injected; counted in ``kge_coverage``)."""
        super().set_knowledge_assets(assets)
        injection = self.base_model.injection
        if injection is None or injection.projection is None:
            return
        kg = assets.kg
        table = np.zeros((assets.num_entities, self.config.kge_dim), dtype=np.float32)
        known = np.zeros(assets.num_entities, dtype=bool)
        for row, entity in enumerate(assets.entity_vocab):
            index = kg.entity_index(entity) if row > 0 and kg.has_entity(entity) else None
            if index is not None:
                table[row], known[row] = kg.entity_vectors[index], True
        self.kge_coverage = {"entities": assets.num_entities - 1, "with_kg_embedding": int(known.sum())}
        missing = self.kge_coverage["entities"] - self.kge_coverage["with_kg_embedding"]
        if missing:
            logger.warning(
                "%d of %d entities have no KG embedding: they are never injected",
                missing,
                self.kge_coverage["entities"],
            )
        injection.set_table(torch.from_numpy(table), torch.from_numpy(known))

    def extend_entity_vocabulary(self, assets: KnowledgeAssets) -> None:
        """Take ``assets`` whose entity vocabulary is this model's with rows appended (the old rows keep their
        index), e.g. for entities that only the KG holds: TRELM has no trained per-entity weight, so a new row needs
        only its KG vector (injection table) and an empty memory-bank entry."""
        old = self.knowledge_assets
        if old is None or list(assets.entity_vocab[: old.num_entities]) != list(old.entity_vocab):
            raise ValueError("extend_entity_vocabulary: the new entity vocabulary must start with the model's own")
        grow = assets.num_entities - old.num_entities
        if grow:
            base = self.base_model
            if base.memory_bank is not None:
                base.memory_bank.grow(grow)
            if base.injection is not None:
                base.injection.grow(grow)
            self.config.entity_vocab_size = assets.num_entities
        self.set_knowledge_assets(assets)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Routing deltas are folded into the FFN weights first: a saved TRELM model is a plain encoder + head."""
        router = getattr(self, "router", None)
        if router is not None:
            router.fold()  # in place: a state dict taken before (the Trainer's) holds the folded weights too
            state = kwargs.get("state_dict")
            state = self.state_dict() if state is None else state
            kwargs["state_dict"] = {k: v for k, v in state.items() if not k.endswith(ROUTE_KEYS)}
        return super().save_pretrained(save_directory, *args, **kwargs)


class TrelmModel(TrelmPreTrainedModel):
    """The encoder with TRELM's input side: knowledge injection and the memory bank (3.1–3.2).

    Knowledge inputs (``TrelmProcessor``): ``entity_ids`` [B, L] (entity-vocabulary row of each mention token, 0
    elsewhere), ``mention_token_map`` [B, L] (mention index per token, −1 elsewhere) and ``inject_mask`` [B, L]
    (tokens of important entities). Without them the model is the plain encoder. In training the memory bank is
    updated from the outputs after every forward (unless ``memory_frozen``).
    """

    def __init__(self, config: TrelmConfig):
        super().__init__(config)
        encoder_config = config.encoder_config
        self.encoder = build_encoder(encoder_config)
        hidden = encoder_config.hidden_size
        self.injection = (
            KnowledgeInjection(
                hidden,
                config.entity_vocab_size,
                config.kge_dim if config.use_injection else None,
                config.injection_mode,
            )
            if config.uses_knowledge
            else None
        )
        self.memory_bank = (
            MemoryBank(
                config.entity_vocab_size,
                hidden,
                config.memory_window,
                config.memory_momentum,
                config.memory_lambda,
                config.memory_decay,
            )
            if config.use_memory_bank
            else None
        )
        self.memory_frozen = False
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        entity_ids=None,
        mention_token_map=None,
        inject_mask=None,
        output_hidden_states=None,
        output_attentions=None,
        **kwargs,
    ) -> BaseModelOutput:
        r"""
        entity_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`): entity-vocabulary row of the
            entity each token mentions (0: none / unknown).
        mention_token_map (`torch.LongTensor` of shape `(batch_size, sequence_length)`): index of the mention each
            token belongs to within its example, −1 elsewhere.
        inject_mask (`torch.BoolTensor` of shape `(batch_size, sequence_length)`): tokens of important entities.
        """
        check_input_ids(input_ids, self.config)
        if attention_mask is None and input_ids is not None:
            attention_mask = torch.ones_like(input_ids)
        knowledge = entity_ids is not None and self.injection is not None
        if knowledge:
            if (input_ids is None) == (inputs_embeds is None):
                raise ValueError("pass either input_ids or inputs_embeds")
            if inject_mask is None or mention_token_map is None:
                raise ValueError("entity_ids come with mention_token_map and inject_mask (TrelmProcessor makes them)")
            shape = tuple(input_ids.shape) if input_ids is not None else tuple(inputs_embeds.shape[:2])
            if tuple(entity_ids.shape) != shape:
                raise ValueError(f"entity_ids has shape {tuple(entity_ids.shape)}, the input {shape}")
            check_index_range(
                entity_ids,
                0,
                self.config.entity_vocab_size,
                "entity_ids must lie in [0, {high}), the entity vocabulary of the model's knowledge assets",
            )
            if inputs_embeds is None:  # the word embeddings the knowledge is injected into (or given as they are)
                inputs_embeds = self.encoder.get_input_embeddings()(input_ids)
            memory = memory_mask = None
            if self.memory_bank is not None and self.memory_bank.lam > 0:
                memory, memory_mask = self.memory_bank.read(entity_ids)
            inputs_embeds = self.injection(
                inputs_embeds,
                entity_ids,
                inject_mask.bool(),
                memory,
                memory_mask,
                self.memory_bank.lam if self.memory_bank is not None else 0.0,
            )
            input_ids = None
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        outputs = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
            **extra,
        )
        if knowledge and self.memory_bank is not None and self.training and not self.memory_frozen:
            self.memory_bank.update(outputs.last_hidden_state, attention_mask, entity_ids, mention_token_map)
        return BaseModelOutput(
            last_hidden_state=outputs.last_hidden_state,
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
        )


class TrelmForMaskedLM(TrelmPreTrainedModel):
    """TRELM for masked-LM pre-training: MLM + contrastive knowledge assessing (eq. 2–3), with knowledge routing
    (3.3) once :meth:`enable_knowledge_routing` is called. Works with ``pipeline("fill-mask")`` (plain text in:
    no knowledge inputs needed at inference)."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "trelm.encoder.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: TrelmConfig):
        super().__init__(config)
        self.trelm = TrelmModel(config)
        self.lm_head = BertLMPredictionHead(config.encoder_config)
        self.cka = ContrastiveKnowledgeLoss()
        self.negative_sampler = NegativeSampler(config.encoder_config.vocab_size, config.cka_sampler)
        self.router: KnowledgeRouter | None = None
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    # ------------------------------------------------------------------ building
    @classmethod
    def from_base_pretrained(cls, base_model_name_or_path, knowledge_assets=None, dtype=torch.float32, **config_kwargs):
        """As :meth:`KeplmPreTrainedModel.from_base_pretrained`; the base checkpoint's MLM head is loaded when it has
        one (BERT's ``cls.predictions``), else the head is new with its decoder tied to the word embeddings, and the
        loading report says which."""
        model = super().from_base_pretrained(base_model_name_or_path, knowledge_assets, dtype, **config_kwargs)
        model.load_base_mlm_head(base_model_name_or_path)
        return model

    def load_base_mlm_head(self, path) -> bool:
        try:
            base, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
        except (OSError, ValueError) as error:
            logger.warning("no masked-LM head read from %s (%s): the head is new", path, error)
            base, info = None, {"missing_keys": ["cls.predictions.transform.dense.weight"]}
        head = getattr(getattr(base, "cls", None), "predictions", None)
        if head is None or any(k.startswith("cls.predictions.transform") for k in info["missing_keys"]):
            self.loading_report["mlm_head"] = "new (the checkpoint has none); decoder tied to the word embeddings"
            logger.warning(
                "%s has no masked-LM head: TRELM's head transform is newly initialised and its decoder is "
                "tied to the word embeddings",
                path,
            )
            return False
        with torch.no_grad(), gathered([*self.lm_head.parameters(), *head.parameters()], modify=True):
            self.lm_head.transform.load_state_dict(head.transform.state_dict())
            self.lm_head.bias.copy_(head.bias)
        self.loading_report["mlm_head"] = f"loaded from {path}; decoder tied to the word embeddings"
        self.loading_report["newly_initialized"] = [
            m for m in self.loading_report["newly_initialized"] if m != "lm_head"
        ]
        return True

    def set_cka_entities(self, name_tokens: torch.Tensor, name_lengths: torch.Tensor, counts: torch.Tensor) -> None:
        """The negative sampler's entity names and frequencies (``TrelmProcessor.entity_name_table``)."""
        self.negative_sampler.set_entities(name_tokens, name_lengths, counts)

    def save_encoder(self, save_directory, tokenizer=None) -> None:
        """The pre-trained encoder alone as a plain checkpoint of its own type (e.g. ``BertModel``; routing deltas
        folded in), with ``tokenizer``: what the fine-tuning scripts' ``--model_name_or_path`` and
        ``from_base_pretrained`` take (task-adaptive pre-training, downstream fine-tuning)."""
        if self.router is not None:
            self.router.fold()
        self.trelm.encoder.save_pretrained(save_directory)
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)

    # ------------------------------------------------------------------ routing
    def enable_knowledge_routing(self) -> KnowledgeRouter:
        """Install :class:`KnowledgeRouter` (3.3): the FFN linear layers train only through their routed rows /
        columns; every other encoder parameter is frozen except those named in ``config.routing_always_train``.
        Call before the optimizer is built (the Trainer builds it from the parameters that require grad)."""
        if self.router is None:
            self.router = KnowledgeRouter(
                self.trelm.encoder, self.config.encoder_config.num_hidden_layers, self.config.routing_fraction
            )
        deltas = {id(p) for p in self.router.delta_parameters()}
        prefixes = tuple(self.config.routing_always_train)
        for name, parameter in self.named_parameters():
            if id(parameter) not in deltas:
                parameter.requires_grad_(name.startswith(prefixes))
        return self.router

    def sharding_blockers(self, engine: str) -> list[str]:
        """Knowledge routing runs the inner encoder on its own between steps and folds its deltas into the weights,
        which FSDP2's sharded parameters (gathered only inside the whole model's forward) do not allow. DeepSpeed
        gathers per module and routing resets its copies of the deltas (``knowledge_routing.reset_optimizer_state``)."""
        if self.router is None or engine != "FSDP":
            return []
        return [
            "knowledge routing (TRELM 3.3) runs the encoder outside the model's forward and folds its deltas into "
            "sharded weights: pre-train with --no_routing, or with DDP or DeepSpeed"
        ]

    def routing_targets(self, cka_labels, labels):
        """Positions and correct tokens that routing attributes: the CKA targets, else the MLM targets."""
        targets = cka_labels if cka_labels is not None and (cka_labels != -100).any() else labels
        if targets is None:
            return None
        rows, cols = (targets != -100).nonzero(as_tuple=True)
        return (rows, cols, targets[rows, cols]) if rows.numel() else None

    def knowledge_probability(self, inputs: dict, rows, cols, tokens, negatives=None, repeat: int = 1):
        """p(y*) at the target positions (eq. 9): the sampled softmax over the CKA negatives when CKA is on, the full
        softmax otherwise; ``repeat`` runs the batch ``repeat`` times (scale-major) and returns [repeat·N]."""
        model_inputs = {k: v for k, v in inputs.items() if k not in ("labels", "cka_labels", "cka_token_index")}
        if repeat > 1:
            model_inputs = {k: v.repeat(repeat, *([1] * (v.dim() - 1))) for k, v in model_inputs.items()}
        hidden = self.trelm(**model_inputs).last_hidden_state
        size = inputs["input_ids"].shape[0]
        offsets = (torch.arange(repeat, device=rows.device) * size).repeat_interleave(rows.numel())
        states = self.lm_head.transform(hidden[offsets + rows.repeat(repeat), cols.repeat(repeat)])
        targets = tokens.repeat(repeat)
        if negatives is None:
            logits = self.lm_head.decoder(states).float()
            return torch.softmax(logits, -1).gather(1, targets.unsqueeze(1)).squeeze(1)
        # the sampled softmax reads the head's weights outside its forward: gathered under ZeRO-3
        with gathered([self.lm_head.decoder.weight, self.lm_head.bias]):
            return self.cka.probability(
                states, targets, negatives.repeat(repeat, 1), self.lm_head.decoder.weight, self.lm_head.bias
            )

    def before_training_step(self, inputs: dict, state, optimizer) -> dict:
        """The Trainer's per-step hook: every ``routing_interval`` steps, attribute and re-route on this batch."""
        if self.router is None or state.global_step % self.config.routing_interval:
            return {}
        targets = self.routing_targets(inputs.get("cka_labels"), inputs.get("labels"))
        if targets is None:
            return {}
        rows, cols, tokens = targets
        negatives = None
        if self.config.use_cka:
            index = inputs.get("cka_token_index", torch.zeros_like(inputs["input_ids"]))[rows, cols]
            negatives = self.cka_negatives(index)
        was_training, frozen = self.training, self.trelm.memory_frozen
        self.trelm.memory_frozen = True  # the attribution passes must not move the memory bank
        self.eval()  # no dropout: the attribution of one fixed function
        try:
            scores = self.router.attribute(
                lambda: self.knowledge_probability(inputs, rows, cols, tokens, negatives),
                (rows, cols),
                self.config.routing_steps,
                lambda m: lambda: self.knowledge_probability(inputs, rows, cols, tokens, negatives, repeat=m),
                self.config.routing_batch_steps,
            )
            self.router.route(scores, optimizer)
        finally:
            self.train(was_training)
            self.trelm.memory_frozen = frozen
        return {"routing_targets": int(rows.numel())}

    # ------------------------------------------------------------------ training state (not model weights)
    def training_state(self) -> dict:
        """What a Trainer checkpoint keeps besides weights and optimizer: the memory bank and the routed neurons."""
        state = {}
        if self.trelm.memory_bank is not None:
            state["memory_bank"] = self.trelm.memory_bank.training_state()
        if self.router is not None:
            state["route_indices"] = self.router.route_indices()
        return state

    def load_training_state(self, state: dict) -> None:
        if "memory_bank" in state and self.trelm.memory_bank is not None:
            self.trelm.memory_bank.load_training_state(state["memory_bank"])
        if "route_indices" in state:
            router = self.router or self.enable_knowledge_routing()
            router.set_route_indices(list(state["route_indices"]))

    def cka_negatives(self, index: torch.Tensor) -> torch.Tensor:
        """The CKA negatives of targets at token ``index`` of their entity; evaluation draws the same ones every
        call (a fixed generator), so that an evaluation loss is reproducible."""
        generator = None if self.training else torch.Generator(device=index.device).manual_seed(0)
        return self.negative_sampler(index, self.config.cka_num_negatives, generator=generator)

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        entity_ids=None,
        mention_token_map=None,
        inject_mask=None,
        labels=None,
        cka_labels=None,
        cka_token_index=None,
        output_hidden_states=None,
        output_attentions=None,
        **kwargs,
    ) -> TrelmMaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`): MLM targets, −100 elsewhere.
        cka_labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`): the tokens of each fact's tail
            entity (masked in the input), −100 elsewhere: the CKA targets (eq. 2).
        cka_token_index (`torch.LongTensor` of shape `(batch_size, sequence_length)`): position of each CKA target
            within its entity mention (which token of a negative entity's name it is contrasted with).
        """
        outputs = self.trelm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            entity_ids=entity_ids,
            mention_token_map=mention_token_map,
            inject_mask=inject_mask,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        hidden = outputs.last_hidden_state
        vocab = self.config.encoder_config.vocab_size
        for name, targets in (("labels", labels), ("cka_labels", cka_labels)):
            check_labels(
                targets, vocab, name, f"an MLM target must be a token id of the encoder's {vocab}-token vocabulary"
            )
        logits = mlm_loss = cka_loss = loss = None
        if labels is not None and self.training:  # decode only the masked positions
            rows, cols = (labels != -100).nonzero(as_tuple=True)
            masked_logits = self.lm_head(hidden[rows, cols]).float()
            mlm_loss = (
                nn.functional.cross_entropy(masked_logits, labels[rows, cols]) if rows.numel() else hidden.sum() * 0.0
            )
        else:
            logits = self.lm_head(hidden)
            if labels is not None:
                mlm_loss = nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        loss = mlm_loss
        if self.config.use_cka and cka_labels is not None and mlm_loss is not None:
            rows, cols = (cka_labels != -100).nonzero(as_tuple=True)
            index = cka_token_index[rows, cols] if cka_token_index is not None else torch.zeros_like(rows)
            negatives = self.cka_negatives(index)
            states = self.lm_head.transform(hidden[rows, cols])
            cka_loss = self.cka(
                states, cka_labels[rows, cols], negatives, self.lm_head.decoder.weight, self.lm_head.bias
            )
            weight = self.config.cka_weight
            loss = weight * mlm_loss + (1 - weight) * cka_loss
        return TrelmMaskedLMOutput(
            loss=loss,
            logits=logits,
            mlm_loss=mlm_loss,
            cka_loss=cka_loss,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    #: extra losses the Trainer logs beside the total (KeplmTrainer)
    logged_losses = ("mlm_loss", "cka_loss")


register_method(TrelmConfig, {AutoModel: TrelmModel, AutoModelForMaskedLM: TrelmForMaskedLM}, processor=TrelmProcessor)

__all__ = ["TrelmPreTrainedModel", "TrelmModel", "TrelmForMaskedLM", "TrelmMaskedLMOutput", "RoutedLinear"]
