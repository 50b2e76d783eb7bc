"""Relational retrieval over each context's knowledge graph (KALA, section 3.3, eq. 3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax

from keplm.configuration.configuration_kala import RELATION_MESSAGES


class RelationalAttentionConv(MessagePassing):
    """KALA eq. (3): v_i = Σ_j α_ij m_ij with α_ij = softmax_j(aᵀ σ(W [e_i ‖ r_ij ‖ e_j ‖ h_{e_i}])).

    The message m_ij is the paper's e_j, or with ``relation_message="composition"`` the relation-aware
    φ(e_j, r_ij) = e_j + W_m r_ij (:func:`compose_message`), whose W_m r_ij block arrives precomputed per edge.

    W is split by blocks: the e_i and e_j blocks run as one product per node, the r_ij and h_{e_i} blocks
    arrive precomputed (``relation_term``, ``context_term``, see :class:`RelationalRetrieval`), and only
    their sum runs per edge. Edges whose source is an entity without knowledge (the null entity) are
    masked out of the softmax (appendix B.1), so a node only attends to informative neighbours.
    """

    def __init__(self, entity_dim: int, negative_slope: float = 0.2):
        super().__init__(aggr="add", node_dim=0)
        self.entity_dim = entity_dim
        self.lin_nodes = nn.Linear(entity_dim, 2 * entity_dim, bias=False)  # [W_{e_i}; W_{e_j}]
        # zeros until the model's _init_weights draws it: uninitialised memory made a standalone layer's attention
        # scores arbitrary (even -inf, which silenced every neighbour); no random draw here shifts the seeded
        # initialisation of the rest of the model
        self.att = nn.Parameter(torch.zeros(entity_dim))
        self.negative_slope = negative_slope

    def forward(self, x, context_term, relation_term, edge_index, has_knowledge, message_term=None):
        """Return (v ``[N, d]``, has-knowledge ``[N]``): a node is informative once any node it attends to is.
        ``message_term`` ``[E, d]``: W_m r_ij per edge for the composed message, None for eq. 3's e_j."""
        target, source = self.lin_nodes(x).chunk(2, dim=-1)
        # one gather per edge source serves the key, the entity vector and the informative flag
        source = torch.cat([source, x, has_knowledge.unsqueeze(-1)], dim=-1)
        out = self.propagate(
            edge_index,
            query=target + context_term,
            source=source,
            relation=relation_term,
            message_term=message_term,
            size=(x.shape[0], x.shape[0]),
        )
        return out[:, :-1], out[:, -1] > 0

    def message(self, query_i, source_j, relation, message_term, index, ptr, size_i):
        key_j, x_j, valid_j = source_j.split([self.entity_dim, self.entity_dim, 1], dim=-1)
        score = (F.leaky_relu(query_i + key_j + relation, self.negative_slope) * self.att).sum(-1)
        score = score.masked_fill(valid_j.squeeze(-1) == 0, torch.finfo(score.dtype).min)
        alpha = (softmax(score, index, ptr, size_i) * valid_j.squeeze(-1)).unsqueeze(-1)
        # last column: how many informative neighbours each target node has (summed by the aggregation)
        return torch.cat([alpha * compose_message(x_j, message_term), valid_j], dim=-1)


def compose_message(entity_vectors: torch.Tensor, message_term: torch.Tensor | None) -> torch.Tensor:
    """The value a neighbour sends: e_j (KALA eq. 3) or, beyond the paper, φ(e_j, r_ij) = e_j + W_m r_ij, the
    translational composition of CompGCN (Vashishth et al., 2020) with a learned W_m, so that two facts that reach
    the same neighbour through different relations send different values."""
    return entity_vectors if message_term is None else entity_vectors + message_term


class RelationalRetrieval(nn.Module):
    """KALA section 3.3: stacked relational attention layers (paper: 2, ReLU, dropout 0.1) over the context KG.

    Every node gets a self loop (relation id 0) so a seen entity keeps its own embedding in the weighted
    average; an unseen (null) entity is represented only by its informative neighbours. The relation and
    context blocks of every layer's W see the same inputs in all layers, so each is one product for all
    layers (``lin_relation``, ``lin_context``), sliced per layer.
    """

    def __init__(
        self,
        entity_dim: int,
        relation_dim: int,
        context_dim: int,
        num_layers: int,
        dropout: float,
        relation_message: str = "entity",
    ):
        super().__init__()
        if relation_message not in RELATION_MESSAGES:
            raise ValueError(f"relation_message must be one of {RELATION_MESSAGES}, got {relation_message!r}")
        self.relation_message = relation_message
        self.layers = nn.ModuleList(RelationalAttentionConv(entity_dim) for _ in range(num_layers))
        self.lin_relation = nn.Linear(relation_dim, num_layers * entity_dim, bias=False)  # W_r of every layer
        # W_m of every layer (composed messages only)
        self.lin_message = (
            nn.Linear(relation_dim, num_layers * entity_dim, bias=False) if relation_message == "composition" else None
        )
        self.lin_context = nn.Linear(context_dim, num_layers * entity_dim)  # W_h (+ bias) of every layer
        self.dropout = nn.Dropout(dropout)

    def forward(self, entity_vectors, context, edge_index, relation_embeddings, edge_relation_ids, has_knowledge):
        """Return (node vectors ``[N, d]``, node has-knowledge mask ``[N]``) after all layers."""
        num_nodes = entity_vectors.shape[0]
        loops = torch.arange(num_nodes, device=edge_index.device)
        full_edges = torch.cat([edge_index, loops.unsqueeze(0).expand(2, -1)], dim=1)
        relation_ids = F.pad(edge_relation_ids, (0, num_nodes))  # relation id 0 on the self loops
        relations = relation_embeddings(relation_ids)
        relation_terms = self.lin_relation(relations).chunk(len(self.layers), dim=-1)
        message_terms = (
            [None] * len(self.layers)
            if self.lin_message is None
            else self.lin_message(relations).chunk(len(self.layers), dim=-1)
        )
        context_terms = self.lin_context(context).chunk(len(self.layers), dim=-1)
        x, knowledge = entity_vectors, has_knowledge.to(entity_vectors.dtype)
        for depth, layer in enumerate(self.layers):
            x, has_knowledge = layer(
                x, context_terms[depth], relation_terms[depth], full_edges, knowledge, message_terms[depth]
            )
            if depth < len(self.layers) - 1:
                x = self.dropout(torch.relu(x))
                knowledge = has_knowledge.to(x.dtype)
        return x, has_knowledge
