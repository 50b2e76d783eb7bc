"""Sharded checkpoints of an FSDP2 model (:func:`keplm.training.fsdp.shard_model`), without pickle.

Where gathering the whole model on one process (:func:`keplm.training.fsdp.full_state_dict`) does not fit,
:func:`save_sharded` has every process write only its own rows of every sharded tensor
(``model-shard-<rank>-of-<world>.safetensors``); process 0 also writes the tensors that are not sharded, the config,
the knowledge assets (``knowledge/``) and ``sharded_index.json`` (which file holds which rows of which tensor).
torch's distributed checkpoint (DCP) would do the same with pickled metadata, which keplm's checkpoints do not hold.

* :func:`load_sharded` loads such a folder into a model sharded the same way, each process reading its own file (to
  resume on the same number of processes);
* :func:`consolidate_sharded` writes an ordinary checkpoint from it in one process (``save_pretrained``: it then
  loads with ``from_pretrained``, on any number of processes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from transformers import AutoConfig

from keplm.knowledge.assets import KnowledgeAssets
from keplm.registration import REGISTERED_METHODS

INDEX = "sharded_index.json"
FORMAT = "keplm-sharded-1"


def shard_file(rank: int, world_size: int) -> str:
    return f"model-shard-{rank:05d}-of-{world_size:05d}.safetensors"


def _sharded_rows(name: str, value) -> torch.Tensor | None:
    """This process's rows of a DTensor sharded along dim 0 (FSDP2's layout), or None for a plain tensor."""
    if not isinstance(value, DTensor):
        return None
    placements = value.placements
    if len(placements) != 1 or not placements[0].is_shard(0):
        raise ValueError(
            f"{name} is laid out as {placements}; save_sharded writes tensors sharded along their first "
            "dimension over one mesh dimension (FSDP2's default, shard_model's)"
        )
    return value.to_local()


def _model_class(model: nn.Module) -> type:
    """The model's own class: FSDP2 swaps in a subclass (``FSDP<name>``) of it and ``FSDPModule``."""
    cls = type(model)
    if isinstance(model, FSDPModule):
        cls = next(base for base in cls.__bases__ if not issubclass(base, FSDPModule))
    return cls


def save_sharded(model: nn.Module, folder: str | os.PathLike) -> None:
    """Write ``model``'s state as a sharded checkpoint in ``folder``: a collective call (every process calls it, each
    writes its own file; process 0 the rest)."""
    folder = Path(folder)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local, shapes, replicated = {}, {}, {}
    for name, value in model.state_dict().items():
        piece = _sharded_rows(name, value)
        if piece is None:
            replicated[name] = value
        else:
            local[name] = piece.detach().cpu().contiguous().clone()  # clones: tied weights are separate entries
            shapes[name] = list(value.shape)
    every_rows = [None] * world_size
    dist.all_gather_object(every_rows, {name: local[name].shape[0] for name in shapes})
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        local.update({name: value.detach().cpu().contiguous().clone() for name, value in replicated.items()})
    dist.barrier()  # the folder exists before any process writes into it
    save_file(local, folder / shard_file(rank, world_size), metadata={"format": "pt"})
    if rank == 0:
        tensors = {
            name: {"shape": list(value.shape), "file": shard_file(0, world_size)} for name, value in replicated.items()
        }
        for name, shape in shapes.items():
            start, shards = 0, []
            for process, counts in enumerate(every_rows):
                shards.append([shard_file(process, world_size), start, start + counts[name]])
                start += counts[name]
            if start != shape[0]:
                raise ValueError(f"the processes' rows of {name} add up to {start}, not its {shape[0]}")
            tensors[name] = {"shape": shape, "shards": shards}
        class_name = _model_class(model).__name__
        index = {"format": FORMAT, "world_size": world_size, "model_class": class_name, "tensors": tensors}
        (folder / INDEX).write_text(json.dumps(index, indent=1))
        model.config.architectures = [class_name]
        model.config.save_pretrained(folder)
        assets = getattr(model, "knowledge_assets", None)
        if assets is not None:
            assets.save_pretrained(folder, overwrite=True)
    dist.barrier()  # the checkpoint is complete when any process returns


