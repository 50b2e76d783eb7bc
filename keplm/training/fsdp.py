"""FSDP2 (``torch.distributed.fsdp.fully_shard``) applied to a keplm model by hand, for training loops that do
not go through accelerate (which turns FSDP on only on the accelerators it shards on, see
:mod:`keplm.training.engines`).

:func:`shard_model` shards the way accelerate's FSDP2 transformer auto-wrap does: each transformer block of each
encoder (``named_encoders``; a block's weights are gathered for its forward only) and any extra stacked layers,
then the root, which takes every other parameter (heads, KALA's entity memory, split by rows). Forward hooks on
sharded modules keep working: FSDP2 gathers the weights before a module runs. :func:`full_state_dict` gathers the
whole model to CPU, for ``save_pretrained(folder, state_dict=...)`` on the saving process.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from keplm.modeling.base import ExtraLayers, encoder_layers


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of the model's encoders and of its extra layers (``ExtraLayers``), each once."""
    blocks = []
    for encoder in getattr(model, "named_encoders", dict)().values():
        blocks.extend(encoder_layers(encoder))
    for module in model.modules():
        if isinstance(module, ExtraLayers):
            blocks.extend(module)
    seen, unique = set(), []
    for block in blocks:
        if id(block) not in seen:
            seen.add(id(block))
            unique.append(block)
    return unique


def shard_model(model: nn.Module, **fully_shard_kwargs) -> nn.Module:
    """Apply FSDP2 to ``model`` in place (each transformer block, then the root; ``fully_shard_kwargs``: ``mesh``,
    ``reshard_after_forward``, ``mp_policy``, ... as ``fully_shard`` takes them) and return it. Needs an initialised
    process group; a ValueError for a model with sparse embedding tables, whose sparse gradients FSDP2 cannot
    reduce."""
    blockers = model.sharding_blockers("FSDP") if hasattr(model, "sharding_blockers") else []
    if blockers:
        raise ValueError(f"FSDP2 cannot shard this {type(model).__name__}: {'; '.join(blockers)}")
    sparse = [name for name, module in model.named_modules() if isinstance(module, nn.Embedding) and module.sparse]
    if sparse:
        raise ValueError(
            f"FSDP2 cannot shard embedding tables with sparse gradients ({', '.join(sparse)}): it "
            "reduces dense gradients only; build the model with dense tables"
        )
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        raise ValueError(
            "shard_model needs an initialised torch.distributed process group "
            "(torch.distributed.init_process_group, or a launch with torchrun / accelerate)"
        )
    for block in _blocks(model):
        fully_shard(block, **fully_shard_kwargs)
    fully_shard(model, **fully_shard_kwargs)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict of a model sharded by :func:`shard_model`, on CPU: a collective call (every
    process calls it); process 0 gets it (the others an empty dict) and passes it to
    ``save_pretrained(folder, state_dict=...)``."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


__all__ = ["full_state_dict", "shard_model"]
