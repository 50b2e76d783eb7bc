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





# ---------------------------------------------------------------------------------------------- script steps
SPLIT_FLAGS = (("train", "do_train"), ("validation", "do_eval"), ("test", "do_predict"))


def check_splits(raw, training_args: TrainingArguments) -> None:
    """Every requested stage (--do_train/--do_eval/--do_predict) has its split."""
    for split, flag in SPLIT_FLAGS:
        if getattr(training_args, flag) and split not in raw:
            raise ValueError(f"--{flag} needs a {split} split; the data has {list(raw)}")


def build_features(raw, make_featurizer, data_args, training_args: TrainingArguments, splits=None) -> dict:
    """``{split: features}`` for the requested splits; ``make_featurizer(split)`` gives the map function."""
    from .knowledge_setup import featurize

    features = {}
    for split, flag in SPLIT_FLAGS:
        wanted = split in raw if splits == "all" else getattr(training_args, flag)
        if not wanted:
            continue
        with training_args.main_process_first(desc=f"{split} features"):
            features[split] = featurize(raw[split], make_featurizer(split), data_args.preprocessing_num_workers,
                                        data_args.overwrite_cache, desc=f"Linking and tokenising {split}")
        linked = sum(max(row, default=-1) >= 0 for row in features[split]["entity_token_map"])
        logger.info("%s: %d examples -> %d features, %d with an entity mention", split, len(raw[split]),
                    len(features[split]), linked)
    return features


def build_collator(processor, model, data_args, knowledge_args):
    from keplm.data.collator import KnowledgeGraphCollator

    return KnowledgeGraphCollator(
        pad_token_id=processor.pad_token_id, pad_to_multiple_of=data_args.pad_to_multiple_of,
        graph_pad_to_multiple_of=knowledge_args.graph_pad_to_multiple_of,
        max_entity_id=model.config.entity_vocab_size,
    )


def maybe_initialize_entity_memory(model, features, collator, knowledge_args, training_args) -> None:
    """``--init_entity_memory``: KALA appendix B.1, before training."""
    if knowledge_args.init_entity_memory and training_args.do_train:
        from .entity_init import initialize_entity_memory_from_encoder

        initialize_entity_memory_from_encoder(
            model.to(training_args.device), features["train"], collator, training_args.per_device_eval_batch_size,
            disable_tqdm=training_args.disable_tqdm,
        )


def record(trainer, split: str, metrics: dict) -> dict:
    """Log and save ``{split}_results.json`` (merged into ``all_results.json``), as HF's scripts."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)
    return metrics


def train_and_save(trainer, training_args: TrainingArguments, num_samples: int) -> dict:
    """Train, save the model and its processor (tokenizer + knowledge assets) to ``output_dir``."""
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model()
    metrics = record(trainer, "train", dict(train_result.metrics, train_samples=num_samples))
    trainer.save_state()
    return metrics


def write_card(trainer, model_args, data_args, results: dict, auto_class: str) -> None:
    """Generate ``README.md`` (huggingface_hub ``ModelCard``) in ``output_dir`` from the run's config, knowledge
    assets and metrics, so ``push_to_hub`` publishes a card whose numbers come from this run."""
    if not (trainer.args.do_train and trainer.is_world_process_zero()):
        return
    import sys

    from keplm.hub.card import build_model_card, write_model_card

    model = trainer.accelerator.unwrap_model(trainer.model)
    metrics = {k: v for k, v in results.items() if k.startswith(("eval_", "predict_")) and isinstance(v, (int, float))
               and not k.endswith(("runtime", "per_second"))}
    card = build_model_card(
        model.config, getattr(model, "knowledge_assets", None), metrics=metrics,
        base_model=model_args.model_name_or_path, dataset=data_args.dataset_name, repo_id=trainer.args.hub_model_id,
        command="python " + " ".join(sys.argv), auto_class=auto_class,
    )
    write_model_card(trainer.args.output_dir, card)


__all__ = [
    "write_card",
    "setup_logging",
    "finish_training_args",
    "check_splits",
    "build_features",
    "build_collator",
    "maybe_initialize_entity_memory",
    "record",
    "train_and_save",
]
