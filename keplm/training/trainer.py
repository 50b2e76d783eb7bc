"""The Trainer of every keplm model, and its extractive-QA variant (n-best post-processing, SQuAD v1.1 EM/F1)."""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from pathlib import Path

import torch
from transformers import EarlyStoppingCallback, Trainer
from transformers.trainer_utils import HubStrategy, SaveStrategy
from transformers.utils.hub import PushInProgress, hf_api

from keplm.file_utils import ASSETS_DIR, portable_paths
from keplm.hub.card import write_model_card
from keplm.io_utils import read_json, write_json_whole
from keplm.knowledge.assets import assets_conflict
from keplm.modeling.lora import save_lora
from keplm.push_utils import (
    LOADING_PATTERNS,
    MODEL_FILES,
    PICKLE_PATTERNS,
    PROCESSOR_FILES,
    pin_after,
)
from keplm.tokenization.processing_utils import tokenizer_fingerprint

from .engines import check_engine
from .model_card import KeplmCardCallback, KeplmModelCardData
from .optim import (
    WARMUP_KEY,
    apply_parameter_groups,
    schedule_with_group_warmups,
    sparse_parameters,
)
from .sharded_training import ShardedMemoryTraining, shard_for_training
from .trainer_overrides import TrainerOverrides, unwrap

logger = logging.getLogger(__name__)


def upload_model_folder(folder: str, repo_id: str, commit_message: str, token, revision, blocking: bool):
    """One commit of ``folder``'s model files (:data:`~keplm.push_utils.LOADING_PATTERNS`, no pickle) to ``repo_id``,
    replacing the repo's model and processor files (the repo serves this push); a future unless ``blocking``."""
    return hf_api().upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        commit_message=commit_message,
        token=token,
        run_as_future=not blocking,
        allow_patterns=list(LOADING_PATTERNS),
        ignore_patterns=list(PICKLE_PATTERNS),
        delete_patterns=list(dict.fromkeys(MODEL_FILES + PROCESSOR_FILES)),
        revision=revision,
    )


