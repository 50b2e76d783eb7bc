"""A method's part of the task run scripts (``run_ner.py``, ``run_qa.py``, ``run_glue.py``).

The scripts own the data, the task's features, metrics and reports; a :class:`RunRecipe` owns what a method adds in
between: its command-line options (one dataclass, parsed beside the script's), the processor and knowledge it
prepares from the loaded splits, the model it builds for the task's Auto class, its collator, parameter groups,
card settings and data reports. A method registers its recipe in its own ``register_method`` call
(``run_recipe="package.module:Class"``, imported only when a script asks for that model type), so a new method runs
in the scripts with ``--model_type <its model_type>`` and no script names it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import ClassVar

from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from keplm.data.collator import KeplmDataCollator
from keplm.file_utils import resolve_checkpoint
from keplm.io_utils import read_json
from keplm.registration import REGISTERED_METHODS, RUN_RECIPES

from .arguments import ModelArguments, option
from .knowledge_setup import is_keplm_checkpoint

#: the task scripts' tasks and the Auto class each one trains
TASK_AUTO_CLASSES = {
    "ner": AutoModelForTokenClassification,
    "qa": AutoModelForQuestionAnswering,
    "sequence_classification": AutoModelForSequenceClassification,
    "generative_qa": AutoModelForSeq2SeqLM,
}


@dataclass
class MethodChoice:
    """The task scripts' first option group: which method trains (:func:`choose_recipe` reads it first)."""

    _argument_group_name = "method"  # the --help group

    model_type: str | None = option(
        None,
        "The method: kala, roof_transformer or an installed plug-in's model type; unset, a keplm "
        "checkpoint's own, else the script's (roof_transformer for run_glue.py, kala for the others). "
        "--help with it lists that method's options.",
    )


class RunRecipe:
    """One method's steps in a task script. Subclasses set :attr:`arguments` and :attr:`tasks` and implement
    :meth:`prepare` and :meth:`build_model`; every other hook has a neutral default."""

    #: the dataclass of the method's options (``HfArgumentParser`` fields)
    arguments: ClassVar[type]
    #: the tasks of :data:`TASK_AUTO_CLASSES` the method trains
    tasks: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model_type: str, model_args: ModelArguments, method_args, task: str):
        if task not in self.tasks:
            raise ValueError(
                f"model type {model_type!r} does not train the {task} task (its run recipe "
                f"{type(self).__name__} trains {list(self.tasks)})"
            )
        self.model_type, self.model_args, self.args, self.task = model_type, model_args, method_args, task

    @property
    def model_class(self) -> type:
        """The method's model class for the task, as registered with the task's Auto class."""
        auto = TASK_AUTO_CLASSES[self.task].__name__
        models = REGISTERED_METHODS[self.model_type][1]
        if auto not in models:
            raise ValueError(f"model type {self.model_type!r} registered no model for {auto}")
        return models[auto]

    def is_checkpoint(self) -> bool:
        """Whether ``--model_name_or_path`` is a saved keplm model (else a base encoder)."""
        return is_keplm_checkpoint(self.model_args.model_name_or_path, **self.model_args.hub_kwargs())

    # ------------------------------------------------------------------ steps every method implements
    def prepare(self, raw, text_columns: list[str], num_proc: int | None = None):
        """``(processor, raw)``: the method's processor and the splits with the knowledge its features read."""
        raise NotImplementedError

    def build_model(self, processor, **config_kwargs):
        """The model for the task: a new one around the base encoder, or the keplm checkpoint."""
        raise NotImplementedError

    # ------------------------------------------------------------------ optional steps
    def finish(self, processor, model):
        """The processor the run saves and featurises with, once the model is built."""
        return processor

    def reads_knowledge(self, model) -> bool:
        """Whether the features carry the knowledge inputs."""
        return bool(model.config.uses_knowledge)

    def feature_options(self, processor, data_args) -> dict:
        """Extra arguments of the processor's ``prepare_*_features`` function."""
        return {}

    def collator(self, processor, model, data_args):
        return KeplmDataCollator.from_processor(processor, model, pad_to_multiple_of=data_args.pad_to_multiple_of)

    def before_training(self, model, features: dict, collator, training_args) -> None:
        """Anything the method does to the model before the first step."""

    def parameter_group_options(self, training_args) -> dict:
        """Options of the model's ``parameter_groups`` (the KeplmTrainer's optimizer groups)."""
        return {}

    def card_options(self, raw, model, group_options: dict) -> dict:
        """Extra ``KeplmModelCardData`` fields."""
        return {}

    def data_results(self, processor, raw, features: dict, model) -> dict:
        """Flat numbers about the data and its knowledge, for the results JSON."""
        return {}

    def split_results(self, raw, split: str, prefix: str) -> dict:
        """Flat numbers about one split (``{prefix}_...``), added to its training or prediction results."""
        return {}

    def unseen_entity_counts(self, raw, split: str) -> list[int] | None:
        """Per example of ``split``, its entities unseen in training (KALA 5.4's subsets), or None."""
        return None


def recipe_class(model_type: str) -> type[RunRecipe]:
    """The run recipe a method registered (``register_method(..., run_recipe=...)``), imported on first use."""
    if model_type not in RUN_RECIPES:
        trainable = sorted(RUN_RECIPES)
        raise ValueError(f"model type {model_type!r} has no run recipe: the task scripts train {trainable}")
    recipe = RUN_RECIPES[model_type]
    if isinstance(recipe, str):
        module, _, name = recipe.partition(":")
        recipe = getattr(importlib.import_module(module), name)
        RUN_RECIPES[model_type] = recipe
    return recipe


def choose_recipe(args: list[str] | dict | None, default: str) -> tuple[str, type[RunRecipe]]:
    """``(model_type, recipe class)``: ``--model_type`` (:class:`MethodChoice`, or ``"model_type"`` in a JSON settings
    file or dict), else the type of a keplm checkpoint passed as ``--model_name_or_path``, else ``default``. The
    arguments stay whole for the script's full parser (-h included: every option of that method)."""
    if isinstance(args, dict):
        settings = args
    else:
        argv = sys.argv[1:] if args is None else list(args)
        settings = read_json(argv[0]) if len(argv) == 1 and argv[0].endswith(".json") else None
    if settings is not None:
        model_type, path, hub_kwargs = settings.get("model_type"), settings.get("model_name_or_path"), {}
    else:
        # only what picks the method
        parser = argparse.ArgumentParser(add_help=False)
        for option in ("--model_type", "--model_name_or_path", "--cache_dir", "--token"):
            parser.add_argument(option)
        parser.add_argument("--model_revision", default="main")
        known, _ = parser.parse_known_args(argv)
        model_type, path = known.model_type, known.model_name_or_path
        hub_kwargs = {"revision": known.model_revision, "token": known.token, "cache_dir": known.cache_dir}
    if model_type is None and path:
        path = resolve_checkpoint(path)
        if is_keplm_checkpoint(path, **hub_kwargs):
            model_type = AutoConfig.from_pretrained(path, **hub_kwargs).model_type
    return model_type or default, recipe_class(model_type or default)


__all__ = ["TASK_AUTO_CLASSES", "MethodChoice", "RunRecipe", "choose_recipe", "recipe_class"]
