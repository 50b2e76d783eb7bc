"""The KeplmTrainer with row-sharded entity memories (``--shard_entity_memory``): a mixin over
``transformers.Trainer`` that shards the model's ``EntityMemory`` modules at construction
(``keplm.training.sharded_memory.shard_entity_memory``, before accelerate wraps the model in DDP, which then leaves
the shards alone), saves ordinary models (every process joins the gather, process 0 writes) and keeps each process's
optimizer state of its rows in checkpoints (``optimizer_shard_<rank>``, safetensors + JSON), so that
``--resume_from_checkpoint`` continues exactly. The model weights of a checkpoint are the ordinary ones: a sharded
model takes its rows of the saved table as it loads them (``ShardedEntityMemory``'s load hook). Gradient clipping
and the logged norm are the global norm (``clip_gradients``).

Refused (ValueError): sparse entity memories, FSDP or DeepSpeed together with sharding, ``--save_on_each_node``
(process 0 alone receives the gathered table), and a resume with another process count or from a checkpoint saved
without sharding (or the other way round): each would lose or misplace the table's optimizer state.
"""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path

from keplm.modeling.entity_memory import EntityMemory

from .engines import asked_engines
from .optim import CombinedOptimizer
from .sharded_memory import clip_grad_norm_, gather_entity_memory_state, shard_entity_memory, sharded_memories
from .state import has_state, load_state, save_state

logger = logging.getLogger(__name__)

#: the checkpoint state (``keplm.training.state``) of process ``rank``'s optimizer state of its table rows
SHARD_STATE = "optimizer_shard_{rank}"


def shard_for_training(model, args) -> None:
    """What ``--shard_entity_memory`` does at the Trainer's construction: shard ``model``'s entity memories in place
    when the run has more than one process; a ValueError for what cannot work with sharded tables."""
    if model is None:
        return
    wanted, already = bool(getattr(args, "shard_entity_memory", False)), sharded_memories(model)
    if not (wanted or already):
        return
    memories = [name for name, module in model.named_modules() if isinstance(module, EntityMemory)]
    if wanted and not memories and not already:
        logger.warning("--shard_entity_memory: %s has no entity memory, nothing to shard", type(model).__name__)
        return
    engines = asked_engines(args)
    if engines:
        how = ", ".join(f"{engine} ({asked})" for engine, asked in engines.items())
        raise ValueError(
            f"--shard_entity_memory cannot be combined with {how}: the engine would shard or partition "
            "the model's parameters itself, and the sharded table's lookups and gradients are collectives "
            "of their own; use --shard_entity_memory with plain multi-process data parallelism "
            "(torchrun / accelerate launch --multi_gpu), or the engine without it"
        )
    if args.world_size <= 1:
        if wanted and not already:
            logger.info("--shard_entity_memory: one process, nothing to shard; the entity memory trains whole")
        return
    if args.save_on_each_node:
        raise ValueError(
            "--shard_entity_memory cannot be combined with --save_on_each_node: the sharded table is "
            "gathered to process 0 alone, which writes the saved model"
        )
    sparse = [name for name in memories if model.get_submodule(name).sparse]
    if sparse:
        raise ValueError(
            f"--shard_entity_memory cannot shard entity memories with sparse gradients "
            f"({', '.join(sparse)}): a shard takes a dense gradient of its rows; train without "
            "--sparse_entity_memory, or without --shard_entity_memory"
        )
    if memories:
        shard_entity_memory(model)
    for name, memory in sharded_memories(model).items():
        logger.info(
            "--shard_entity_memory: %s holds rows [%d, %d) of %d here (process %d of %d)",
            name,
            memory.start,
            memory.stop,
            memory.num_entities,
            args.process_index,
            args.world_size,
        )


