"""Building and reading keplm models under DeepSpeed ZeRO-3, whose parameters live partitioned across processes.

When a run's DeepSpeed config asks for ZeRO-3 (``TrainingArguments(deepspeed=...)``, or a live
``transformers.integrations.HfDeepSpeedConfig``), transformers builds models under ``deepspeed.zero.Init``: every
parameter is split across the processes as its module is created, and each process holds an empty tensor plus its
shard. keplm's own construction steps then have to gather what they read or write:

* :func:`construct` builds a model from its config the way the Auto classes' ``from_config`` does (partitioned,
  then initialised module by module on gathered parameters), and as ``cls(config)`` otherwise;
* :func:`gathered` is a context in which the given parameters are whole (a no-op when none is partitioned);
* :func:`full_state_dict` is a module's whole state dict (a copy), partitioned or not.

Without DeepSpeed every function is the plain PyTorch operation and DeepSpeed is not imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
import transformers
from torch import nn
from transformers.integrations import is_deepspeed_zero3_enabled

from keplm.registration import auto_class_name


def is_partitioned(parameters: Iterable[nn.Parameter]) -> bool:
    """Whether any of ``parameters`` is a ZeRO-3 partitioned parameter (DeepSpeed gives those a ``ds_id``)."""
    return any(hasattr(parameter, "ds_id") for parameter in parameters)


def zero3_enabled() -> bool:
    """Whether transformers builds models under ZeRO-3 now (a live ZeRO-3 DeepSpeed config)."""
    return bool(is_deepspeed_zero3_enabled())


@contextlib.contextmanager
def gathered(parameters: nn.Module | Iterable[nn.Parameter], modify: bool = False) -> Iterator[None]:
    """Within the block the parameters (a module's, recursively, or the given ones) are whole on every process.

    ``modify=True``: what the block writes into them is kept; every process must write the same values (process 0's
    are the ones re-partitioned). A no-op for parameters that are not partitioned.
    """
    parameters = list(parameters.parameters() if isinstance(parameters, nn.Module) else parameters)
    if not is_partitioned(parameters):
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(parameters, modifier_rank=0 if modify else None):
        yield


def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s whole state dict, gathered from the processes' shards under ZeRO-3 (every process takes
    part and gets it)."""
    with gathered(module):
        return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def construct(cls, config):
    """``cls(config)``; under ZeRO-3, partitioned as it is built and initialised on gathered parameters, which
    transformers does in the Auto classes' ``from_config`` (a model's ``__init__`` does not): through the Auto class
    ``cls`` is registered under (``keplm.registration.register_method``)."""
    if not zero3_enabled():
        return cls(config)

    name = auto_class_name(cls, getattr(config, "model_type", None))
    if name is None:
        raise ValueError(
            f"{cls.__name__} is not registered with an Auto class for {config.model_type!r}: under DeepSpeed ZeRO-3 "
            "transformers builds a model partitioned only through the Auto classes' from_config; register it with "
            "keplm.registration.register_method"
        )
    return getattr(transformers, name).from_config(config)


__all__ = ["construct", "full_state_dict", "gathered", "is_partitioned", "zero3_enabled"]
