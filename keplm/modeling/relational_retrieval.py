"""Relational retrieval over each context's knowledge graph (KALA, section 3.3, eq. 3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import scatter, softmax


class RelationalAttentionConv(MessagePassing):
    """KALA eq. (3): v_i = Σ_j α_ij e_j with α_ij = softmax_j(aᵀ σ(W [e_i ‖ r_ij ‖ e_j ‖ h_{e_i}])).

    W is split by blocks so the e_i, e_j and h_{e_i} projections run once per node and only their sum
    runs per edge. Edges whose source is an entity without knowledge (the null entity) are masked out of
    the softmax (appendix B.1), so a node only attends to informative neighbours.
    """

    def __init__(self, entity_dim: int, relation_dim: int, context_dim: int, negative_slope: float = 0.2):
        super().__init__(aggr="add", node_dim=0)
        self.lin_target = nn.Linear(entity_dim, entity_dim, bias=False)
        self.lin_source = nn.Linear(entity_dim, entity_dim, bias=False)
        self.lin_relation = nn.Linear(relation_dim, entity_dim, bias=False)
        self.lin_context = nn.Linear(context_dim, entity_dim, bias=True)
        self.att = nn.Parameter(torch.empty(entity_dim))
        self.negative_slope = negative_slope

    def forward(self, x, context, edge_index, relation_features, has_knowledge):
        query = self.lin_target(x) + self.lin_context(context)
        key = self.lin_source(x)
        return self.propagate(
            edge_index,
            query=query,
            key=key,
            x=x,
            relation=self.lin_relation(relation_features),
            valid=has_knowledge.to(x.dtype).unsqueeze(-1),
            size=(x.shape[0], x.shape[0]),
        )

    def message(self, query_i, key_j, relation, x_j, valid_j, index, ptr, size_i):
        score = (F.leaky_relu(query_i + key_j + relation, self.negative_slope) * self.att).sum(-1, keepdim=True)
        score = score.masked_fill(valid_j == 0, torch.finfo(score.dtype).min)
        alpha = softmax(score, index, ptr, size_i) * valid_j
        return alpha * x_j


class RelationalRetrieval(nn.Module):
    """KALA section 3.3: stacked relational attention layers (paper: 2, ReLU, dropout 0.1) over the context KG.

    Every node gets a self loop (relation id 0) so a seen entity keeps its own embedding in the weighted
    average; an unseen (null) entity is represented only by its informative neighbours.
    """

    def __init__(self, entity_dim: int, relation_dim: int, context_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.layers = nn.ModuleList(
            RelationalAttentionConv(entity_dim, relation_dim, context_dim) for _ in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, entity_vectors, context, edge_index, relation_embeddings, edge_relation_ids, has_knowledge):
        """Return (node vectors ``[N, d]``, node has-knowledge mask ``[N]``) after all layers."""
        num_nodes = entity_vectors.shape[0]
        loops = torch.arange(num_nodes, device=edge_index.device)
        full_edges = torch.cat([edge_index, loops.unsqueeze(0).expand(2, -1)], dim=1)
        relation_ids = torch.cat([edge_relation_ids, torch.zeros_like(loops)])
        relation_features = relation_embeddings(relation_ids)
        x = entity_vectors
        for depth, layer in enumerate(self.layers):
            x = layer(x, context, full_edges, relation_features, has_knowledge)
            # a node is informative once any node it attends to is (null nodes stay exactly zero otherwise)
            has_knowledge = scatter(
                has_knowledge[full_edges[0]].to(x.dtype), full_edges[1], 0, dim_size=num_nodes, reduce="max"
            ) > 0
            if depth < len(self.layers) - 1:
                x = self.dropout(torch.relu(x))
        return x, has_knowledge