def _optimizers(optimizer) -> list:
    """The torch optimizers inside the (accelerate-wrapped, possibly combined) ``optimizer``, in the order of
    ``CombinedOptimizer.state_dict``'s nesting."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    return [inner.main, *inner.others] if isinstance(inner, CombinedOptimizer) else [inner]


def _states(optimizer, state: dict) -> list[dict]:
    """The state dicts of :func:`_optimizers` inside ``state`` (``optimizer.state_dict()``), the same objects."""
    optimizers = _optimizers(optimizer)
    return [state["main"], *state["others"]] if len(optimizers) > 1 or "main" in state else [state]


def _shard_indices(torch_optimizer, shards: set[int]) -> list[int]:
    """The indices of the shard parameters in ``torch_optimizer``'s state dict (its parameters numbered in order
    over its param groups)."""
    return [
        index
        for index, p in enumerate(p for group in torch_optimizer.param_groups for p in group["params"])
        if id(p) in shards
    ]


class ShardedMemoryTraining:
    """Mixin of :class:`keplm.training.trainer.KeplmTrainer` (``Trainer`` methods come after it in the MRO)."""

    def _sharded_tables(self) -> dict:
        return sharded_memories(self.model) if self.model is not None else {}

    def _shard_meta(self) -> dict:
        return {
            "world_size": self.args.world_size,
            "rank": self.args.process_index,
            "rows": {name: [m.start, m.stop, m.num_entities] for name, m in self._sharded_tables().items()},
        }

    def clip_gradients(self, model, max_norm: float):
        """With row-sharded tables, the norm of the whole model's gradient (each table's squared norm summed over its
        shards' processes), clipped to ``max_norm``; the stock clipping would take each process's own. Called every
        step: whether the model has sharded tables is decided once, at the Trainer's construction."""
        if not self._has_sharded_tables:
            return super().clip_gradients(model, max_norm)

        self.accelerator.unscale_gradients()
        return clip_grad_norm_(model, max_norm)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The stock ``save_model``; with sharded tables every process joins the gather of the tables
        (``gather_entity_memory_state``) and process 0 writes an ordinary checkpoint (with ``knowledge/``)."""
        if not self._sharded_tables() or self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return super().save_model(output_dir, _internal_call)

        state = gather_entity_memory_state(self.model)  # a collective: rank 0 gets the whole state, the others {}
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:  # what the stock save writes (keplm's save_model replaces its pickled arguments)
            os.makedirs(output_dir, exist_ok=True)
            self.accelerator.unwrap_model(self.model).save_pretrained(output_dir, state_dict=state)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

    def save_optimizer_state(self, output_dir: str) -> None:
        """As keplm's (safetensors + JSON), but the optimizer state of each process's table rows is written by that
        process (``optimizer_shard_<rank>``), and process 0's ``optimizer`` holds the replicated rest."""
        shards = {id(memory.weight) for memory in self._sharded_tables().values()}
        if not shards:
            return super().save_optimizer_state(output_dir)
        state = self.optimizer.state_dict()
        own = []  # (torch optimizer's position, parameter index, its state) of this process's rows
        for position, (torch_optimizer, component) in enumerate(
            zip(_optimizers(self.optimizer), _states(self.optimizer, state))
        ):
            own += [
                (position, index, component["state"].pop(index))
                for index in _shard_indices(torch_optimizer, shards)
                if index in component["state"]
            ]
        save_state({**self._shard_meta(), "states": own}, output_dir, SHARD_STATE.format(rank=self.args.process_index))
        if self.args.should_save:
            save_state(state, output_dir, "optimizer")
            save_state(self.lr_scheduler.state_dict(), output_dir, "scheduler")

    def load_optimizer_state(self, checkpoint: str) -> bool:
        """As keplm's, with each process's optimizer state of its table rows put back; a resume that cannot use it
        (another process count, sharded and whole tables mixed, a process's file missing) is a ValueError."""
        shards = {id(memory.weight) for memory in self._sharded_tables().values()}
        saved_sharded = glob.glob(os.path.join(checkpoint, "optimizer_shard_*.json"))
        if not shards and not saved_sharded:
            return super().load_optimizer_state(checkpoint)
        if not shards:
            raise ValueError(
                f"cannot resume from {checkpoint} without --shard_entity_memory: it was saved by a run "
                "with sharded entity memories, whose optimizer state of the table is in one file per "
                "process; resume with --shard_entity_memory and the same number of processes"
            )
        name = SHARD_STATE.format(rank=self.args.process_index)
        if not saved_sharded:
            raise ValueError(
                f"cannot resume from {checkpoint} with --shard_entity_memory: it was saved without "
                "sharded entity memories (its optimizer state holds whole tables); resume without "
                "--shard_entity_memory, or start a new run from its weights (--model_name_or_path)"
            )
        saved = load_state(checkpoint, name) if has_state(checkpoint, name) else None
        count = (saved or load_state(checkpoint, Path(saved_sharded[0]).stem))["world_size"]
        if count != self.args.world_size:
            raise ValueError(
                f"cannot resume from {checkpoint} with {self.args.world_size} processes: its sharded "
                f"entity memories were saved by {count} processes, each with the optimizer state of "
                "its own rows; resume with the same number of processes (--nproc_per_node / "
                "--num_processes), or start a new run from its weights (--model_name_or_path)"
            )
        if saved is None:
            raise ValueError(
                f"cannot resume from {checkpoint}: {name} (this process's optimizer state of its table "
                "rows) is missing; every process writes its own, so on machines without a shared disk "
                "copy every machine's optimizer_shard_* files into the checkpoint folder"
            )
        if saved["rows"] != self._shard_meta()["rows"]:
            raise ValueError(
                f"cannot resume from {checkpoint}: its sharded entity memories' rows {saved['rows']} "
                f"differ from this run's {self._shard_meta()['rows']}"
            )
        state = load_state(checkpoint, "optimizer")
        components = _states(self.optimizer, state)
        for position, index, value in saved["states"]:
            components[position]["state"][index] = value
        self.optimizer.load_state_dict(state)
        self.lr_scheduler.load_state_dict(load_state(checkpoint, "scheduler"))
        return True


__all__ = ["SHARD_STATE", "ShardedMemoryTraining", "shard_for_training"]
