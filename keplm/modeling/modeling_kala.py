"""KALA models (Kang et al., 2022): KFM-modulated encoder with entity memory and relational retrieval."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch_geometric.utils import scatter
from transformers import AutoModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import can_return_tuple

from keplm.configuration.configuration_kala import KalaConfig
from keplm.knowledge.assets import KnowledgeAssets

from .base import (
    RAW_TEXT_HINT,
    ExtraLayers,
    KeplmPreTrainedModel,
    ParameterGroup,
    build_encoder,
    check_index_range,
    check_input_ids,
    layer_norms,
    output_flags,
)
from .entity_memory import NULL_ENTITY_INDEX, EntityEmbedding, EntityMemory
from .families import encoder_blocks, initializer_range, text_encoder
from .kfm import KnowledgeFeatureModulation, apply_modulation, gather_modulation
from .relational_retrieval import RelationalAttentionConv, RelationalRetrieval

logger = logging.getLogger(__name__)

#: optimizers of the entity memory (``parameter_groups(entity_memory_optimizer=...)``): the Trainer's Adam (or
#: SparseAdam for a sparse memory), or row-wise AdaGrad (one accumulator per row instead of two per weight)
ENTITY_MEMORY_OPTIMIZERS = ("adam", "rowwise_adagrad")
#: optimizers of the knowledge modules (``parameter_groups(knowledge_optimizer=...)``): the Trainer's (None), or an
#: AdamW of their own, the paper's setup for T5 (section 5.6: T5 with Adafactor, the KALA module with AdamW, weight
#: decay 0.01)
KNOWLEDGE_OPTIMIZERS = (None, "adamw")


@dataclass
class KalaModelOutput(BaseModelOutput):
    """Output of [`KalaModel`] (a ``BaseModelOutput``, so an encoder-decoder's decoder takes it as its encoder's).

    entity_representations: ``[num_nodes, entity_dim]`` retrieved entity vectors v fed to the last KFM layer
        (after relational retrieval), one row per node of the batched context graphs.
    entity_has_knowledge: ``[num_nodes]`` whether v carries knowledge (False: modulation is the identity).
    Both are None for a batch that reads no knowledge, and for an inference batch on the CPU without any mention
    token (the knowledge layers are skipped there: KFM only changes mention tokens).
    """

    entity_representations: torch.FloatTensor | None = None
    entity_has_knowledge: torch.BoolTensor | None = None


class _KnowledgeState:
    """Knowledge of the batch being encoded, read by the KFM hooks of the chosen layers."""

    __slots__ = (
        "token_node_index",
        "in_mention",
        "entity_vectors",
        "has_knowledge",
        "edge_index",
        "edge_relation_ids",
        "tables",
        "last_vectors",
        "last_has_knowledge",
        "_read_rows",
        "passes",
        "current",
    )

    def __init__(self, token_node_index, entity_vectors, has_knowledge, edge_index, edge_relation_ids):
        self.token_node_index = token_node_index
        self.in_mention = token_node_index >= 0
        self.entity_vectors = entity_vectors
        self.has_knowledge = has_knowledge
        self.edge_index = edge_index
        self.edge_relation_ids = edge_relation_ids
        self.tables = {}
        self.last_vectors = None
        self.last_has_knowledge = None
        self._read_rows = None
        self.passes = {}  # shared block -> how many of its passes have started (ALBERT)
        self.current = {}  # shared block -> the encoder layer its running pass is

    def read_rows(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(the graph nodes some token reads, each token's row among them): the γ/β MLPs need only these rows
        (a sentence's graph has ~4x more nodes than mentions: neighbours only pass messages). Found on the CPU only,
        where ``nonzero`` costs no device sync, and not under ``torch.compile`` (data-dependent shape); elsewhere
        ``(None, token_node_index)``: every node. Tokens outside mentions point at -1 or at any row (ignored)."""
        if self._read_rows is None:
            index = self.token_node_index
            if index.device.type != "cpu" or torch.compiler.is_compiling():
                self._read_rows = (None, index)
            else:
                num_nodes = self.entity_vectors.shape[0]
                read = torch.zeros(num_nodes + 1, dtype=torch.bool, device=index.device)
                read[torch.where(self.in_mention, index, num_nodes)] = True  # outside mentions: the extra slot
                # rank of each read node (the extra slot last, so it shifts none; it keeps a 0-node graph indexable)
                self._read_rows = (read[:num_nodes].nonzero().squeeze(1), (read.cumsum(0) - 1)[index.clamp(min=0)])
        return self._read_rows


