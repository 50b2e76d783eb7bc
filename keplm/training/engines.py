"""The distributed engine a run asked for (FSDP, DeepSpeed) against the one accelerate runs: no silent fallback.

accelerate 1.x turns FSDP on only for the accelerators it shards on: on a machine without one, ``accelerate launch
--use_fsdp`` (``ACCELERATE_USE_FSDP``) and the Trainer's ``--fsdp full_shard`` both run plain CPU DDP (``MULTI_CPU``),
every process holding the whole model, with nothing said. :func:`check_engine` makes that a ValueError naming what
was asked, what runs instead and why; :func:`asks_for_deepspeed` lets keplm's CPU-DDP set-up
(``keplm.training.arguments.parse_args``) refuse a DeepSpeed launch it cannot run, instead of switching it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def _true(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def asks_for_deepspeed(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """How the run asked for DeepSpeed (``accelerate launch --use_deepspeed``, ``--deepspeed <config>``), or None."""
    environ = os.environ if environ is None else environ
    if _true(environ.get("ACCELERATE_USE_DEEPSPEED")):
        return "accelerate launch --use_deepspeed (ACCELERATE_USE_DEEPSPEED)"
    if argv is not None and any(a == "--deepspeed" or a.startswith("--deepspeed=") for a in argv):
        return "--deepspeed"
    return None


def asked_engines(args, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{engine: how it was asked}`` for FSDP and DeepSpeed, from the training arguments and accelerate's launch
    environment."""
    environ = os.environ if environ is None else environ
    asked = {}
    fsdp = getattr(args, "fsdp", None)
    if fsdp:  # transformers 5 turns the option into True and its value into fsdp_config
        asked["FSDP"] = "--fsdp" if fsdp is True else f"--fsdp {fsdp if isinstance(fsdp, str) else ' '.join(fsdp)}"
    elif _true(environ.get("ACCELERATE_USE_FSDP")):
        asked["FSDP"] = "accelerate launch --use_fsdp (ACCELERATE_USE_FSDP)"
    if getattr(args, "deepspeed", None):
        asked["DeepSpeed"] = "--deepspeed"
    elif _true(environ.get("ACCELERATE_USE_DEEPSPEED")):
        asked["DeepSpeed"] = "accelerate launch --use_deepspeed (ACCELERATE_USE_DEEPSPEED)"
    return asked


def check_engine(trainer, environ: Mapping[str, str] | None = None) -> None:
    """A ValueError when the run asked for FSDP or DeepSpeed and accelerate runs something else."""
    enabled = {"FSDP": trainer.is_fsdp_enabled, "DeepSpeed": trainer.is_deepspeed_enabled}
    runs = getattr(trainer.accelerator.distributed_type, "value", str(trainer.accelerator.distributed_type))
    for engine, how in asked_engines(trainer.args, environ).items():
        if enabled[engine]:
            continue
        why = (
            "accelerate applies it only on GPUs and other accelerators it shards on, and this machine has none"
            if trainer.args.device.type == "cpu"
            else "accelerate did not set it up (see its launch config)"
        )
        raise ValueError(
            f"{engine} was asked for ({how}) but accelerate runs {runs} ({why}): every process would hold the whole "
            f"model, its optimizer state and the entity memory. Drop the {engine} option to train with plain data "
            "parallelism knowingly, or launch on accelerators."
        )


__all__ = ["asked_engines", "asks_for_deepspeed", "check_engine"]
