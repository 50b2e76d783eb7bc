"""Optimizers for parameter groups that a model trains apart from the rest (``ParameterGroup.optimizer``).

``"sparse_adam"`` is ``torch.optim.SparseAdam`` (lazy Adam for tables with sparse gradients: only the rows of
the batch move, no weight decay); ``"rowwise_adagrad"`` is :class:`RowwiseAdagrad` (one accumulator per row
instead of Adam's two values per weight, for sparse or dense gradients); ``"adamw"`` is ``torch.optim.AdamW`` with
the group's weight decay on its matrices (not on biases and norm scales), e.g. KALA's knowledge modules beside an
Adafactor-trained T5 (KALA's fine-tuning setup). :class:`CombinedOptimizer` steps them
together with the Trainer's optimizer, so LR schedulers, checkpoints and the Trainer see one optimizer.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_scheduler


def sparse_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Weights of ``nn.Embedding(sparse=True)`` tables that are trained."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]


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
    for p in parameters:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
    dense = [p for p in parameters if not p.grad.is_sparse]
    values = [p.grad.values() for p in parameters if p.grad.is_sparse]
    grads = [*(p.grad for p in dense), *values]
    # every norm in float32: in float16 a norm past 65504 overflows to inf (which would scale every gradient to 0),
    # in bfloat16 it keeps 3 significant digits
    norms = [torch.linalg.vector_norm(g, 2.0, dtype=torch.float32) for g in grads]
    total = torch.nn.utils.get_total_norm(norms, 2.0)
    torch.nn.utils.clip_grads_with_norm_(dense, max_norm, total)  # torch's (foreach) scaling of the dense gradients
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)  # the same factor for the sparse ones' values
    for v in values:
        v.mul_(scale.to(v.dtype))
    return total


#: optimizers a parameter group can ask for by name
GROUP_OPTIMIZERS = ("sparse_adam", "rowwise_adagrad", "adamw")


def build_group_optimizer(
    name: str, parameters: list[nn.Parameter], lr: float, betas, eps: float, weight_decay: float = 0.0
):
    """The optimizer called ``name`` (:data:`GROUP_OPTIMIZERS`) over ``parameters`` (``weight_decay``: AdamW's, on
    parameters with two or more dimensions)."""
    if name == "rowwise_adagrad":
        return RowwiseAdagrad(parameters, lr=lr, eps=eps)
    if name == "sparse_adam":
        return torch.optim.SparseAdam(parameters, lr=lr, betas=betas, eps=eps)
    if name == "adamw":
        decayed = [p for p in parameters if p.dim() > 1]
        others = [p for p in parameters if p.dim() <= 1]
        groups = [
            {"params": params, "weight_decay": decay}
            for params, decay in ((decayed, weight_decay), (others, 0.0))
            if params
        ]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    raise ValueError(f"unknown parameter-group optimizer {name!r}; choose from {GROUP_OPTIMIZERS}")


#: key of an optimizer param group holding the group's own warm-up (``ParameterGroup.warmup_steps``)
WARMUP_KEY = "keplm_warmup_steps"


def _warmup_setting(warmup_steps: float | None) -> dict:
    return {} if warmup_steps is None else {WARMUP_KEY: warmup_steps}


def apply_parameter_groups(
    optimizer: torch.optim.Optimizer, groups, learning_rate: float, betas, eps: float, weight_decay: float = 0.0
):
    """Move the parameters of the model's :class:`~keplm.modeling.base.ParameterGroup` s out of ``optimizer``'s
    groups: into new groups of ``optimizer`` at the group's learning rate (each keeps the settings, e.g. weight
    decay, of the group it left), or into the group's own optimizer (at the group's weight decay, else
    ``weight_decay``, the Trainer's). Returns ``optimizer`` or a
    :class:`CombinedOptimizer` of it and the groups' own optimizers."""
    owner: dict[int, str] = {}
    for group in groups:
        for parameter in group.parameters:
            if id(parameter) in owner:
                raise ValueError(f"a parameter is in both parameter groups {owner[id(parameter)]!r} and {group.name!r}")
            owner[id(parameter)] = group.name
    others = []
    for group in groups:
        ids = {id(p) for p in group.parameters}
        lr = learning_rate if group.learning_rate is None else group.learning_rate
        for stock in list(optimizer.param_groups):
            moved = [p for p in stock["params"] if id(p) in ids]
            if not moved:
                continue
            stock["params"] = [p for p in stock["params"] if id(p) not in ids]
            if group.optimizer is None:
                optimizer.add_param_group(
                    {
                        **{k: v for k, v in stock.items() if k != "params"},
                        "params": moved,
                        "lr": lr,
                        **_warmup_setting(group.warmup_steps),
                    }
                )
        if group.optimizer is not None and group.parameters:
            decay = weight_decay if group.weight_decay is None else group.weight_decay
            others.append(build_group_optimizer(group.optimizer, group.parameters, lr, betas, eps, decay))
            for param_group in others[-1].param_groups:
                param_group.update(_warmup_setting(group.warmup_steps))
    return CombinedOptimizer(optimizer, others) if others else optimizer


