"""Optimizers for the entity-memory tables.

A 62.8k-row entity memory with a dense gradient costs a full-table zero-fill, scatter and AdamW update on
every step although a batch touches a few hundred rows, and AdamW's two states per weight cost more memory
than the issue's budget allows (``benchmarks/results``). :func:`split_memory_tables` takes the tables out of
the Trainer's optimizer and gives them their own: ``torch.optim.SparseAdam`` for sparse gradients
(``KalaConfig(sparse_entity_memory=True)``; lazy Adam: only the rows in the batch move, no weight decay) or
:class:`RowwiseAdagrad` (one accumulator per row instead of Adam's two values per weight), for sparse or dense
gradients (dense: the model stays compilable with ``torch.compile``).
"""

from __future__ import annotations

import torch
from torch import nn

from keplm.modeling.entity_memory import EntityMemory


def sparse_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Weights of ``nn.Embedding(sparse=True)`` tables that are trained."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]


def memory_tables(model: nn.Module, memory_optimizer: str) -> list[nn.Parameter]:
    """The tables :func:`split_memory_tables` moves: every sparse table, and for ``"rowwise_adagrad"`` also the
    trained entity-memory tables with dense gradients."""
    tables = sparse_parameters(model)
    if memory_optimizer == "rowwise_adagrad":
        known = {id(p) for p in tables}
        tables += [m.embeddings.weight for m in model.modules() if isinstance(m, EntityMemory)
                   and m.embeddings.weight.requires_grad and id(m.embeddings.weight) not in known]
    return tables


class RowwiseAdagrad(torch.optim.Optimizer):
    """Row-wise AdaGrad for embedding tables (the optimizer of large recommender embeddings, e.g. FBGEMM's
    exact row-wise AdaGrad): per row i, ``G_i += mean(g_i²)`` and ``w_i -= lr · g_i / (√G_i + eps)``.

    Its state is one fp32 value per row, where Adam keeps two per weight: for a 62.8k × 768 memory 0.25 MB
    instead of 368 MiB. Takes sparse (``nn.Embedding(sparse=True)``) or dense gradients; rows without gradient
    do not move. No weight decay, as ``SparseAdam``.
    """

    def __init__(self, params, lr: float = 1e-2, eps: float = 1e-8):  # noqa: D107
        if lr <= 0 or eps <= 0:
            raise ValueError(f"RowwiseAdagrad needs lr > 0 and eps > 0, got lr={lr}, eps={eps}")
        super().__init__(params, {"lr": lr, "eps": eps})
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"RowwiseAdagrad updates 2-d tables (rows x dim), got a {p.dim()}-d parameter")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["sum"] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
                grad = p.grad
                if grad.is_sparse:
                    grad = grad.coalesce()
                    rows, values = grad.indices()[0], grad.values()
                else:
                    rows, values = None, grad
                # mean of g² per row as a reduction: no table-sized temporary for the squares
                squares = torch.linalg.vector_norm(values, dim=1, dtype=torch.float32).square_().div_(values.shape[1])
                if rows is None:
                    state["sum"].add_(squares)
                    scale = state["sum"].sqrt().add_(group["eps"])
                    p.addcdiv_(values, scale.unsqueeze(1).to(p.dtype), value=-group["lr"])
                else:
                    state["sum"].index_add_(0, rows, squares)
                    scale = state["sum"][rows].sqrt().add_(group["eps"])
                    p.index_add_(0, rows, (values / scale.unsqueeze(1).to(values.dtype)) * -group["lr"])
        return loss


@torch.no_grad()
def clip_grad_norm_sparse_(parameters, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (L2) for parameters of which some have sparse gradients (a
    ``sparse_entity_memory`` table), which torch's version rejects. A sparse gradient is coalesced first (rows
    that occur twice add up), then counts with its stored values. Returns the total norm before clipping."""
    parameters = [p for p in parameters if p.grad is not None]
    if not parameters:
        return torch.tensor(0.0)
    for p in parameters:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
    dense = [p.grad for p in parameters if not p.grad.is_sparse]
    values = [p.grad._values() for p in parameters if p.grad.is_sparse]
    norms = [*(torch._foreach_norm(dense, 2.0) if dense else ()), *(v.norm(2.0) for v in values)]
    device = parameters[0].grad.device
    total = torch.stack([n.float().to(device) for n in norms]).norm(2.0)
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    if dense:
        torch._foreach_mul_(dense, scale.to(dense[0].dtype))
    for v in values:
        v.mul_(scale.to(v.dtype))
    return total


#: ``memory_optimizer`` choices of :func:`split_memory_tables`
MEMORY_OPTIMIZERS = ("adam", "rowwise_adagrad")


class MemoryTableOptimizer(torch.optim.Optimizer):
    """Steps the model's optimizer (``dense``) and the entity-memory tables' one (``tables``) together;
    ``param_groups`` holds both optimizers' groups (the same dicts), so LR schedulers and the Trainer see one
    optimizer."""

    def __init__(self, dense: torch.optim.Optimizer, tables: torch.optim.Optimizer):  # noqa: D107
        self.dense, self.tables = dense, tables
        self.defaults = dense.defaults
        self.state = dense.state  # the Trainer only inspects it for logging; both states are in state_dict()
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self):
        return self.dense.param_groups + self.tables.param_groups

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.dense.step(closure)
        self.tables.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        self.tables.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "tables": self.tables.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.dense.load_state_dict(state_dict["dense"])
        self.tables.load_state_dict(state_dict["tables"])

    def __repr__(self) -> str:
        return f"MemoryTableOptimizer(dense={self.dense!r}, tables={self.tables!r})"


def split_memory_tables(optimizer: torch.optim.Optimizer, model: nn.Module, lr: float, betas, eps: float,
                        memory_optimizer: str = "adam", memory_learning_rate: float | None = None):
    """Move the entity-memory tables (:func:`memory_tables`) out of ``optimizer`` into a ``SparseAdam``
    (``memory_optimizer="adam"``: the sparse tables only; dense ones stay with ``optimizer``) or a
    :class:`RowwiseAdagrad` (``"rowwise_adagrad"``: sparse and dense tables), at ``memory_learning_rate`` (default
    ``lr``); return the combined optimizer, or ``optimizer`` unchanged when no table moves."""
    if memory_optimizer not in MEMORY_OPTIMIZERS:
        raise ValueError(f"unknown memory_optimizer {memory_optimizer!r}; choose from {MEMORY_OPTIMIZERS}")
    tables = memory_tables(model, memory_optimizer)
    if not tables:  # e.g. the vanilla baseline of a comparison run: no memory at all
        return optimizer
    ids = {id(p) for p in tables}
    for group in optimizer.param_groups:
        group["params"] = [p for p in group["params"] if id(p) not in ids]
    memory_lr = lr if memory_learning_rate is None else memory_learning_rate
    if memory_optimizer == "rowwise_adagrad":
        return MemoryTableOptimizer(optimizer, RowwiseAdagrad(tables, lr=memory_lr, eps=eps))
    return MemoryTableOptimizer(optimizer, torch.optim.SparseAdam(tables, lr=memory_lr, betas=betas, eps=eps))
