"""KALA's entity memory split by rows over the processes of a group and never gathered.

:class:`ShardedEntityMemory` holds only this process's contiguous block of rows as a Parameter. A lookup is a
collective (every process of the group calls ``forward``, as under FSDP): the ids of every process are gathered,
each process reads the rows it owns (zeros for the others), a sum over processes (an all-reduce of a
``[processes x ids, dim]`` buffer, bounded by the batches and not by the table) gives every looked-up row, and each
process keeps its own ids' vectors. Backward gathers every process's output gradients and accumulates those of its
own rows into its block (``index_add_``): each row's gradient is complete where the row lives, so nothing is
reduced afterwards. Per process the table costs its share of rows (with its gradient and optimizer state), plus
buffers the size of the batches' lookups.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .base import check_index_range
from .entity_memory import NULL_ENTITY_INDEX

OUT_OF_RANGE = (
    "an entity id is outside the entity memory (size {high}); unknown entities must be mapped to the null entity 0"
)


def row_block(num_entities: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)`` of the rows process ``rank`` owns: contiguous blocks of ``ceil(rows / processes)`` rows,
    the last one shorter when the rows do not divide (``torch.chunk``'s split)."""
    size = -(-num_entities // world_size)
    return min(rank * size, num_entities), min((rank + 1) * size, num_entities)


def _gather_padded(
    values: torch.Tensor, group, world_size: int, lengths: list[int] | None = None
) -> tuple[torch.Tensor, list[int]]:
    """Every process's ``values`` (first dimension may differ between processes) as ``[world, longest, ...]``
    (zero padded) and each process's length (gathered first unless given): gloo's all-gather needs equal shapes."""
    if lengths is None:
        length = torch.tensor([values.shape[0]], dtype=torch.long, device=values.device)
        gathered_lengths = [torch.empty_like(length) for _ in range(world_size)]
        dist.all_gather(gathered_lengths, length, group=group)
        lengths = [int(n) for n in gathered_lengths]
    longest = max(lengths)
    padded = values.new_zeros((longest, *values.shape[1:]))
    padded[: values.shape[0]] = values
    gathered = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(gathered, padded.contiguous(), group=group)
    return torch.stack(gathered), lengths


class _ShardedLookup(torch.autograd.Function):
    """Lookup of ``ids`` (1-D) in a table whose rows ``[start, start + len(shard))`` are ``shard`` here and the
    others live in the other processes of ``group``."""

    @staticmethod
    def forward(ctx, ids, shard, start: int, group, gradient_divisor: float):
        world_size = dist.get_world_size(group)
        rank = dist.get_rank(group)
        all_ids, lengths = _gather_padded(ids, group, world_size)  # [world, longest]
        local = all_ids - start
        owned = (local >= 0) & (local < shard.shape[0])
        for process, length in enumerate(lengths):  # the padding of each process's ids reads nothing
            owned[process, length:] = False
        vectors = shard.new_zeros((*all_ids.shape, shard.shape[1]))
        vectors[owned] = shard[local[owned]]
        dist.all_reduce(vectors, group=group)  # each row comes from the one process that owns it
        trained = owned & (all_ids != NULL_ENTITY_INDEX)  # the null row takes no gradient (padding_idx): stays zero
        ctx.save_for_backward(local, trained)
        ctx.group, ctx.rank, ctx.world_size, ctx.divisor = group, rank, world_size, gradient_divisor
        ctx.shard_shape, ctx.lengths = shard.shape, lengths
        return vectors[rank, : ids.shape[0]].clone()

    @staticmethod
    def backward(ctx, grad_output):
        local, trained = ctx.saved_tensors
        grads, _ = _gather_padded(grad_output.contiguous(), ctx.group, ctx.world_size, ctx.lengths)
        grad_shard = grad_output.new_zeros(ctx.shard_shape)
        grad_shard.index_add_(0, local[trained], grads[trained])
        if ctx.divisor != 1:
            grad_shard /= ctx.divisor
        return None, grad_shard, None, None, None


def _take_own_rows(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """Load-state-dict pre-hook of :class:`ShardedEntityMemory`: a whole table saved under EntityMemory's name
    (``<prefix>embeddings.weight``, ``num_entities`` rows) becomes this process's rows under ``<prefix>weight``."""
    whole = state_dict.pop(f"{prefix}embeddings.weight", None)
    if whole is None:
        return
    if whole.shape[0] != module.num_entities:
        error_msgs.append(
            f"{prefix}embeddings.weight has {whole.shape[0]} rows, the sharded entity memory {module.num_entities}"
        )
        return
    state_dict[f"{prefix}weight"] = whole[module.start : module.stop]


class ShardedEntityMemory(nn.Module):
    """:class:`~keplm.modeling.entity_memory.EntityMemory` (KALA Def. 2: row 0 the null entity, always zero) of
    ``num_entities`` rows of which this process holds rows ``[start, stop)`` (:func:`row_block` of its rank in
    ``group``, default the default group) as the Parameter ``weight``.

    ``forward`` is a collective: every process of the group calls it, with its own ids (any number, any shape), and
    backward too: every process's loss must depend on every lookup's output (KALA's does, even without entities).
    ``average_gradients`` (default) divides each row's gradient by the number of processes: the gradient of the
    mean of the processes' losses, as DDP gives every other parameter; ``False`` gives the gradient of their sum.
    Build it from a whole table with :meth:`from_full`, or replace the memories of a model with
    ``keplm.training.sharded_memory.shard_entity_memory``.
    """

    def __init__(
        self, num_entities: int, entity_dim: int, group=None, average_gradients: bool = True, device=None, dtype=None
    ):
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(
                "ShardedEntityMemory needs an initialised torch.distributed process group "
                "(torch.distributed.init_process_group, or a launch with torchrun / accelerate)"
            )
        self.group = group
        self.average_gradients = average_gradients
        self._num_entities, self._entity_dim = num_entities, entity_dim
        self.start, self.stop = row_block(num_entities, dist.get_rank(group), dist.get_world_size(group))
        self.weight = nn.Parameter(torch.zeros(self.stop - self.start, entity_dim, device=device, dtype=dtype))
        # an ordinary checkpoint's whole table (``<memory>.embeddings.weight``, EntityMemory's name) loads as this
        # process's rows: resuming, or loading the best model, from a checkpoint that the gathered save wrote
        self.register_load_state_dict_pre_hook(_take_own_rows)

    @classmethod
    def from_full(
        cls, weight: torch.Tensor, group=None, average_gradients: bool = True, requires_grad: bool = True
    ) -> ShardedEntityMemory:
        """This process's block of the whole table ``weight`` (``[num_entities, entity_dim]``), copied."""
        memory = cls(weight.shape[0], weight.shape[1], group, average_gradients, weight.device, weight.dtype)
        with torch.no_grad():
            memory.weight.copy_(weight[memory.start : memory.stop])
        memory.weight.requires_grad_(requires_grad)
        return memory

    @property
    def num_entities(self) -> int:
        return self._num_entities

    @property
    def entity_dim(self) -> int:
        return self._entity_dim

    @property
    def table(self) -> nn.Parameter:
        """This process's rows (``weight``): the accessor ``EntityMemory.table`` shares, for optimizers."""
        return self.weight

    @property
    def sparse(self) -> bool:
        """Always False: a shard takes a dense gradient of its rows."""
        return False

    def extra_repr(self) -> str:
        return f"{self.num_entities}, {self.entity_dim}, rows [{self.start}, {self.stop}) here"

    def forward(self, entity_ids: torch.Tensor) -> torch.Tensor:
        check_index_range(entity_ids, 0, self.num_entities, OUT_OF_RANGE)
        divisor = float(dist.get_world_size(self.group)) if self.average_gradients else 1.0
        flat = entity_ids.reshape(-1).to(self.weight.device)
        vectors = _ShardedLookup.apply(flat, self.weight, self.start, self.group, divisor)
        return vectors.reshape(*entity_ids.shape, self.entity_dim)

    @torch.no_grad()
    def initialize_rows(self, rows: torch.Tensor, vectors: torch.Tensor) -> None:
        """Overwrite the given rows that this process holds (the others are left to their processes: every process
        passes the same rows, or each its own); row 0 stays zero. Not a collective."""
        rows = rows.to(self.weight.device)
        keep = (rows != NULL_ENTITY_INDEX) & (rows >= self.start) & (rows < self.stop)
        self.weight[rows[keep] - self.start] = vectors.to(self.weight.device)[keep].to(self.weight)

    @torch.no_grad()
    def full_weight(self) -> torch.Tensor:
        """The whole table, gathered from every process of the group (a collective; for saving)."""
        world_size = dist.get_world_size(self.group)
        blocks, lengths = _gather_padded(self.weight.detach(), self.group, world_size)
        return torch.cat([block[:length] for block, length in zip(blocks, lengths)])


__all__ = ["ShardedEntityMemory", "row_block"]
