"""The KeplmTrainer's checkpoint state without pickles: optimizer, scheduler, RNG and gradient-scaler states as
safetensors + JSON (``keplm.training.state``) instead of ``torch.save``; a mixin over ``transformers.Trainer``.

Under DeepSpeed the engine writes the model and optimizer partitions (its own format, which resuming needs); the
scheduler and RNG states are still keplm's. Under FSDP through accelerate and on XLA the stock Trainer's files stay.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME

from .state import has_state, load_state, require_state, save_state


class PicklessCheckpointState:
    """Mixin of :class:`keplm.training.trainer.KeplmTrainer` (its ``Trainer`` methods come after it in the MRO)."""

    def _plain_checkpoints(self) -> bool:
        """Whether the checkpoint state is the Trainer's own (not DeepSpeed's, FSDP's or XLA's, which keep theirs)."""
        from transformers.utils import is_torch_xla_available

        return not (self.is_deepspeed_enabled or self.is_fsdp_enabled or is_torch_xla_available())

    def _rng_is_ours(self) -> bool:
        """Whether keplm writes the RNG states (every engine but XLA, whose Trainer path keeps its own)."""
        from transformers.utils import is_torch_xla_available

        return not is_torch_xla_available()

    def _scheduler_is_ours(self) -> bool:
        """Under DeepSpeed, whether the Trainer's scheduler is one DeepSpeed does not save with its checkpoint."""
        from accelerate.utils import DeepSpeedSchedulerWrapper

        return self.is_deepspeed_enabled and not isinstance(self.lr_scheduler, DeepSpeedSchedulerWrapper)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """Optimizer and scheduler states as safetensors + JSON (``keplm.training.state``), not ``torch.save``.
        Under DeepSpeed its engine writes the model and optimizer partitions itself (its own files, which resuming
        needs); the scheduler is written here."""
        if self.is_deepspeed_enabled:
            self.model_wrapped.save_checkpoint(output_dir)
            if self._scheduler_is_ours() and self.args.should_save:
                save_state(self.lr_scheduler.state_dict(), output_dir, "scheduler")
            return
        if not self._plain_checkpoints():
            return super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            save_state(self.optimizer.state_dict(), output_dir, "optimizer")
            save_state(self.lr_scheduler.state_dict(), output_dir, "scheduler")

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None:
            return
        if self.is_deepspeed_enabled and self._scheduler_is_ours() and has_state(checkpoint, "scheduler"):
            self.lr_scheduler.load_state_dict(load_state(checkpoint, "scheduler"))  # the engine loaded the rest
            return
        if not (self._plain_checkpoints() and require_state(checkpoint, "optimizer", (OPTIMIZER_NAME, SCHEDULER_NAME))):
            return super()._load_optimizer_and_scheduler(checkpoint)  # a checkpoint saved by the stock Trainer
        self.optimizer.load_state_dict(load_state(checkpoint, "optimizer"))
        self.lr_scheduler.load_state_dict(load_state(checkpoint, "scheduler"))

    def _rng_state_name(self) -> str:
        return "rng_state" if self.args.world_size <= 1 else f"rng_state_{self.args.process_index}"

    def _save_rng_state(self, output_dir: str) -> None:
        """Python, numpy, torch CPU (and CUDA) generator states, without pickles. Distributed, every process's states
        are gathered and written by the processes that save the checkpoint, so one machine's checkpoint folder
        resumes every process when the machines share no disk (the stock Trainer leaves each process's file on its
        own machine)."""
        if not self._rng_is_ours():
            return super()._save_rng_state(output_dir)
        states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
        if torch.cuda.is_available():
            states["cuda"] = (
                torch.cuda.random.get_rng_state_all() if self.args.world_size > 1 else torch.cuda.random.get_rng_state()
            )
        if self.args.world_size <= 1 or not torch.distributed.is_initialized():
            save_state(states, output_dir, self._rng_state_name())
            return
        every = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, states)
        if self.args.should_save:
            for index, process_states in enumerate(every):
                save_state(process_states, output_dir, f"rng_state_{index}")

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is None or not self._rng_is_ours():
            return super()._load_rng_state(checkpoint)
        if self.args.world_size > 1:  # the saving run may have had another process count: the stock Trainer warns
            ours = has_state(checkpoint, self._rng_state_name())
        else:  # one process: its RNG state must be there
            ours = require_state(checkpoint, self._rng_state_name(), ("rng_state.pth",))
        if not ours:
            return super()._load_rng_state(checkpoint)
        states = load_state(checkpoint, self._rng_state_name())
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        torch.random.set_rng_state(states["cpu"])
        if torch.cuda.is_available() and "cuda" in states:
            if isinstance(states["cuda"], list):
                torch.cuda.random.set_rng_state_all(states["cuda"])
            else:
                torch.cuda.random.set_rng_state(states["cuda"])

    def _save_scaler(self, output_dir: str) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is None or not self._plain_checkpoints():
            return super()._save_scaler(output_dir)
        if self.args.should_save:
            save_state(scaler.state_dict(), output_dir, "scaler")

    def _load_scaler(self, checkpoint: str | None) -> None:
        if checkpoint is not None and has_state(checkpoint, "scaler") and self._plain_checkpoints():
            self.accelerator.scaler.load_state_dict(load_state(checkpoint, "scaler"))
            return
        return super()._load_scaler(checkpoint)


__all__ = ["PicklessCheckpointState"]
