"""Processors, features and models for the run scripts: the steps every method's run recipe shares.

A checkpoint or a base encoder (:func:`is_keplm_checkpoint`), a checkpoint's processor with an optional knowledge
update (:func:`checkpoint_processor`), feature functions mapped over ``datasets`` under a content fingerprint
(:class:`Featurizer`, :func:`featurize`), LoRA (:func:`maybe_add_lora`) and loading for inference. Each method's own
steps are in its run recipe (``keplm.training.recipes``).
"""

from __future__ import annotations

import logging
import os

from transformers import AutoConfig

from keplm.configuration import KeplmConfig
from keplm.io_utils import fingerprinted_map
from keplm.knowledge import load_kg
from keplm.modeling.lora import add_lora, load_lora
from keplm.tokenization import KeplmProcessor

from .arguments import ModelArguments

logger = logging.getLogger(__name__)


def is_keplm_checkpoint(name_or_path: str, **hub_kwargs) -> bool:
    """Whether ``name_or_path`` is a saved keplm model rather than a base encoder."""
    try:
        return isinstance(AutoConfig.from_pretrained(name_or_path, **hub_kwargs), KeplmConfig)
    except (OSError, ValueError):
        return False


def checkpoint_processor(path: str, kg: str | None = None, **hub) -> KeplmProcessor:
    """A keplm checkpoint's processor; with ``kg`` (a ``load_kg`` spec) a knowledge update without retraining: the
    same vocabularies, the new graph (``processor.update_knowledge``; the model builders give the model the same
    assets), new entities read as unseen, through their facts."""
    processor = KeplmProcessor.from_pretrained(path, **hub)
    if kg:
        logger.info("--kg %s replaces the checkpoint's knowledge graph", kg)
        processor.update_knowledge(load_kg(kg))
    return processor


# ---------------------------------------------------------------------------------------------- features
class Featurizer:
    """A picklable ``datasets.map(batched=True)`` function: one of the processor's feature functions
    (``prepare_ner_features``, ``prepare_qa_features``) with fixed arguments. ``with_knowledge=False`` (a model
    that reads no knowledge) leaves the knowledge inputs out."""

    def __init__(self, processor: KeplmProcessor, method: str, with_knowledge: bool = True, **arguments):
        if not callable(getattr(processor, method, None)):
            raise ValueError(f"{type(processor).__name__} has no feature function {method!r}")
        self.processor, self.method, self.with_knowledge, self.arguments = processor, method, with_knowledge, arguments

    def __call__(self, examples) -> dict:
        return getattr(self.processor, self.method)(examples, with_knowledge=self.with_knowledge, **self.arguments)

    def signature(self) -> dict:
        """Everything besides the input data that determines the features (for the cache fingerprint)."""
        return {
            **self.processor.signature(),
            "method": self.method,
            "with_knowledge": self.with_knowledge,
            "arguments": self.arguments,
        }


def featurize(
    dataset, featurizer: Featurizer, num_proc: int | None = None, overwrite_cache: bool = False, desc: str | None = None
):
    """``dataset.map(featurizer, batched=True)``, dropping the raw columns, under a content-derived fingerprint."""
    return fingerprinted_map(
        dataset,
        featurizer,
        featurizer.signature(),
        num_proc=num_proc,
        overwrite_cache=overwrite_cache,
        remove_columns=dataset.column_names,
        desc=desc,
    )


def maybe_add_lora(model, model_args: ModelArguments):
    """``--lora_r``: LoRA adapters on the encoder (peft), the knowledge modules and head trained fully."""
    if model_args.lora_r is None:
        return model

    peft_model = add_lora(
        model,
        r=model_args.lora_r,
        alpha=model_args.lora_alpha,
        dropout=model_args.lora_dropout,
        target_modules=model_args.lora_target_modules,
    )
    logger.info(
        "LoRA r=%d on %s: %d of %d parameters train",
        model_args.lora_r,
        model_args.lora_target_modules,
        *peft_model.get_nb_trainable_parameters(),
    )
    return peft_model


def load_for_inference(model_dir: str, auto_class, base_model_name_or_path: str | None = None):
    """A saved model through its Auto class, or a saved LoRA adapter rebuilt on its base encoder (``load_lora``;
    ``base_model_name_or_path`` overrides the encoder the adapter names)."""
    if os.path.isfile(os.path.join(model_dir, "adapter_config.json")):
        return load_lora(model_dir, base_model_name_or_path)
    return auto_class.from_pretrained(model_dir)


__all__ = [
    "Featurizer",
    "checkpoint_processor",
    "featurize",
    "is_keplm_checkpoint",
    "load_for_inference",
    "maybe_add_lora",
]
