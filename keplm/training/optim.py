"""Optimizer for models whose entity memory has sparse (row-wise) gradients.

A 62.8k-row entity memory with a dense gradient costs a full-table zero-fill, scatter and AdamW update on
every step although a batch touches a few hundred rows (``benchmarks/results``). With
``KalaConfig(sparse_entity_memory=True)`` the memory emits sparse gradients; this optimizer updates those
tables with ``torch.optim.SparseAdam`` (lazy Adam: only the rows in the batch move, no weight decay) and
everything else with the Trainer's usual optimizer.
"""

from __future__ import annotations

import torch
from torch import nn


def sparse_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Weights of ``nn.Embedding(sparse=True)`` tables that are trained."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]


class SparseDenseOptimizer(torch.optim.Optimizer):
    """Steps a dense optimizer and a ``SparseAdam`` together; ``param_groups`` holds both optimizers' groups
    (the same dicts), so LR schedulers and the Trainer see one optimizer."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.Optimizer):  # noqa: D107
        self.dense, self.sparse = dense, sparse
        self.defaults = dense.defaults
        self.state = dense.state  # the Trainer only inspects it for logging; both states are in state_dict()
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self):
        return self.dense.param_groups + self.sparse.param_groups

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.dense.step(closure)
        self.sparse.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        self.sparse.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.dense.load_state_dict(state_dict["dense"])
        self.sparse.load_state_dict(state_dict["sparse"])

    def __repr__(self) -> str:
        return f"SparseDenseOptimizer(dense={self.dense!r}, sparse={self.sparse!r})"


def split_sparse_parameters(optimizer: torch.optim.Optimizer, model: nn.Module, lr: float, betas, eps: float):
    """Move the sparse tables out of ``optimizer`` into a ``SparseAdam``; return the combined optimizer (or the
    optimizer unchanged when the model has none)."""
    sparse = sparse_parameters(model)
    if not sparse:
        return optimizer
    ids = {id(p) for p in sparse}
    for group in optimizer.param_groups:
        group["params"] = [p for p in group["params"] if id(p) not in ids]
    return SparseDenseOptimizer(optimizer, torch.optim.SparseAdam(sparse, lr=lr, betas=betas, eps=eps))