def read_index(folder: str | os.PathLike) -> dict:
    """The index of a sharded checkpoint; FileNotFoundError / ValueError naming the folder when it is not one."""
    path = Path(folder) / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a keplm sharded checkpoint: no {INDEX} (save_sharded writes one)")
    index = json.loads(path.read_text())
    if index.get("format") != FORMAT:
        raise ValueError(f"{path} has format {index.get('format')!r}; this keplm reads {FORMAT!r}")
    return index


def load_sharded(model: nn.Module, folder: str | os.PathLike) -> None:
    """Load a sharded checkpoint into ``model``, sharded as the saving run was (same number of processes): each
    process reads its own rows. A collective call."""
    index = read_index(folder)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if index["world_size"] != world_size:
        raise ValueError(
            f"{folder} was saved by {index['world_size']} processes and this run has {world_size}: "
            "write an ordinary checkpoint with consolidate_sharded, then from_pretrained and shard_model"
        )
    state = model.state_dict()
    if set(state) != set(index["tensors"]):
        missing, unexpected = sorted(set(state) - set(index["tensors"])), sorted(set(index["tensors"]) - set(state))
        raise ValueError(
            f"{folder} does not fit this {type(model).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    mine = Path(folder) / shard_file(rank, world_size)
    first = Path(folder) / shard_file(0, world_size)
    with safe_open(mine, framework="pt") as own, safe_open(first, framework="pt") as zero, torch.no_grad():
        for name, value in state.items():
            piece = _sharded_rows(name, value)
            target = value if piece is None else piece
            source = (own if piece is not None else zero).get_tensor(name)
            if source.shape != target.shape:
                raise ValueError(
                    f"{name}: this process holds {tuple(target.shape)}, {mine.name} has "
                    f"{tuple(source.shape)} (another sharding)"
                )
            target.copy_(source)
    dist.barrier()


def consolidate_sharded(folder: str | os.PathLike, output_dir: str | os.PathLike, model_class=None) -> nn.Module:
    """Write an ordinary checkpoint (``save_pretrained``: safetensors, config, ``knowledge/``) of the sharded
    checkpoint in ``folder`` to ``output_dir``, in one process; returns the model. ``model_class``: default the
    saved model's class among those its method registered."""
    index, folder = read_index(folder), Path(folder)
    config = AutoConfig.from_pretrained(folder)
    if model_class is None:
        models = REGISTERED_METHODS.get(config.model_type, (None, {}, None))[1].values()
        model_class = next((m for m in models if m.__name__ == index["model_class"]), None)
        if model_class is None:
            raise ValueError(
                f"{index['model_class']} is not a model registered for {config.model_type!r}: pass model_class="
            )
    state, handles = {}, {}
    try:
        for name, entry in index["tensors"].items():
            parts = [(entry["file"], None, None)] if "file" in entry else entry["shards"]
            pieces = []
            for file, start, stop in parts:
                if file not in handles:
                    handles[file] = safe_open(folder / file, framework="pt")
                piece = handles[file].get_tensor(name)
                if start is not None and piece.shape[0] != stop - start:
                    raise ValueError(f"{file} holds {piece.shape[0]} rows of {name}, the index says {stop - start}")
                pieces.append(piece)
            state[name] = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
            if list(state[name].shape) != entry["shape"]:
                raise ValueError(f"{name} reassembles to {list(state[name].shape)}, the index says {entry['shape']}")
    finally:
        handles.clear()
    model = model_class(config)
    model.load_state_dict(state)
    if (folder / "knowledge").is_dir():
        model.set_knowledge_assets(KnowledgeAssets.from_pretrained(folder))
    model.save_pretrained(output_dir)
    return model


__all__ = ["consolidate_sharded", "load_sharded", "read_index", "save_sharded"]
