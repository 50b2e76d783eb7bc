"""The Trainer's model card: :class:`KeplmModelCardData` holds what the card says beyond the model itself (the
caller's facts, given when the Trainer is built, and the run's, recorded as training happens by
:class:`KeplmCardCallback`, which :class:`~keplm.training.trainer.KeplmTrainer` adds to itself); the Trainer's
``create_model_card`` renders the card from it with :func:`keplm.hub.card.build_model_card`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.modelcard import extract_hyperparameters_from_trainer

from keplm.hub.card import (
    CardFacts,
    _device_name,
    add_figures,
    knowledge_hyperparameters,
    method_card,
    render_model_card,
    spec_from_model,
)
from keplm.metric_units import METRIC_UNIT, METRIC_UNIT_KEY

logger = logging.getLogger(__name__)

#: recorded metric keys the card shows: a split's scores and sizes, not its speed
CARD_METRIC_PREFIXES = ("eval_", "predict_", "test_", "train_")
SPEED_SUFFIXES = ("runtime", "per_second", "_flos")


@dataclass
class KeplmModelCardData:
    """What a keplm card says beyond the model: facts the caller gives (base model, dataset, command, the run's
    knowledge arguments, the project's :class:`~keplm.hub.card.CardFacts` or the path of their JSON file) and the
    facts :class:`KeplmCardCallback` records during training (hyper-parameters, device, steps, metrics, log)."""

    # given by the caller (the run scripts)
    base_model: str | None = None
    base_model_id: str | None = None  # the Hub id of the card's base_model metadata (``--base_model_id``)
    dataset: str | None = None
    repo_id: str | None = None
    command: str | Sequence[str] | None = None
    license: str | None = None
    language: str | list[str] | None = None
    tags: list[str] = field(default_factory=list)
    model_name: str | None = None
    knowledge_args: dict | None = None
    train_linked_share: float | None = None
    kg: str | None = None
    example_text: str | None = None
    card_facts: CardFacts | str | os.PathLike | None = None
    # recorded by KeplmCardCallback
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    steps: int | None = None
    epochs: float | None = None
    train_runtime: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    log_history: list[dict] = field(default_factory=list)

    def __post_init__(self):
        if self.card_facts is not None and not isinstance(self.card_facts, CardFacts):
            path = Path(self.card_facts)
            if path.is_file():
                self.card_facts = CardFacts.from_json(path)
            else:  # e.g. a run script copied out of its checkout: the card names the data by its folder
                logger.info("no card facts at %s: the model card names the data and base model by their paths", path)
                self.card_facts = None

    def record_arguments(self, trainer) -> None:
        """The hyper-parameters as transformers' own cards list them (``extract_hyperparameters_from_trainer``;
        bf16, which it leaves out, added), the knowledge options the model's method lists, and the device."""
        args = trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        model = getattr(model, "get_base_model", lambda: model)()  # a LoRA adapter: the keplm model inside
        self.hyperparameters = extract_hyperparameters_from_trainer(trainer)
        if args.bf16:
            self.hyperparameters["mixed_precision_training"] = "bf16"
        card = method_card(getattr(getattr(model, "config", None), "model_type", None))  # any nn.Module trains
        self.hyperparameters.update(knowledge_hyperparameters(self.knowledge_args, card))
        self.device = _device_name(args.device)

    def record_metrics(self, metrics: dict | None) -> None:
        """A split's metrics (``eval_*``, ``predict_*``, ...) as the card shows them: numbers, without speeds."""
        self.metrics.update(
            {
                key: value
                for key, value in (metrics or {}).items()
                if key.startswith(CARD_METRIC_PREFIXES)
                and isinstance(value, (int, float))
                and not key.endswith(SPEED_SUFFIXES)
            }
        )

    def build(self, model, processor=None, output_dir: str | os.PathLike | None = None, **overrides):
        """The card (a huggingface_hub ``ModelCard``) of ``model`` with these facts; with ``output_dir`` its figures
        are drawn into ``output_dir/figures``. ``overrides`` replace given facts (``license``, ``tags``, ...)."""
        facts = {
            name: getattr(self, name)
            for name in (
                "base_model",
                "base_model_id",
                "dataset",
                "repo_id",
                "command",
                "license",
                "language",
                "model_name",
                "knowledge_args",
                "train_linked_share",
                "kg",
                "example_text",
            )
        }
        facts.update({name: value for name, value in overrides.items() if value is not None})
        facts["tags"] = [*self.tags, *(overrides.get("tags") or [])]
        # what keplm's Trainer logs and the run scripts save is in percent (keplm.metric_units): say so to the card
        metrics = {METRIC_UNIT_KEY: METRIC_UNIT, **self.metrics}
        spec = spec_from_model(model, metrics, processor=processor, card_facts=self.card_facts, **facts)
        training = spec.training
        training.hyperparameters = dict(self.hyperparameters) or training.hyperparameters
        training.device, training.steps = self.device, self.steps or None
        training.epochs = round(float(self.epochs), 2) if self.epochs else None
        training.wall_time = f"{self.train_runtime:,.0f} s of training" if self.train_runtime else None
        if output_dir is not None:
            add_figures(spec, Path(output_dir) / "figures", output_dir, model=model, log_history=self.log_history)
        return render_model_card(spec)


class KeplmCardCallback(TrainerCallback):
    """Records the run's facts into its Trainer's :class:`KeplmModelCardData` as training happens: the training
    arguments at the start, the evaluation and prediction metrics as they come, the training time, steps and log at
    the end (a callback that holds its Trainer, as sentence-transformers' card callback does)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.card_data = trainer.card_data

    def on_train_begin(self, args, state, control, **kwargs):
        self.card_data.record_arguments(self.trainer)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.card_data.record_metrics(metrics)

    on_predict = on_evaluate

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "train_runtime" in logs:
            self.card_data.train_runtime = float(logs["train_runtime"])

    def on_train_end(self, args, state, control, **kwargs):
        self.card_data.steps = state.global_step
        self.card_data.epochs = state.epoch
        self.card_data.log_history = list(state.log_history)
