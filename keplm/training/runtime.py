"""Logging and TrainingArguments defaults shared by the run scripts."""

from __future__ import annotations

import logging
import sys

import datasets
import transformers
from transformers import TrainingArguments

logger = logging.getLogger(__name__)


def setup_logging(training_args: TrainingArguments) -> None:
    """HF example-script logging: INFO on the main process, warnings elsewhere."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:  # as HF's scripts: INFO on the main process unless --log_level says otherwise
        transformers.utils.logging.set_verbosity_info()
    level = training_args.get_process_log_level()
    logging.getLogger("keplm").setLevel(level)
    logger.setLevel(level)
    logging.getLogger("__main__").setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


def finish_training_args(training_args: TrainingArguments) -> TrainingArguments:
    """Defaults that suit KALA models, applied only where the user left the Trainer's choice open.

    ``ddp_find_unused_parameters``: every parameter of a KALA model takes part in every step — the entity
    memory, relational retrieval and KFM stay in the autograd graph even for a batch without any entity
    (they contribute ``0 * sum``) — so DDP does not need the extra graph traversal that ``True`` costs.
    """
    if training_args.ddp_find_unused_parameters is None:
        training_args.ddp_find_unused_parameters = False
    logger.info(
        "device %s, %d process(es), distributed=%s, find_unused_parameters=%s", training_args.device,
        training_args.world_size, training_args.parallel_mode.value, training_args.ddp_find_unused_parameters,
    )
    return training_args


__all__ = ["setup_logging", "finish_training_args"]