class KeplmTrainer(ShardedMemoryTraining, TrainerOverrides, Trainer):
    """``Trainer`` for keplm models; what it adds to the stock one:

    * **Parameter groups from the model.** ``create_optimizer`` asks the model's
      :meth:`~keplm.modeling.base.KeplmPreTrainedModel.parameter_groups` (with ``parameter_group_options``, e.g.
      KALA's ``knowledge_learning_rate``) which parameters train at another learning rate (a group of the
      Trainer's optimizer, split by weight decay like the stock groups) or with an optimizer of their own
      (``keplm.training.optim``); the Trainer knows no module name.
    * **Schedule**: a parameter group with a warm-up of its own (``ParameterGroup.warmup_steps``) gets it in the
      stock schedule type. **Early stopping**: ``KeplmTrainingArguments.early_stopping_patience`` adds
      transformers' ``EarlyStoppingCallback``.
    * **DDP**: ``ddp_find_unused_parameters`` left open is the model's answer (``model.ddp_find_unused_parameters``).
      ``--shard_entity_memory`` splits the model's entity memories by rows over the processes
      (:mod:`keplm.training.sharded_training`: clipping by the global norm, gathered saves, per-process optimizer
      state of the rows in checkpoints).
    * **Evaluation order**: evaluation/prediction batches follow the dataset order (the stock ``Trainer`` groups
      them by length under ``train_sampling_strategy="group_by_length"``, which permutes per-example outputs).
    * **No pickles**: the training arguments are saved as ``training_args.json``, not ``training_args.bin``, and
      checkpoints keep the optimizer, scheduler, RNG and scaler states as safetensors + JSON
      (:mod:`keplm.training.state`), so ``--resume_from_checkpoint`` restores a run exactly without unpickling.
    * **Model card**: ``create_model_card`` (called by ``push_to_hub`` and every checkpoint push, so the first
      upload has it) writes keplm's card from the model's config and knowledge assets and ``card_data``
      (:class:`~keplm.training.model_card.KeplmModelCardData`: the base model, dataset and command the caller
      gives, the hyper-parameters, metrics and log that :class:`~keplm.training.model_card.KeplmCardCallback`
      records as training happens).
    * The processor (``processing_class``) is checked against the model (``processor.check_model``).
    * **Model hooks** (used by TRELM): ``model.before_training_step(inputs, state, optimizer)`` runs before every
      training step (knowledge routing); the losses the model names in ``logged_losses`` (output fields, e.g.
      ``mlm_loss`` and ``cka_loss``) are logged beside the total, averaged like it; ``model.training_state()`` /
      ``load_training_state`` (e.g. the memory bank) are kept in every checkpoint (safetensors + JSON) and
      restored on resume.
    """

    #: the schedule with per-group warm-ups :meth:`create_scheduler` built (None: the stock one or the caller's)
    group_warmup_scheduler = None

    def __init__(
        self,
        *args,
        parameter_group_options: dict | None = None,
        card_data: KeplmModelCardData | dict | None = None,
        **kwargs,
    ):
        model = kwargs.get("model", args[0] if args else None)
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None:  # --shard_entity_memory: before accelerate wraps the model in DDP
            shard_for_training(model, training_args)
        answer = getattr(model, "ddp_find_unused_parameters", None)
        if training_args is not None and training_args.ddp_find_unused_parameters is None and answer is not None:
            training_args.ddp_find_unused_parameters = answer
        super().__init__(*args, **kwargs)
        check_engine(self)  # FSDP / DeepSpeed asked for but not what accelerate runs: an error, not plain DDP
        logger.info(
            "device %s, %d process(es), distributed=%s, find_unused_parameters=%s%s",
            self.args.device,
            self.args.world_size,
            self.args.parallel_mode.value,
            self.args.ddp_find_unused_parameters,
            " (the model's answer)" if answer is not None else "",
        )
        processor = self.processing_class
        if model is not None and hasattr(processor, "check_model"):
            processor.check_model(unwrap(model))
            config = unwrap(model).config
            if hasattr(config, "tokenizer_hash") and config.tokenizer_hash is None:  # saved with the model from now on
                config.tokenizer_hash = tokenizer_fingerprint(processor.tokenizer)
        patience = getattr(self.args, "early_stopping_patience", None)  # KeplmTrainingArguments
        if patience is not None:
            self.add_callback(EarlyStoppingCallback(patience, self.args.early_stopping_threshold))
        self.parameter_group_options = dict(parameter_group_options or {})
        # the card's facts: the caller's, and the run's as KeplmCardCallback records them
        self.card_data = (
            card_data if isinstance(card_data, KeplmModelCardData) else KeplmModelCardData(**(card_data or {}))
        )
        self.add_callback(KeplmCardCallback(self))
        self._losses_finite = None  # every training step's loss finite since the last log (a device tensor)
        self._extra_logs = {}  # the model's numbers since the last log: before_training_step reports, logged_losses
        self._sparse_gradients = False  # set by create_optimizer: whether any trained table has sparse gradients
        self._has_sharded_tables = bool(self._sharded_tables())  # row-sharded entity memories: decided once

    def train(self, *args, **kwargs):
        """The stock ``train``, after checking that ``output_dir`` holds no other run's knowledge assets that the
        processor's save would have to refuse (a baseline trained into a knowledge model's folder): the run fails now,
        not after training."""
        config, processor = getattr(unwrap(self.model), "config", None), self.processing_class
        if (
            self.args.should_save
            and not getattr(config, "uses_knowledge_assets", False)
            and hasattr(processor, "knowledge_assets")
        ):
            conflict = assets_conflict(self.args.output_dir, processor.knowledge_assets)
            if conflict is not None:
                raise ValueError(
                    f"output_dir {self.args.output_dir} holds another run's model ({conflict}): this run "
                    "would fail when it saves its processor after training; use another output_dir or "
                    "empty this one"
                )
        return super().train(*args, **kwargs)

    def create_optimizer(self, model=None):
        """The stock optimizer, with the model's parameter groups moved into groups (or optimizers) of their own."""
        if self.optimizer is not None:
            return self.optimizer
        model = self.model if model is None else model
        optimizer = super().create_optimizer(model)
        keplm_model = unwrap(model)
        hook = getattr(keplm_model, "parameter_groups", None)
        if hook is None:
            if self.parameter_group_options:
                raise ValueError(
                    f"{type(keplm_model).__name__} has no parameter groups for the options "
                    f"{sorted(self.parameter_group_options)}"
                )
            return optimizer
        groups = hook(self.args.learning_rate, **self.parameter_group_options)
        self._check_groups_fit_engine(keplm_model, groups)
        self.optimizer = apply_parameter_groups(
            optimizer,
            groups,
            self.args.learning_rate,
            (self.args.adam_beta1, self.args.adam_beta2),
            self.args.adam_epsilon,
            self.args.weight_decay,
        )
        self._sparse_gradients = bool(sparse_parameters(keplm_model))
        return self.optimizer

    def _check_groups_fit_engine(self, model, groups) -> None:
        """A ValueError when FSDP or DeepSpeed runs and a parameter group has an optimizer of its own or a parameter
        has sparse gradients: FSDP2 turns every parameter into a sharded DTensor, which these optimizers cannot step
        (and its optimizer checkpoints hold only the Trainer's optimizer); DeepSpeed drives one optimizer of its own
        over dense gradients. Without the check the run fails at its first step, or loses the group's state."""
        engine = "FSDP" if self.is_fsdp_enabled else "DeepSpeed" if self.is_deepspeed_enabled else None
        if engine is None:
            return
        blockers = model.sharding_blockers(engine) if hasattr(model, "sharding_blockers") else []
        if blockers:
            raise ValueError(f"{type(model).__name__} cannot train under {engine}: {'; '.join(blockers)}")
        own = next((group for group in groups if group.optimizer is not None and group.parameters), None)
        sparse = {id(p) for p in sparse_parameters(model)}
        if own is None and not sparse:
            return
        why = (
            "FSDP2 holds every parameter as a sharded DTensor, which this optimizer cannot step, and FSDP's "
            "optimizer checkpoints hold only the Trainer's optimizer"
            if engine == "FSDP"
            else "DeepSpeed drives one optimizer of its own over dense gradients"
        )
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(self.parameter_group_options.items())) or "none"
        if own is None:
            what = "embedding tables with sparse gradients (nn.Embedding(sparse=True))"
        else:
            how = "has sparse gradients and an optimizer" if sparse else "trains with an optimizer"
            what = f"parameter group {own.name!r} {how} of its own ({own.optimizer!r})"
        names = [name for name, p in model.named_parameters() if id(p) in sparse]
        raise ValueError(
            f"{what} cannot train under {engine}: {why}. Train it with the Trainer's optimizer instead: change the "
            f"run options that chose this (parameter-group options: {options})"
            + (f" and build the model with dense tables instead of sparse ones ({', '.join(names)})" if names else "")
            + f", or train without {engine}."
        )

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """The stock schedule; when a parameter group has a warm-up of its own (``ParameterGroup.warmup_steps``,
        e.g. KALA's ``knowledge_warmup_steps``), the same schedule type with one warm-up per group."""
        optimizer = self.optimizer if optimizer is None else optimizer
        given = self.lr_scheduler is not None and self.lr_scheduler is not self.group_warmup_scheduler  # the caller's
        if given or not any(WARMUP_KEY in g for g in optimizer.param_groups):
            return super().create_scheduler(num_training_steps, optimizer)
        self.lr_scheduler = schedule_with_group_warmups(
            optimizer,
            self.args.lr_scheduler_type,
            num_training_steps,
            self.args.get_warmup_steps(num_training_steps),
            self.args.lr_scheduler_kwargs,
        )
        self.group_warmup_scheduler = self.lr_scheduler  # rebuilt, not reused, by the next train()'s call
        return self.lr_scheduler

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The stock save (with sharded tables, :class:`ShardedMemoryTraining`'s), then what keplm adds: a LoRA
        model's adapter with its config and assets, and the training arguments as JSON instead of the pickled
        ``training_args.bin`` (checkpoints hold no pickles). Checkpoints are saved through here too."""
        super().save_model(output_dir, _internal_call)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        if callable(getattr(self.model, "get_base_model", None)):
            # pushed runs name their Hub repo as the adapter's base model, so that the Auto classes load the repo
            save_lora(self.model, output_dir, repo_id=self.hub_model_id if self.args.push_to_hub else None)
        Path(output_dir, "training_args.bin").unlink(missing_ok=True)
        self._write_training_args(output_dir)

    def _write_training_args(self, output_dir: str) -> None:
        """``training_args.json``: the arguments as JSON (not a pickle), absolute paths made portable."""
        arguments = portable_paths(json.loads(self.args.to_json_string()))
        Path(output_dir, "training_args.json").write_text(json.dumps(arguments, indent=2), encoding="utf-8")

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **kwargs,
    ):
        """As the stock ``Trainer.push_to_hub`` (save, keplm's model card, one upload of ``output_dir`` in one
        commit, nested ``knowledge/`` included), but no pickle is ever uploaded; a LoRA run's adapter gets a second
        commit that pins its base files (:func:`keplm.push_utils.pin_adapter_base`), whose ``CommitInfo`` (or
        future) is returned."""
        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        model_name = kwargs.pop("model_name", None)
        if model_name is None and self.args.should_save:
            model_name = (self.args.hub_model_id or Path(self.args.output_dir).name).split("/")[-1]
        token = token if token is not None else self.args.hub_token
        if self.hub_model_id is None:
            self.init_hf_repo(token=token, private=private)
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        self.create_model_card(model_name=model_name, **kwargs)
        if self.push_in_progress is not None and not self.push_in_progress.is_done():  # the checkpoint push first
            self.push_in_progress.wait_until_done()
        revision = revision if revision is not None else self.args.hub_revision
        commit = upload_model_folder(self.args.output_dir, self.hub_model_id, commit_message, token, revision, blocking)
        return pin_after(commit, self.args.output_dir, self.hub_model_id, token, revision, blocking)  # a LoRA adapter

    def push_checkpoint(self, checkpoint_folder: str) -> None:
        """As the stock checkpoint push (``Trainer._push_from_checkpoint``, ``hub_strategy``): the saved model, its
        ``knowledge/`` and the processor are copied to ``output_dir`` and uploaded in the background, with the
        training arguments as JSON; files that are pickles (the stock optimizer/scheduler/RNG state) are not
        uploaded."""
        if not self.is_world_process_zero() or self.args.hub_strategy == HubStrategy.END:
            return
        if not self.args.hub_always_push and self.push_in_progress is not None and not self.push_in_progress.is_done():
            return
        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        output_dir = self.args.output_dir
        for name in os.listdir(checkpoint_folder):
            source = os.path.join(checkpoint_folder, name)
            if name == ASSETS_DIR:
                shutil.copytree(source, os.path.join(output_dir, name), dirs_exist_ok=True)
            elif any(fnmatch.fnmatch(name, pattern) for pattern in LOADING_PATTERNS if "/" not in pattern):
                shutil.copy(source, os.path.join(output_dir, name))  # the model's files, not the training state
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        self._write_training_args(output_dir)
        self.create_model_card()  # the card goes up with the first upload, the run's facts so far
        step = (
            f"step {self.state.global_step}"
            if self.args.save_strategy == SaveStrategy.STEPS
            else f"epoch {int(self.state.epoch)}"
        )
        token, revision = self.args.hub_token, self.args.hub_revision
        commit = upload_model_folder(
            output_dir, self.hub_model_id, f"Training in progress, {step}", token, revision, False
        )
        # a LoRA adapter: its base files pinned once the push is done
        pinned = pin_after(commit, output_dir, self.hub_model_id, token, revision, False)
        jobs = [commit] if pinned is commit else [commit, pinned]
        if self.args.hub_strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            path_in_repo = (
                "last-checkpoint" if self.args.hub_strategy == HubStrategy.CHECKPOINT else Path(checkpoint_folder).name
            )
            jobs.append(
                hf_api().upload_folder(
                    repo_id=self.hub_model_id,
                    folder_path=checkpoint_folder,
                    path_in_repo=path_in_repo,
                    commit_message=f"Training in progress, {step}, checkpoint",
                    token=token,
                    ignore_patterns=list(PICKLE_PATTERNS),
                    run_as_future=True,
                    revision=revision,
                )
            )
        if self.push_in_progress is None or self.push_in_progress.is_done():
            self.push_in_progress = PushInProgress(jobs)
        else:
            self.push_in_progress.jobs.extend(jobs)

    # ---------------------------------------------------------------- model hooks
    def training_step(self, model, inputs, num_items_in_batch=None):
        hook = getattr(unwrap(model), "before_training_step", None)
        if hook is not None:
            report = hook(inputs, self.state, self.optimizer) or {}
            for key, value in report.items():
                self._extra_logs.setdefault(key, []).append(float(value))
        loss = super().training_step(model, inputs, num_items_in_batch)
        # non-finite losses are remembered on the device (no sync per step) and reported at the next log
        finite = torch.isfinite(loss.detach()).all()
        self._losses_finite = finite if self._losses_finite is None else self._losses_finite & finite
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        names = getattr(unwrap(model), "logged_losses", ())
        if not names or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss, outputs = super().compute_loss(model, inputs, True, num_items_in_batch)
        for name in names:
            value = getattr(outputs, name, None)
            if value is not None:
                self._extra_logs.setdefault(name, []).append(float(value.detach()))
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict, start_time: float | None = None) -> None:
        finite, self._losses_finite = self._losses_finite, None
        if finite is not None and not bool(finite):  # the Trainer's logging_nan_inf_filter would hide it
            raise FloatingPointError(
                f"the training loss became NaN or infinite before step {self.state.global_step} (learning rate "
                f"{self.args.learning_rate:g}): check the inputs (e.g. non-finite KG vectors) or lower the learning "
                "rate"
            )
        if "loss" in logs and self._extra_logs:  # training logs: the model's own losses beside it
            logs = {**logs, **{name: round(sum(v) / len(v), 4) for name, v in self._extra_logs.items() if v}}
            self._extra_logs = {}
        super().log(logs, start_time)

    def save_metrics(self, split, metrics, combined=True):
        """As the stock ``save_metrics`` (``{split}_results.json``, merged into ``all_results.json``, by process 0),
        each file written whole (:func:`keplm.io_utils.write_json_whole`: a kill mid-write leaves the earlier file,
        not a truncated one); the card records them too (the run scripts' own numbers: split sizes, subsets)."""
        if self.is_world_process_zero():
            write_json_whole(Path(self.args.output_dir, f"{split}_results.json"), metrics, indent=4, sort_keys=True)
            if combined:
                path = Path(self.args.output_dir, "all_results.json")
                merged = {**(read_json(path) if path.is_file() else {}), **metrics}
                write_json_whole(path, merged, indent=4, sort_keys=True)
        self.card_data.record_metrics(metrics)

    def create_model_card(
        self,
        language=None,
        license=None,
        tags=None,
        model_name=None,
        finetuned_from=None,
        tasks=None,
        dataset_tags=None,
        dataset=None,
        dataset_args=None,
        **kwargs,
    ):
        """Write keplm's model card: ``README.md`` in ``output_dir`` and its figures in ``output_dir/figures/``
        (PNG, when matplotlib is installed), which ``push_to_hub`` uploads with the model.

        The card is read from the model (config, knowledge assets, Auto class, KFM weights for the figures), the
        processor and :attr:`card_data` (:class:`~keplm.training.model_card.KeplmModelCardData`): what the caller
        gave (the base model, the dataset, the command, the run's knowledge arguments, the project's card facts)
        and what :class:`~keplm.training.model_card.KeplmCardCallback` recorded (hyper-parameters, device, steps,
        log history, the metrics of ``evaluate``/``predict`` and ``save_metrics``). The arguments of transformers'
        ``Trainer.create_model_card`` keep their meaning where keplm has one (``language``, ``license``, ``tags``,
        ``model_name``, ``finetuned_from`` = the base model's Hub id, ``dataset`` = a dataset id or path);
        ``tasks``, ``dataset_tags`` and ``dataset_args`` are derived instead.
        """
        if not self.is_world_process_zero():
            return

        if not self.card_data.hyperparameters:  # no training ran: the arguments as they stand
            self.card_data.record_arguments(self)
        if model_name == os.path.basename(os.path.normpath(self.args.output_dir)):
            model_name = None  # push_to_hub's default name, the output folder's: the card titles itself instead
        card = self.card_data.build(
            self.accelerator.unwrap_model(self.model),  # DDP / compile unwrapped; a peft model kept: an adapter card
            self.processing_class,
            self.args.output_dir,
            language=language,
            license=license,
            tags=[tags] if isinstance(tags, str) else tags,
            model_name=model_name,
            base_model=finetuned_from,
            base_model_id=getattr(self.args, "base_model_id", None),
            dataset=dataset if isinstance(dataset, str) else None,
            repo_id=self.hub_model_id or self.args.hub_model_id,
        )
        write_model_card(self.args.output_dir, card)


__all__ = ["KeplmTrainer", "unwrap"]