def node_context(hidden_states: torch.Tensor, token_node_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """h_e of KALA footnote 3: mean of the token states of each node's mentions (zero for unmentioned nodes)."""
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    index = token_node_index.reshape(-1)
    index = torch.where(index >= 0, index, num_nodes)  # tokens outside mentions go to a discarded extra row

    return scatter(hidden, index, dim=0, dim_size=num_nodes + 1, reduce="mean")[:num_nodes]


class KalaKnowledgeLayer(nn.Module):
    """Function h_l of KALA section 3.1 for one layer: (relational) retrieval, then the four γ/β MLPs."""

    def __init__(self, config: KalaConfig):
        super().__init__()

        hidden = config.encoder_config.hidden_size
        self.retrieval = (
            RelationalRetrieval(
                config.entity_dim,
                config.relation_dim,
                hidden,
                config.gnn_layers,
                config.knowledge_dropout,
                config.relation_message,
            )
            if config.retrieval_mode == "relational"
            else None
        )
        self.modulation = KnowledgeFeatureModulation(config.entity_dim, hidden, config.kfm_hidden_size)

    def forward(self, hidden_states: torch.Tensor, state: _KnowledgeState, relation_embeddings: nn.Embedding | None):
        vectors, has_knowledge = state.entity_vectors, state.has_knowledge
        if self.retrieval is not None:
            context = node_context(hidden_states, state.token_node_index, vectors.shape[0]).to(vectors.dtype)
            vectors, has_knowledge = self.retrieval(
                vectors, context, state.edge_index, relation_embeddings, state.edge_relation_ids, has_knowledge
            )
        state.last_vectors, state.last_has_knowledge = vectors, has_knowledge
        rows, _ = state.read_rows()
        if rows is not None:
            vectors, has_knowledge = vectors.index_select(0, rows), has_knowledge.index_select(0, rows)
        return self.modulation(vectors, has_knowledge)


class KalaPreTrainedModel(KeplmPreTrainedModel):
    config_class = KalaConfig
    base_model_prefix = "kala"
    #: every parameter takes part in every step: the entity memory, relational retrieval and KFM stay in the
    #: autograd graph even for a batch without any entity (they contribute ``0 * sum``), so DDP does not need
    #: the extra graph traversal that ``find_unused_parameters=True`` costs
    ddp_find_unused_parameters = False

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, **kwargs):
        """The stock activation (gradient) checkpointing, which defaults to ``use_reentrant=False``; the reentrant
        variant is refused: KFM reads knowledge vectors computed before the checkpointed layers, which a reentrant
        recomputation would backpropagate through twice."""
        if self.config.uses_knowledge and (activation_checkpointing_kwargs or {}).get("use_reentrant"):
            raise ValueError(
                f"{type(self).__name__} cannot use gradient checkpointing with use_reentrant=True: its KFM layers read "
                "knowledge vectors computed outside the checkpointed layers, which reentrant recomputation would "
                "backpropagate through twice; use use_reentrant=False (the default; --gradient_checkpointing_kwargs "
                "'{\"use_reentrant\": false}')"
            )
        super().activation_checkpointing_enable(activation_checkpointing_kwargs, **kwargs)

    @classmethod
    def config_kwargs_from_assets(cls, assets: KnowledgeAssets | None) -> dict:
        if assets is None:
            return {}
        return {"entity_vocab_size": assets.num_entities, "num_relations": assets.num_relations}

    def check_knowledge_assets(self, assets: KnowledgeAssets) -> None:
        if not self.config.uses_knowledge:
            return
        if assets.num_entities != self.config.entity_vocab_size:
            raise ValueError(
                f"entity vocabulary has {assets.num_entities} entries but the entity memory has "
                f"{self.config.entity_vocab_size} rows"
            )
        if assets.num_relations != self.config.num_relations:
            raise ValueError(
                f"relation vocabulary has {assets.num_relations} entries but the model has {self.config.num_relations}"
            )

    #: module names of KALA's knowledge part (section 3): entity memory, relation embeddings, KFM + retrieval
    knowledge_module_names = ("entity_memory", "relation_embeddings", "knowledge_layers")

    def is_knowledge_parameter(self, name: str) -> bool:
        """Whether parameter ``name`` (as in ``named_parameters()``) belongs to the knowledge modules."""
        return any(part in self.knowledge_module_names for part in name.split(".")[:2])

    def parameter_groups(
        self,
        learning_rate: float,
        knowledge_learning_rate: float | None = None,
        entity_memory_optimizer: str = "adam",
        entity_memory_learning_rate: float | None = None,
        knowledge_warmup_steps: float | None = None,
        knowledge_optimizer: str | None = None,
        knowledge_weight_decay: float = 0.01,
    ) -> list[ParameterGroup]:
        """KALA's training options: ``knowledge_learning_rate`` for the knowledge modules (entity memory, KFM,
        relational retrieval; the paper gives its knowledge module an optimizer of its own for T5) and
        ``knowledge_warmup_steps``, their own warm-up (>= 1: steps, < 1: a share of the training steps); and the
        entity memory's optimizer: ``"adam"`` (the Trainer's; SparseAdam for a ``sparse_entity_memory``) or
        ``"rowwise_adagrad"``, at ``entity_memory_learning_rate`` (default: the knowledge learning rate).
        ``knowledge_optimizer="adamw"``: the knowledge modules train with an AdamW of their own at
        ``knowledge_weight_decay`` (the paper's T5 setup, with ``optim="adafactor"`` for the rest), instead of in the
        Trainer's optimizer."""
        if entity_memory_optimizer not in ENTITY_MEMORY_OPTIMIZERS:
            raise ValueError(
                f"unknown entity_memory_optimizer {entity_memory_optimizer!r}; choose from {ENTITY_MEMORY_OPTIMIZERS}"
            )
        if knowledge_optimizer not in KNOWLEDGE_OPTIMIZERS:
            raise ValueError(f"unknown knowledge_optimizer {knowledge_optimizer!r}; choose from {KNOWLEDGE_OPTIMIZERS}")
        if knowledge_warmup_steps is not None and knowledge_warmup_steps < 0:
            raise ValueError(f"knowledge_warmup_steps must be >= 0, got {knowledge_warmup_steps}")
        if not self.config.uses_knowledge:
            if (
                knowledge_learning_rate is not None
                or knowledge_warmup_steps is not None
                or (entity_memory_optimizer != "adam")
                or knowledge_optimizer is not None
            ):
                logger.warning(
                    "retrieval_mode='none': the model has no knowledge modules, so the knowledge "
                    "learning rate and warm-up and the entity-memory optimizer do not apply"
                )
            return []
        groups = []
        memory = self.base_model.entity_memory  # an EntityMemory, or this process's rows of a ShardedEntityMemory
        table = memory.table
        own_optimizer = (
            "rowwise_adagrad"
            if entity_memory_optimizer == "rowwise_adagrad"
            else ("sparse_adam" if memory.sparse else None)
        )
        if own_optimizer is not None and table.requires_grad:
            memory_lr = next(
                lr for lr in (entity_memory_learning_rate, knowledge_learning_rate, learning_rate) if lr is not None
            )
            groups.append(ParameterGroup("entity_memory", [table], memory_lr, own_optimizer, knowledge_warmup_steps))
        if knowledge_learning_rate is not None or knowledge_warmup_steps is not None or knowledge_optimizer:
            grouped = {id(p) for group in groups for p in group.parameters}
            parameters = [
                p
                for name, p in self.named_parameters()
                if self.is_knowledge_parameter(name) and p.requires_grad and id(p) not in grouped
            ]
            groups.append(
                ParameterGroup(
                    "knowledge",
                    parameters,
                    knowledge_learning_rate,
                    knowledge_optimizer,
                    knowledge_warmup_steps,
                    knowledge_weight_decay if knowledge_optimizer else None,
                )
            )
        return groups

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        std = initializer_range(self.config.encoder_config)
        # transformers.initialization's functions leave a weight loaded from a checkpoint as it is
        if isinstance(module, KnowledgeFeatureModulation):
            init.normal_(module.fc2_weight, mean=0.0, std=std)
            init.zeros_(module.fc2_bias)
        elif isinstance(module, RelationalAttentionConv):
            init.normal_(module.att, mean=0.0, std=std)
        elif isinstance(module, EntityEmbedding) and not getattr(module.weight, "_is_hf_initialized", False):
            # rows of unit expected norm (std 1/√d), not the encoder's 0.02: at 0.02 the rows are too small beside
            # the learned relation terms of composed messages for their differences to be learned (measured in
            # docs/knowledge_checks.md); the null row stays zero
            weight = module.weight
            weight.normal_(mean=0.0, std=weight.shape[1] ** -0.5)
            weight[NULL_ENTITY_INDEX].zero_()


