"""Knowledge-conditioned Feature Modulation (KALA, section 3.2, eq. 1-2)."""

from __future__ import annotations

import torch
from torch import nn


class KnowledgeFeatureModulation(nn.Module):
    """KALA eq. (1)-(2): γ = 1 + h1(v), β = h2(v) after LN1; γ' = 1 + h3(v), β' = h4(v) after LN2.

    h1..h4 are four independent 2-layer ReLU MLPs. They are computed as one batched product per layer
    (a [d, 4k] projection and a [4, k, H] block-diagonal one), which is mathematically the same as four
    separate MLPs but costs two kernels instead of eight. They run on graph nodes (one row per entity
    of the context), not on tokens; tokens then gather their entity's row.
    """

    def __init__(self, entity_dim: int, hidden_size: int, mlp_hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp_hidden_size = mlp_hidden_size
        self.fc1 = nn.Linear(entity_dim, 4 * mlp_hidden_size)
        self.fc2_weight = nn.Parameter(torch.empty(4, mlp_hidden_size, hidden_size))
        self.fc2_bias = nn.Parameter(torch.zeros(4, hidden_size))

    def forward(self, entity_vectors: torch.Tensor, has_knowledge: torch.Tensor) -> torch.Tensor:
        """Return the node-level modulation table ``[4, num_nodes, H]``: (γ1, β1, γ2, β2).

        Nodes without knowledge (the null entity with no informative neighbour) get exactly (1, 0, 1, 0),
        i.e. "h returns the zero vector for the null entity".
        """
        num_nodes = entity_vectors.shape[0]
        hidden = torch.relu(self.fc1(entity_vectors)).view(num_nodes, 4, self.mlp_hidden_size)
        deltas = torch.einsum("nfk,fkh->fnh", hidden, self.fc2_weight) + self.fc2_bias.unsqueeze(1)
        deltas = deltas * has_knowledge.to(deltas.dtype).view(1, num_nodes, 1)
        ones = deltas.new_tensor([1.0, 0.0, 1.0, 0.0]).view(4, 1, 1)
        return deltas + ones


def modulate(
    hidden_states: torch.Tensor, token_node_index: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """Apply γ ⊙ x + β to tokens inside a mention (``token_node_index >= 0``); others are returned untouched.

    ``token_node_index`` is ``[B, L]`` with the graph node of each token's entity, or -1. ``torch.where``
    keeps non-entity tokens bit-identical to the unmodulated encoder.
    """
    in_mention = token_node_index >= 0
    index = token_node_index.clamp(min=0)
    if gamma.shape[0] == 0:  # a batch without any entity: identity, but keep the KFM in the autograd graph (DDP)
        return hidden_states + 0.0 * (gamma.sum() + beta.sum()).to(hidden_states.dtype)
    modulated = gamma[index].to(hidden_states.dtype) * hidden_states + beta[index].to(hidden_states.dtype)
    return torch.where(in_mention.unsqueeze(-1), modulated, hidden_states)
