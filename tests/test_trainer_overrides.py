"""keplm's Trainer overrides private ``Trainer`` methods only where no public hook exists (docs/architecture.md,
"Decision"). This test lists them and fails loudly, naming the method, when the installed transformers renamed one,
dropped it or changed its parameters: an override of a method the Trainer no longer calls would silently stop
working."""

from __future__ import annotations

import inspect

from transformers import Trainer

from keplm.training.trainer import KeplmTrainer
from keplm.training.trainer_overrides import TrainerOverrides

#: every private Trainer method keplm overrides, with the parameters (after self) keplm's override was written for
EXPECTED = {
    "_save_optimizer_and_scheduler": ["output_dir"],
    "_load_optimizer_and_scheduler": ["checkpoint"],
    "_save_rng_state": ["output_dir"],
    "_load_rng_state": ["checkpoint"],
    "_save_scaler": ["output_dir"],
    "_load_scaler": ["checkpoint"],
    "_get_grad_norm": ["model", "grad_norm"],
    "_get_eval_sampler": ["eval_dataset"],
    "_clip_grad_norm": ["model"],
    "_push_from_checkpoint": ["checkpoint_folder"],
}


def overridden_private_methods() -> dict[str, set[str]]:
    """Private (single-underscore) methods of transformers' Trainer that each keplm class in KeplmTrainer's MRO
    defines, by class name."""
    found = {}
    for cls in KeplmTrainer.__mro__:
        if cls.__module__.startswith("keplm."):
            names = {
                name
                for name, value in vars(cls).items()
                if name.startswith("_") and not name.startswith("__") and callable(value) and hasattr(Trainer, name)
            }
            if names:
                found[cls.__name__] = names
    return found


def test_the_private_overrides_are_the_listed_ones_all_in_one_mixin():
    assert overridden_private_methods() == {TrainerOverrides.__name__: set(EXPECTED)}


def test_every_overridden_private_method_still_exists_with_its_parameters():
    problems = []
    for name, parameters in EXPECTED.items():
        stock = getattr(Trainer, name, None)
        if stock is None:
            problems.append(f"Trainer.{name} is gone: keplm's override is never called")
            continue
        found = [p for p in inspect.signature(stock).parameters if p != "self"]
        if found != parameters:
            problems.append(f"Trainer.{name} now takes {found}, keplm's override was written for {parameters}")
    assert problems == []
