"""Every private ``transformers.Trainer`` method keplm's Trainer overrides, in one mixin (docs/architecture.md,
"Decision"): each is a thin adapter onto a keplm method, and ``tests/test_trainer_overrides.py`` fails, naming the
method, when transformers renames one, drops it or changes its parameters. What they serve:

* checkpoints without pickles: optimizer, scheduler, RNG and gradient-scaler states as safetensors + JSON
  (``keplm.training.state``) instead of ``torch.save``, which only the private ``_save_*`` / ``_load_*`` methods
  write; a model's own training state (TRELM's memory bank) rides along with the optimizer's. Under DeepSpeed the
  engine writes the model and optimizer partitions (its own format, which resuming needs); the scheduler and RNG
  states are still keplm's. Under FSDP through accelerate and on XLA the stock Trainer's files stay;
* gradient clipping and the logged norm over sparse and row-sharded gradients (the stock loop clips before
  ``on_pre_optimizer_step``, so no callback can);
* evaluation in dataset order (``_get_eval_sampler``);
* checkpoint pushes without pickles, ``knowledge/`` included (``_push_from_checkpoint`` -> ``push_checkpoint``).
"""

from __future__ import annotations

import random

import numpy as np
import torch

# from its module: accelerate.utils exports it only where deepspeed is installed
from accelerate.utils.deepspeed import DeepSpeedSchedulerWrapper
from torch.utils.data import SequentialSampler
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
from transformers.trainer_utils import has_length
from transformers.utils import is_torch_xla_available

from .optim import clip_grad_norm_sparse_
from .state import has_state, load_state, require_state, save_state


def unwrap(model):
    """The keplm model inside DDP / ``torch.compile`` / peft wrappers."""
    while True:
        if callable(getattr(model, "get_base_model", None)):  # a peft PeftModel (LoRA)
            model = model.get_base_model()
            continue
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None:
            return model
        model = inner


class TrainerOverrides:
    """Mixin of :class:`keplm.training.trainer.KeplmTrainer`, last before ``Trainer`` in its MRO: the only keplm class
    that defines private ``Trainer`` methods. The keplm methods they call (``save_optimizer_state``,
    ``load_optimizer_state``, ``clip_gradients``) are defined here and extended by the mixins before it
    (:class:`~keplm.training.sharded_training.ShardedMemoryTraining`); ``push_checkpoint`` by the Trainer."""

    # ------------------------------------------------------------ the private methods
    def _get_eval_sampler(self, eval_dataset):
        """Evaluation and prediction in dataset order: word-level NER scores and QA post-processing read outputs by
        position, and the stock Trainer groups evaluation by length when training does."""
        if eval_dataset is None or not has_length(eval_dataset):
            return None
        return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def _clip_grad_norm(self, model):
        norm = self.clip_gradients(model, self.args.max_grad_norm)
        return super()._clip_grad_norm(model) if norm is None else norm

    def _get_grad_norm(self, model, grad_norm=None):
        """The logged norm; without clipping (``--max_grad_norm 0``) keplm's where the stock one cannot serve (with
        row-sharded tables it would be each process's own)."""
        if grad_norm is None:
            grad_norm = self.clip_gradients(model, float("inf"))
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        self.push_checkpoint(checkpoint_folder)

    # ------------------------------------------------------------ what keplm does in their place
    def clip_gradients(self, model, max_norm: float):
        """The gradients' total L2 norm, clipped to ``max_norm``, where the stock clipping cannot serve: a table with
        sparse gradients (``sparse_entity_memory``), which ``torch.nn.utils.clip_grad_norm_`` cannot take (decided
        once by ``create_optimizer``, not by scanning the gradients every step); None: the stock clipping."""
        if not getattr(self, "_sparse_gradients", False):
            return None
        self.accelerator.unscale_gradients()
        return clip_grad_norm_sparse_(model.parameters(), max_norm)

    def save_optimizer_state(self, output_dir: str) -> None:
        """The optimizer's and the scheduler's states as safetensors + JSON."""
        if self.args.should_save:
            save_state(self.optimizer.state_dict(), output_dir, "optimizer")
            save_state(self.lr_scheduler.state_dict(), output_dir, "scheduler")

    def load_optimizer_state(self, checkpoint: str) -> bool:
        """Load what :meth:`save_optimizer_state` wrote; False for a checkpoint the stock Trainer saved (its pickles,
        which it loads itself). A missing or truncated file is an error naming it (``require_state``)."""
        if not require_state(checkpoint, "optimizer", (OPTIMIZER_NAME, SCHEDULER_NAME)):
            return False
        self.optimizer.load_state_dict(load_state(checkpoint, "optimizer"))
        self.lr_scheduler.load_state_dict(load_state(checkpoint, "scheduler"))
        return True

    def _plain_checkpoints(self) -> bool:
        """Whether the checkpoint state is the Trainer's own (not DeepSpeed's, FSDP's or XLA's, which keep theirs)."""
        return not (self.is_deepspeed_enabled or self.is_fsdp_enabled or is_torch_xla_available())

    def _rng_is_ours(self) -> bool:
        """Whether keplm writes the RNG states (every engine but XLA, whose Trainer path keeps its own)."""
        return not is_torch_xla_available()

    def _scheduler_is_ours(self) -> bool:
        """Under DeepSpeed, whether the Trainer's scheduler is one DeepSpeed does not save with its checkpoint."""
        return self.is_deepspeed_enabled and not isinstance(self.lr_scheduler, DeepSpeedSchedulerWrapper)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """keplm's optimizer and scheduler states (:meth:`save_optimizer_state`), then the model's own training state
        (e.g. TRELM's memory bank), which resuming needs beside the weights. Under DeepSpeed its engine writes the
        model and optimizer partitions itself; the scheduler is written here."""
        if self.is_deepspeed_enabled:
            self.model_wrapped.save_checkpoint(output_dir)
            if self._scheduler_is_ours() and self.args.should_save:
                save_state(self.lr_scheduler.state_dict(), output_dir, "scheduler")
        elif self._plain_checkpoints():
            self.save_optimizer_state(output_dir)
        else:
            super()._save_optimizer_and_scheduler(output_dir)
        keplm_model = unwrap(self.model)
        if hasattr(keplm_model, "training_state") and self.args.should_save:
            save_state(keplm_model.training_state(), output_dir, "model_training_state")

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None:
            return
        if self.is_deepspeed_enabled:
            if self._scheduler_is_ours() and has_state(checkpoint, "scheduler"):
                self.lr_scheduler.load_state_dict(load_state(checkpoint, "scheduler"))  # the engine loaded the rest
            else:
                super()._load_optimizer_and_scheduler(checkpoint)
        elif not (self._plain_checkpoints() and self.load_optimizer_state(checkpoint)):
            super()._load_optimizer_and_scheduler(checkpoint)  # a checkpoint saved by the stock Trainer
        keplm_model = unwrap(self.model)
        if not hasattr(keplm_model, "load_training_state"):
            return
        if not has_state(checkpoint, "model_training_state"):
            raise FileNotFoundError(
                f"{checkpoint} has no model_training_state (the training state of {type(keplm_model).__name__}, "
                "e.g. TRELM's memory bank): it was not saved by keplm's Trainer"
            )
        keplm_model.load_training_state(load_state(checkpoint, "model_training_state"))

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


__all__ = ["TrainerOverrides", "unwrap"]