def warmup_step_count(warmup_steps: float, num_training_steps: int) -> int:
    """``--warmup_steps`` semantics: >= 1 is a number of steps, < 1 a share of the training steps (rounded up)."""
    return int(warmup_steps) if warmup_steps >= 1 else math.ceil(num_training_steps * warmup_steps)


def _warmup_factor(name, warmup: int, num_training_steps: int, scheduler_kwargs: dict | None):
    """The factor function of transformers' ``get_scheduler(name)`` with ``warmup`` steps (built on a probe
    optimizer), or None when that schedule is not a ``LambdaLR`` that starts below its peak during a warm-up."""
    probe = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(
        name,
        probe,
        num_warmup_steps=warmup,
        num_training_steps=num_training_steps,
        scheduler_specific_kwargs=scheduler_kwargs or {},
    )
    if not isinstance(scheduler, LambdaLR) or (warmup > 0 and scheduler.lr_lambdas[0](0) >= 1.0):
        return None
    return scheduler.lr_lambdas[0]


def schedule_has_warmup(name, scheduler_kwargs: dict | None = None) -> bool:
    """Whether ``get_scheduler(name)`` has warm-ups (linear, cosine, polynomial, ...), so a parameter group can have
    a warm-up of its own; a schedule that cannot be built with these kwargs has none."""
    try:
        return _warmup_factor(name, 1, 2, scheduler_kwargs) is not None
    except (TypeError, ValueError):
        return False


def schedule_with_group_warmups(
    optimizer: torch.optim.Optimizer,
    name: str,
    num_training_steps: int,
    default_warmup_steps: int,
    scheduler_kwargs: dict | None = None,
) -> LambdaLR:
    """transformers' ``get_scheduler(name)`` for every param group, each with its own warm-up (``WARMUP_KEY``;
    ``default_warmup_steps`` where a group has none): one ``LambdaLR`` with one factor function per group. Raises
    ``ValueError`` for a schedule that is not a warm-up ``LambdaLR`` (``constant``, ``reduce_lr_on_plateau``, ...),
    where a group's warm-up would be ignored."""

    def factor(warmup: int):
        found = _warmup_factor(name, warmup, num_training_steps, scheduler_kwargs)
        if found is None:
            raise ValueError(
                f"--lr_scheduler_type {getattr(name, 'value', name)} has no warm-up, so a parameter "
                "group cannot have a warm-up of its own (e.g. --knowledge_warmup_steps); use linear, "
                "cosine, polynomial, ..."
            )
        return found

    lambdas = []
    for group in optimizer.param_groups:
        own = group.get(WARMUP_KEY)
        lambdas.append(factor(default_warmup_steps if own is None else warmup_step_count(own, num_training_steps)))
    return LambdaLR(optimizer, lambdas)


class CombinedOptimizer(torch.optim.Optimizer):
    """Steps the Trainer's optimizer (``main``) and the parameter groups' own optimizers (``others``) together;
    ``param_groups`` holds all their groups (the same dicts), so LR schedulers and the Trainer see one optimizer."""

    def __init__(self, main: torch.optim.Optimizer, others: list[torch.optim.Optimizer]):  # noqa: D107
        self.main, self.others = main, list(others)
        self.defaults = main.defaults
        self.state = main.state  # the Trainer only inspects it for logging; every state is in state_dict()
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self):
        return [group for optimizer in (self.main, *self.others) for group in optimizer.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.main.step(closure)
        for optimizer in self.others:
            optimizer.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in (self.main, *self.others):
            optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"main": self.main.state_dict(), "others": [o.state_dict() for o in self.others]}

    def load_state_dict(self, state_dict: dict) -> None:
        if len(state_dict.get("others", ())) != len(self.others):
            raise ValueError(
                f"the saved optimizer state has {len(state_dict.get('others', ()))} group optimizers, "
                f"this training has {len(self.others)}: resume with the same parameter-group options"
            )
        self.main.load_state_dict(state_dict["main"])
        for optimizer, state in zip(self.others, state_dict["others"]):
            optimizer.load_state_dict(state)

    def __repr__(self) -> str:
        return f"CombinedOptimizer(main={self.main!r}, others={self.others!r})"
