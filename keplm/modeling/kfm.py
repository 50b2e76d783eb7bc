"""Knowledge-conditioned Feature Modulation (KALA, section 3.2, eq. 1-2)."""

from __future__ import annotations

import torch
from torch import nn


class KnowledgeFeatureModulation(nn.Module):
    """KALA eq. (1)-(2): γ = 1 + h1(v), β = h2(v) after LN1; γ' = 1 + h3(v), β' = h4(v) after LN2.

    h1..h4 are four independent 2-layer ReLU MLPs, stored as one [d, 4k] first layer and one [4, k, H]
    block-diagonal second layer (mathematically four separate MLPs). They run on graph nodes (one row per
    entity of the context), not on tokens; tokens then gather their entity's row.
    """

    def __init__(self, entity_dim: int, hidden_size: int, mlp_hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp_hidden_size = mlp_hidden_size
        self.fc1 = nn.Linear(entity_dim, 4 * mlp_hidden_size)
        # zeros until the model's _init_weights draws them (a module built alone holds no uninitialised memory, and
        # no random draw here shifts the seeded initialisation of the rest of the model)
        self.fc2_weight = nn.Parameter(torch.zeros(4, mlp_hidden_size, hidden_size))
        self.fc2_bias = nn.Parameter(torch.zeros(4, hidden_size))

    def forward(self, entity_vectors: torch.Tensor, has_knowledge: torch.Tensor) -> torch.Tensor:
        """Return the node-level table ``[num_nodes, 4, H]`` of h1..h4(v) = (γ1 − 1, β1, γ2 − 1, β2) per node.

        The table holds γ − 1, not γ: in bf16, 1 + h(v) would round h(v) to steps of 2⁻⁷ near 1; the 1 is added
        in the residual stream's dtype (:func:`apply_modulation`). Nodes without knowledge (the null entity with no
        informative neighbour) get exactly zero rows (γ = 1, β = 0), i.e. "h returns the zero vector for the null
        entity".
        """
        num_nodes = entity_vectors.shape[0]
        hidden = torch.relu(self.fc1(entity_vectors)).view(num_nodes, 4, self.mlp_hidden_size)
        deltas = torch.einsum("nfk,fkh->nfh", hidden, self.fc2_weight) + self.fc2_bias
        return deltas * has_knowledge.view(num_nodes, 1, 1)  # bool mask: promoted inside the kernel, no cast


def gather_modulation(table: torch.Tensor, token_node_index: torch.Tensor, dtype: torch.dtype | None = None):
    """Token rows of the node table as four ``[B, L, H]`` tensors (γ1 − 1, β1, γ2 − 1, β2).

    One gather per layer serves both LayerNorms, and one ``unbind`` (backward: one ``stack``) splits it. ``dtype``
    (the residual stream's, fp32 under bf16 autocast) is applied to the small node table, before the gather.
    Tokens outside mentions (index -1) read row 0; :func:`apply_modulation` ignores them.
    """
    if dtype is not None:
        table = table.to(dtype)
    if table.shape[0] == 0:  # a batch without any entity: zero rows, still tied to the KFM parameters (DDP)
        rows = (0.0 * table.sum()).expand(*token_node_index.shape, 4, table.shape[-1])
    else:
        index = token_node_index.clamp(min=0).reshape(-1)
        rows = table.index_select(0, index).view(*token_node_index.shape, *table.shape[1:])
    return rows.unbind(-2)


def apply_modulation(hidden_states: torch.Tensor, in_mention: torch.Tensor, delta: torch.Tensor, beta: torch.Tensor):
    """γ ⊙ x + β with γ = 1 + ``delta`` on mention tokens; ``torch.where`` keeps every other token bit-identical to
    the unmodulated encoder."""
    modulated = hidden_states * (delta + 1) + beta
    if modulated.dtype != hidden_states.dtype:  # e.g. fp16 states with an fp32 table: keep the stream's dtype
        modulated = modulated.to(hidden_states.dtype)
    return torch.where(in_mention.unsqueeze(-1), modulated, hidden_states)


def modulate(
    hidden_states: torch.Tensor, token_node_index: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """γ ⊙ x + β for node-level ``gamma``/``beta`` ``[N, H]`` on tokens with ``token_node_index >= 0``."""
    delta, beta, _, _ = gather_modulation(torch.stack([gamma - 1, beta, gamma - 1, beta], dim=1), token_node_index)
    return apply_modulation(hidden_states, token_node_index >= 0, delta, beta)