class KalaModel(KalaPreTrainedModel):
    """A stock HF encoder whose chosen layers get KALA's knowledge-conditioned feature modulation.

    The encoder is not copied: forward hooks modulate the outputs of the two LayerNorms of each KFM layer
    (eq. 1) and a pre-hook computes that layer's γ/β from its input states (eq. 2-3). Attention backends
    (SDPA, flash), gradient checkpointing and any post-LN BERT-like encoder keep working. Pre-LN blocks (ModernBERT,
    XLM-R XL, Megatron-BERT) get KFM on the outputs of their pre-norms, the normalised inputs of attention and MLP
    (``keplm.modeling.families``).

    Shared blocks (ALBERT runs one block ``num_hidden_layers`` times): KFM layer i is the i-th *pass* through the
    shared block, not the block itself. Its hooks count the passes of each forward and modulate only on the passes
    whose index is a KFM layer; each chosen pass has its own knowledge layer (γ/β MLPs, retrieval), while the
    block's weights stay shared.

    Encoder-decoder models (T5, BART; ``keplm.modeling.modeling_kala_generation``): ``encoder`` holds the whole stock
    model (built by ``encoder_auto_class``, e.g. ``AutoModelForSeq2SeqLM``), KFM hooks sit in its encoder stack, and
    ``forward`` runs that encoder stack only: its output is what the stock decoder reads.
    """

    def __init__(self, config: KalaConfig, encoder_auto_class=AutoModel):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder_config, encoder_auto_class)
        blocks = encoder_blocks(self.encoder, config.encoder_config.num_hidden_layers)
        self.entity_memory = (
            EntityMemory(config.entity_vocab_size, config.entity_dim, sparse=config.sparse_entity_memory)
            if config.uses_knowledge
            else None
        )
        self.relation_embeddings = (
            nn.Embedding(config.relation_embedding_size, config.relation_dim)
            if config.retrieval_mode == "relational"
            else None
        )
        self.knowledge_layers = nn.ModuleDict({str(i): KalaKnowledgeLayer(config) for i in config.kfm_layer_indices})
        self.extra_layers = ExtraLayers(self.encoder, config.num_extra_layers)
        self._state: _KnowledgeState | None = None
        chosen = set(config.kfm_layer_indices)
        for block in dict.fromkeys(blocks):  # each distinct block once; a shared one runs several layers
            passes = tuple(i for i, other in enumerate(blocks) if other is block)  # the layer of each of its passes
            if not chosen.intersection(passes):
                continue
            norms = layer_norms(block)
            block.register_forward_pre_hook(partial(self._compute_modulation, passes), with_kwargs=True)
            for slot, norm in enumerate(norms):
                norm.register_forward_hook(partial(self._apply_modulation, passes, slot, block))
        self.post_init()

    # ------------------------------------------------------------------ hooks
    @staticmethod
    def _running_layer(state: _KnowledgeState, passes: tuple[int, ...], start: bool = False) -> int:
        """The encoder layer a block is running: its only one, or for a shared block the layer of its current pass
        (``start``: a new pass begins)."""
        if len(passes) == 1:
            return passes[0]
        if start:
            count = state.passes.get(passes, 0)
            if count >= len(passes):
                raise ValueError(f"a shared encoder block ran more than its {len(passes)} passes in one forward")
            state.passes[passes] = count + 1
            state.current[passes] = passes[count]
        return state.current[passes]

    def _compute_modulation(self, passes, module, args, kwargs):
        state = self._state
        if state is None:
            return None
        layer_index = self._running_layer(state, passes, start=True)
        if str(layer_index) not in self.knowledge_layers:
            return None
        hidden_states = args[0] if args else kwargs["hidden_states"]
        table = self.knowledge_layers[str(layer_index)](hidden_states, state, self.relation_embeddings)
        dtype = torch.promote_types(table.dtype, hidden_states.dtype)  # fp32 stream under bf16 autocast
        state.tables[layer_index] = gather_modulation(table, state.read_rows()[1], dtype)
        return None

    def _apply_modulation(self, passes, slot, layer, module, args, output):
        state = self._state
        if state is None:
            return output
        layer_index = self._running_layer(state, passes)
        if str(layer_index) not in self.knowledge_layers:
            return output
        # the token rows are freed after the layer's second LayerNorm, unless gradient checkpointing may run the
        # layer's forward again without its pre-hook (recent transformers checkpoint forward, not __call__)
        keep = slot == 0 or (layer.training and getattr(layer, "gradient_checkpointing", False))
        rows = state.tables[layer_index] if keep else state.tables.pop(layer_index)
        return apply_modulation(output, state.in_mention, rows[2 * slot], rows[2 * slot + 1])

    # ------------------------------------------------------------------ forward
    def _knowledge_state(self, input_shape, device, entity_token_map, node_entity_ids, edge_index, edge_relation_ids):
        if not self.config.uses_knowledge:
            return None
        if entity_token_map is None or node_entity_ids is None:
            raise ValueError(
                f"KALA (retrieval_mode={self.config.retrieval_mode!r}) needs entity_token_map and node_entity_ids; "
                f"build inputs with KalaProcessor and KeplmDataCollator, or {RAW_TEXT_HINT}"
            )
        if tuple(entity_token_map.shape) != tuple(input_shape):
            raise ValueError(
                f"entity_token_map has shape {tuple(entity_token_map.shape)}, the input {tuple(input_shape)}"
            )
        num_nodes = node_entity_ids.shape[0]
        if edge_index is None:
            edge_index = torch.zeros(2, 0, dtype=torch.long, device=device)
            edge_relation_ids = torch.zeros(0, dtype=torch.long, device=device)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}")
        if edge_relation_ids is None or edge_relation_ids.shape[0] != edge_index.shape[1]:
            raise ValueError("edge_relation_ids must give one relation id per edge of edge_index")
        check_index_range(
            entity_token_map, -1, num_nodes, "entity_token_map points outside the {high} graph nodes of the batch"
        )
        check_index_range(edge_index, 0, num_nodes, "edge_index points outside the {high} graph nodes of the batch")
        check_index_range(
            edge_relation_ids, 0, self.config.relation_embedding_size, "edge_relation_ids must lie in [0, {high})"
        )
        has_knowledge = node_entity_ids != 0
        if self.training and self.config.entity_dropout > 0:
            node_entity_ids, has_knowledge = entity_dropout(
                node_entity_ids, entity_token_map, self.config.entity_dropout
            )
        vectors = self.entity_memory(node_entity_ids)
        return _KnowledgeState(entity_token_map, vectors, has_knowledge, edge_index, edge_relation_ids)

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
        edge_relation_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> KalaModelOutput:
        r"""
        entity_token_map (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            Graph node (index into `node_entity_ids`) of the entity mention each token belongs to, -1 elsewhere.
        node_entity_ids (`torch.LongTensor` of shape `(num_nodes,)`):
            Entity-memory row of every node of the batched context graphs (0 = null/unseen entity).
        edge_index (`torch.LongTensor` of shape `(2, num_edges)`): source/target nodes of each KG fact edge.
        edge_relation_ids (`torch.LongTensor` of shape `(num_edges,)`): relation id of each edge.
        """
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        check_input_ids(input_ids, self.config)
        state = self._knowledge_state(
            ref.shape, ref.device, entity_token_map, node_entity_ids, edge_index, edge_relation_ids
        )
        if state is not None and _skippable(state, ref.device):
            state = None  # no token reads knowledge: eq. (1) leaves every state as it is, so skip retrieval and MLPs
        self._state = state  # kept after forward so gradient-checkpointing recomputation sees the same knowledge
        # optional inputs only when given: an encoder-decoder's encoder stack takes neither positions nor token types
        encoder_kwargs = {
            name: value
            for name, value in (("token_type_ids", token_type_ids), ("position_ids", position_ids))
            if value is not None
        }
        output_attentions, output_hidden_states = output_flags(self.config, output_attentions, output_hidden_states)
        outputs = text_encoder(self.encoder)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **encoder_kwargs,
        )
        hidden = outputs.last_hidden_state
        if len(self.extra_layers):
            hidden = self.extra_layers(hidden, attention_mask)
        return KalaModelOutput(
            last_hidden_state=hidden,
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
            entity_representations=state.last_vectors if state is not None else None,
            entity_has_knowledge=state.last_has_knowledge if state is not None else None,
        )


