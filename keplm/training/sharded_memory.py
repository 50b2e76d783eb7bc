"""A row-sharded entity memory for training loops of your own: :func:`shard_entity_memory` replaces
every :class:`~keplm.modeling.entity_memory.EntityMemory` of a model by a
:class:`~keplm.modeling.sharded_entity_memory.ShardedEntityMemory` holding this process's rows, which DDP then
leaves alone (each row's gradient is complete where the row lives); :func:`clip_grad_norm_` clips by the global
norm; :func:`gather_entity_memory_state` gives process 0 the whole state dict, for ``save_pretrained(folder,
state_dict=...)``: an ordinary checkpoint that loads in one process without sharding.

    model = shard_entity_memory(model)       # every process, before DDP
    model = DistributedDataParallel(model)   # the rest replicated as usual
    ... loss.backward(); clip_grad_norm_(model, 1.0); optimizer.step()
    state = gather_entity_memory_state(model)  # every process; process 0 saves

Every process must run every forward (a lookup is a collective), as under FSDP. The KeplmTrainer does all this
itself with ``--shard_entity_memory`` (``KeplmTrainingArguments.shard_entity_memory``; see
:mod:`keplm.training.sharded_training`), and takes a model sharded here beforehand too.
"""

from __future__ import annotations

import atexit
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from keplm.modeling.entity_memory import EntityMemory
from keplm.modeling.sharded_entity_memory import ShardedEntityMemory


def _module(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def sharded_memories(model: nn.Module) -> dict[str, ShardedEntityMemory]:
    """``{qualified name: module}`` of the model's sharded entity memories (inside DDP too)."""
    return {name: module for name, module in _module(model).named_modules() if isinstance(module, ShardedEntityMemory)}


def _destroy_at_exit(group) -> None:
    """Destroy a group that :func:`shard_entity_memory` made, at interpreter exit: a gloo group still alive then can
    abort the process ("terminate called without an active exception", seen on CPU runs once training has ended)."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group(group)
        except (ValueError, RuntimeError):  # already destroyed with the default group
            pass


def shard_entity_memory(model: nn.Module, group=None, average_gradients: bool = True) -> nn.Module:
    """Replace, in place, every ``EntityMemory`` of ``model`` by a ``ShardedEntityMemory`` holding this process's
    block of its rows (the whole table is freed when nothing else holds it) and return the model. Every process
    calls it, before wrapping the model in DDP, which is told to ignore the shards
    (``_ddp_params_and_buffers_to_ignore``). ``group``: the processes that share the tables; default a new group
    over all processes, so that lookups never interleave with DDP's all-reduces of the default group.
    ``average_gradients``: see ``ShardedEntityMemory`` (the mean over processes, as DDP's)."""
    if isinstance(model, DistributedDataParallel):
        raise ValueError(
            "shard_entity_memory takes the model before DistributedDataParallel wraps it: DDP must be "
            "built knowing which parameters (the shards) to leave alone"
        )
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "shard_entity_memory needs an initialised torch.distributed process group "
            "(torch.distributed.init_process_group, or a launch with torchrun / accelerate)"
        )
    memories = [(name, module) for name, module in model.named_modules() if isinstance(module, EntityMemory)]
    sparse = [name for name, module in memories if module.embeddings.sparse]
    if sparse:
        raise ValueError(
            f"cannot shard entity memories with sparse gradients ({', '.join(sparse)}): a shard takes a "
            "dense gradient of its rows; build the model without sparse_entity_memory"
        )
    if memories and group is None:
        group = dist.new_group(ranks=list(range(dist.get_world_size())))
        atexit.register(_destroy_at_exit, group)
    ignored = []
    for name, module in memories:
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        weight = module.embeddings.weight
        setattr(
            parent,
            attribute,
            ShardedEntityMemory.from_full(
                weight.detach(), group, average_gradients, requires_grad=weight.requires_grad
            ),
        )
        ignored.append(f"{name}.weight")
    if ignored:
        already = list(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, already + ignored)
    return model


@torch.no_grad()
def clip_grad_norm_(model: nn.Module, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (2-norm) over a model with sharded entity memories: the norm of the
    whole model's gradient, each shard's squared norm summed over its group's processes, the others taken as they
    are (DDP's gradients are the same in every process). A collective: every process calls it after backward.
    Scales every gradient by ``max_norm / (norm + 1e-6)`` where that is below 1; returns the total norm."""
    memories = sharded_memories(model)
    shards = {id(module.weight) for module in memories.values()}
    replicated = [p.grad for p in model.parameters() if p.grad is not None and id(p) not in shards]
    if any(grad.is_sparse for grad in replicated):
        raise ValueError("clip_grad_norm_ over sharded entity memories takes dense gradients only")
    device = next(model.parameters()).device
    squares = torch.zeros((), dtype=torch.float32, device=device)
    for grad in replicated:
        squares += grad.detach().float().pow(2).sum()
    for module in memories.values():
        shard = module.weight.grad
        square = shard.detach().float().pow(2).sum() if shard is not None else torch.zeros((), device=device)
        dist.all_reduce(square, group=module.group)  # the table's norm²: the sum of its shards'
        squares += square
    total = squares.sqrt()
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if not math.isfinite(float(total)) or float(coefficient) < 1.0:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coefficient.to(p.grad.dtype))
    return total


@torch.no_grad()
def gather_entity_memory_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state dict on CPU, each sharded table gathered under the name of an ``EntityMemory``'s
    (``<memory>.embeddings.weight``): a collective (every process calls it); process 0 gets it, the others an
    empty dict. Process 0 passes it to ``save_pretrained(folder, state_dict=...)``."""
    module = _module(model)
    full = {name: memory.full_weight() for name, memory in sharded_memories(module).items()}
    if dist.get_rank() != 0:
        return {}
    state = {key: value.detach().cpu().clone() for key, value in module.state_dict().items()}
    for name, weight in full.items():
        del state[f"{name}.weight"]
        state[f"{name}.embeddings.weight"] = weight.cpu()
    return state


__all__ = ["clip_grad_norm_", "gather_entity_memory_state", "shard_entity_memory", "sharded_memories"]
