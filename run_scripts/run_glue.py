#!/usr/bin/env python
"""Fine-tune Roof-Transformer (or its one-encoder baselines) on a GLUE task, in the style of Hugging Face's
``run_glue.py``.

    python run_scripts/run_glue.py --model_name_or_path <encoder> --task_name rte --data_dir ../shared/data/glue \\
        --kg trex:../shared/data/lama --system roof --fusion transformer --fusion_layers 3 \\
        --do_train --do_eval --output_dir outputs/glue/rte

``--system bert`` trains one encoder alone, ``bert_with_knowledge`` one encoder reading the verbalised knowledge
after the text, ``roof`` the TASK and KB encoders fused by a roof (paper §3). Knowledge: triples from ``--kg`` whose
head (``--selection has_tail``: and tail) is linked in the sentences, verbalised with ``--verbalization``, or
precomputed lists (``--triple_files``). Metrics as GLUE defines them (Matthews for CoLA, F1/accuracy for MRPC,
Pearson/Spearman for STS-B, accuracy otherwise), in percent as every run script's (``metric_unit``); the results JSON
also reports how much knowledge was selected.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import transformers

from keplm.data import limit_samples
from keplm.data.glue import count_examples_cut, glue_task, load_glue_dataset, task_of_dataset
from keplm.training import runtime
from keplm.training.arguments import DataArguments, KeplmTrainingArguments, ModelArguments, parse_args
from keplm.training.compute_metrics import GlueComputeMetrics
from keplm.training.knowledge_setup import Featurizer
from keplm.training.run_recipe import MethodChoice, choose_recipe
from keplm.training.trainer import KeplmTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)


@dataclass
class GlueDataArguments(DataArguments):
    task_name: str | None = field(default=None, metadata={"help": "cola, sst2, mrpc, stsb or rte."})
    data_dir: str | None = field(default=None, metadata={"help": "Folder holding the GLUE task folders (CoLA/, ...)."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens of the sentence (pair), [CLS]/[SEP] included."})

    def __post_init__(self):
        if self.task_name is None and self.dataset_name is None and not self.train_file:
            raise ValueError("pass --task_name (with --data_dir or a Hub copy), --dataset_name or --train_file")


def load_data(data_args: GlueDataArguments) -> datasets.DatasetDict:
    files = data_args.train_file or data_args.validation_file or data_args.test_file
    source = data_args.dataset_name or (None if files else data_args.task_name)  # files: the task names the schema
    raw = load_glue_dataset(
        source,
        task=data_args.task_name,
        data_dir=data_args.data_dir,
        train_file=data_args.train_file,
        validation_file=data_args.validation_file,
        test_file=data_args.test_file,
    )
    raw = limit_samples(raw, data_args.sample_limits(), data_args.sample_seeds())
    if "test" in raw and min(raw["test"]["label"], default=0) < 0:  # an unlabelled test split cannot be scored
        logger.info("the test split has no labels: it is not scored")
        del raw["test"]
    return raw


def check_labelled(raw, training_args) -> None:
    """ValueError, before any linking or training, when a split the run trains or evaluates on has rows without a
    label (a file without the label column, or empty / -1 labels): they would reach the loss as class -1."""
    for split, used in (("train", training_args.do_train), ("validation", training_args.do_eval)):
        if used and split in raw:
            unlabelled = sum(1 for label in raw[split]["label"] if label < 0)
            if unlabelled:
                raise ValueError(
                    f"the {split} split has {unlabelled} of {len(raw[split])} rows without a label (no "
                    "label column in its file, or empty / -1 labels): it cannot be trained or evaluated "
                    "on; give labelled data or leave out --do_train / --do_eval"
                )


def main(args: list[str] | None = None) -> dict:
    """Train / evaluate / predict one method (``--model_type``, default: the checkpoint's, else Roof-Transformer) on
    a GLUE task or sentence (pair) classification files; the task's metric scores it."""
    model_type, recipe_class = choose_recipe(args, default="roof_transformer")
    _, model_args, data_args, method_args, training_args = parse_args(
        (MethodChoice, ModelArguments, GlueDataArguments, recipe_class.arguments, KeplmTrainingArguments), args
    )
    recipe = recipe_class(model_type, model_args, method_args, "sequence_classification")
    runtime.start_run(training_args, model_args.model_name_or_path)
    raw = load_data(data_args)
    named = data_args.task_name or data_args.dataset_name
    # files without a GLUE task name: the task is what the files hold (their text columns and labels)
    task = glue_task(named) if named is not None else task_of_dataset(raw)
    runtime.check_splits(raw, training_args)
    check_labelled(raw, training_args)
    raw = runtime.used_splits(raw, training_args)
    with training_args.main_process_first(desc="knowledge"):
        processor, raw = recipe.prepare(raw, list(task.text_columns), data_args.preprocessing_num_workers)
    labels = (
        {}
        if task.is_regression
        else {"id2label": dict(enumerate(task.label_names)), "label2id": {n: i for i, n in enumerate(task.label_names)}}
    )
    model = recipe.build_model(processor, num_labels=task.num_labels, **labels)
    processor = recipe.finish(processor, model)
    features = runtime.build_features(
        raw,
        lambda split: Featurizer(
            processor,
            "prepare_pair_features",
            with_knowledge=recipe.reads_knowledge(model),
            text_columns=list(task.text_columns),
            max_length=data_args.max_seq_length,
            **recipe.feature_options(processor, data_args),
        ),
        data_args,
        training_args,
    )
    trainer_kwargs = runtime.trainer_arguments(
        recipe, processor, model, raw, features, model_args, data_args, training_args, CARD_FACTS, dataset=task.name
    )
    model = trainer_kwargs["model"]
    trainer = KeplmTrainer(
        **trainer_kwargs,
        compute_metrics=GlueComputeMetrics(task.metric),
    )
    knowledge = recipe.data_results(processor, raw, features, model)
    for split, prefix in (("train", "train"), ("validation", "eval"), ("test", "predict")):
        if split in features:
            cut = count_examples_cut(processor.tokenizer, raw[split], task.text_columns, data_args.max_seq_length)
            knowledge[f"{prefix}_examples_truncated"] = cut
            if cut:
                logger.warning(
                    "%s: %d examples are longer than --max_seq_length %d tokens (cut: the model sees their start)",
                    split,
                    cut,
                    data_args.max_seq_length,
                )
    results = dict(knowledge)
    if training_args.do_train:
        results.update(
            runtime.train_and_save(
                trainer, training_args, len(features["train"]), **recipe.split_results(raw, "train", "train")
            )
        )
    if training_args.do_eval:
        results.update(
            runtime.record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(features["validation"])))
        )
    if training_args.do_predict and "test" in features:
        output = trainer.predict(features["test"], metric_key_prefix="predict")
        results.update(
            runtime.record(
                trainer,
                "predict",
                dict(
                    output.metrics,
                    predict_samples=len(features["test"]),
                    **recipe.split_results(raw, "test", "predict"),
                ),
            )
        )
    trainer.save_metrics("knowledge", knowledge)
    if training_args.do_train:
        trainer.create_model_card()
        if training_args.push_to_hub:
            trainer.push_to_hub()
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