def entity_dropout(node_entity_ids: torch.Tensor, entity_token_map: torch.Tensor, p: float):
    """Training only (beyond the paper): each mentioned node reads the null row with probability ``p``, as an entity
    unseen in training does, so the model also learns to represent a mention from its KG neighbours and relations
    instead of only memorising its own row. Nodes that are only neighbours keep their rows."""
    num_nodes = node_entity_ids.shape[0]
    # a scatter into an extra slot for tokens outside mentions: no data-dependent shape (torch.compile)
    slots = torch.where(entity_token_map >= 0, entity_token_map, num_nodes).reshape(-1)
    mentioned = torch.zeros(num_nodes + 1, dtype=torch.bool, device=node_entity_ids.device).index_fill(0, slots, True)[
        :num_nodes
    ]
    dropped = mentioned & (torch.rand(node_entity_ids.shape, device=node_entity_ids.device) < p)
    node_entity_ids = node_entity_ids.masked_fill(dropped, 0)
    return node_entity_ids, node_entity_ids != 0


def _skippable(state: _KnowledgeState, device: torch.device) -> bool:
    """Whether an inference forward may skip the knowledge layers: no gradient is taken (training keeps the KFM
    parameters in every step's graph, for DDP) and no token is in a mention; checked on the CPU only, where
    reading the mask costs no device-to-host synchronisation. Never while compiling or exporting: a traced graph takes
    the knowledge path (the identity off mentions) instead of a branch on the data."""
    return (
        device.type == "cpu"
        and not torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and not bool(state.in_mention.any())
    )


__all__ = [
    "ENTITY_MEMORY_OPTIMIZERS",
    "KNOWLEDGE_OPTIMIZERS",
    "KalaModel",
    "KalaModelOutput",
    "KalaPreTrainedModel",
    "entity_dropout",
    "node_context",
]
