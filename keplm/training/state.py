"""Training state without pickles: optimizer, scheduler, RNG and gradient-scaler states as safetensors + JSON.

The stock Trainer saves them with ``torch.save`` (pickles: ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``),
which keplm keeps out of every output folder and Hub push. :func:`save_state` writes any nested state of
dicts, lists, tuples, numbers, strings, tensors and numpy arrays as ``<name>.safetensors`` (the tensors) and
``<name>.json`` (the structure, with references to the tensors); :func:`load_state` rebuilds it exactly (tuples,
non-string dict keys, numpy dtypes included).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

STATE_SUFFIXES = (".json", ".safetensors")


def _encode(value, tensors: dict, path: str):
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(value, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(
            np.ascontiguousarray(value).astype(np.int64 if value.dtype.kind in "iu" else value.dtype)
        )
        return {"__ndarray__": key, "dtype": value.dtype.str}
    if isinstance(value, dict):
        return {
            "__map__": [
                [_encode(k, tensors, f"{path}.key"), _encode(v, tensors, f"{path}[{k!r}]")] for k, v in value.items()
            ]
        }
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot save {type(value).__name__} at {path} without pickling it")


def _decode(value, tensors: dict):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if "__ndarray__" in value:
        return tensors[value["__ndarray__"]].numpy().astype(np.dtype(value["dtype"]))
    if "__tuple__" in value:
        return tuple(_decode(v, tensors) for v in value["__tuple__"])
    if "__map__" in value:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value["__map__"]}
    raise ValueError(f"unknown entry {sorted(value)} in a saved training state")


def save_state(state, directory: str | os.PathLike, name: str) -> None:
    """Write ``state`` as ``<directory>/<name>.json`` + ``<name>.safetensors``."""
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(state, tensors, name)
    Path(directory).mkdir(parents=True, exist_ok=True)
    # written under a temporary name, then renamed: two processes saving the same state to a shared disk (one per
    # machine) never leave a mixed file, and a kill mid-write leaves the old file or none
    partial = f".{os.getpid()}.partial"
    save_file(tensors, os.path.join(directory, f"{name}.safetensors{partial}"))
    with open(os.path.join(directory, f"{name}.json{partial}"), "w", encoding="utf-8") as f:
        json.dump(structure, f)
    for suffix in STATE_SUFFIXES:
        os.replace(os.path.join(directory, f"{name}{suffix}{partial}"), os.path.join(directory, name + suffix))


def has_state(directory: str | os.PathLike, name: str) -> bool:
    return all(os.path.isfile(os.path.join(directory, name + suffix)) for suffix in STATE_SUFFIXES)


def load_state(directory: str | os.PathLike, name: str):
    """The state :func:`save_state` wrote; FileNotFoundError naming the missing file."""
    for suffix in STATE_SUFFIXES:
        if not os.path.isfile(os.path.join(directory, name + suffix)):
            raise FileNotFoundError(f"training state file {os.path.join(directory, name + suffix)} is missing")
    path = os.path.join(directory, f"{name}.json")
    try:
        with open(path, encoding="utf-8") as f:
            structure = json.load(f)
        path = os.path.join(directory, f"{name}.safetensors")
        tensors = load_file(path)
    except (ValueError, OSError, RuntimeError, SafetensorError) as err:  # json's and safetensors' (truncated, corrupt)
        raise ValueError(f"training state file {path} is unreadable (truncated or corrupt?): {err}") from err
    return _decode(structure, tensors)


def require_state(directory: str | os.PathLike, name: str, stock_files: tuple[str, ...] = ()) -> bool:
    """Whether ``directory`` holds the state ``name`` as keplm saves it (True) or only as the stock Trainer's pickle
    ``stock_files`` (False); a FileNotFoundError naming the missing files when it holds neither, since resuming
    without it would silently start that state afresh."""
    if has_state(directory, name):
        return True
    if stock_files and all(os.path.isfile(os.path.join(directory, f)) for f in stock_files):
        return False
    missing = [name + suffix for suffix in STATE_SUFFIXES if not os.path.isfile(os.path.join(directory, name + suffix))]
    raise FileNotFoundError(
        f"cannot resume from {directory}: its {name} state ({', '.join(missing)}) is missing, and "
        "resuming without it would start it afresh; resume from another checkpoint, or start a new "
        "run from the weights (--model_name_or_path)"
    )


__all__ = ["save_state", "load_state", "has_state", "require_state"]
