#!/usr/bin/env python
"""Fine-tune an encoder on SemEval-2010 Task 8 relation classification, in the style of Hugging Face's example
scripts: the downstream check of TRELM's pre-training (TRELM paper §4.2, relation extraction) and of any
masked-LM checkpoint.

    python run_scripts/run_relation_classification.py --model_name_or_path outputs/trelm_experiments/seed1/trelm \\
        --dataset_name ../shared/data/semeval2010_task8 --do_train --do_eval --do_predict \\
        --output_dir outputs/semeval/trelm

``--model_name_or_path`` is a BERT-like encoder (local folder or Hub id), a saved classifier of this script, or a
``TrelmForMaskedLM`` checkpoint, whose encoder (knowledge-routing deltas folded in) is exported to
``output_dir/pretrained_encoder`` first. ``--dataset_name``: the official release's folder or a Hub id
(``SemEvalWorkshop/sem_eval_2010_task_8``); or ``--train_file`` / ``--test_file``. The release has no validation
split: ``--validation_size`` training sentences, drawn with a fixed seed, are held out. Each nominal is marked in
the text (``@ e1 @``, ``# e2 #``) and the [CLS] representation is classified into the 19 labels; scores are the official
macro-F1 (nine relations, direction counted, ``Other`` ignored), micro-F1 and accuracy, in percent. Sentences cut by
``--max_seq_length`` are counted (``{split}_truncated``), never dropped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import transformers
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
)

from keplm.configuration.configuration_trelm import TrelmConfig
from keplm.data import limit_samples
from keplm.data.semeval import SEMEVAL_LABELS, SEMEVAL_RELATIONS, load_semeval2010_task8, mark_entities
from keplm.training import runtime
from keplm.training.arguments import DataArguments, KeplmTrainingArguments, ModelArguments, parse_args
from keplm.training.compute_metrics import RelationClassificationComputeMetrics
from keplm.training.trainer import KeplmTrainer

logger = logging.getLogger(__name__)


@dataclass
class RelationClassificationDataArguments(DataArguments):
    validation_size: int = field(
        default=800,
        metadata={
            "help": "Hold out N training sentences (a fixed seeded sample) for validation (the "
            "release has no dev set); 0 keeps them for training."
        },
    )
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per marked sentence (longer: cut, counted)."})


def encoder_checkpoint(model_args: ModelArguments, output_dir: str, export: bool = True) -> str:
    """What the classifier is built from: the path itself, or a TRELM checkpoint's exported encoder (written only
    when ``export``: the local main process; the others read its copy)."""
    path, hub = model_args.model_name_or_path, model_args.hub_kwargs()
    if AutoConfig.from_pretrained(path, **hub).model_type != TrelmConfig.model_type:
        return path
    target = os.path.join(output_dir, "pretrained_encoder")
    if export:
        from keplm import TrelmForMaskedLM

        TrelmForMaskedLM.from_pretrained(path, **hub).save_encoder(target, AutoTokenizer.from_pretrained(path, **hub))
        logger.info(
            "%s is a TRELM checkpoint: its encoder (routing deltas folded in) is exported to %s. It has no "
            "pooler (TRELM pre-trains token states): the classifier's pooler starts from random weights, as "
            "its head does, and trains with it",
            path,
            target,
        )
    return target


class MarkedSentenceFeaturizer:
    """``datasets.map`` function: tokenised marked sentences, ``labels`` and ``truncated`` (1 where the cut lost
    text, and with it maybe a marker)."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length

    def __call__(self, batch: dict) -> dict:
        texts = [
            mark_entities(s, (a, b), (c, d))
            for s, a, b, c, d in zip(
                batch["sentence"], batch["e1_start"], batch["e1_end"], batch["e2_start"], batch["e2_end"]
            )
        ]
        features = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        full = self.tokenizer(texts)["input_ids"]
        features["truncated"] = [int(len(ids) > self.max_length) for ids in full]
        features["labels"] = batch["label"]
        return features


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_args(
        (ModelArguments, RelationClassificationDataArguments, KeplmTrainingArguments), args
    )
    runtime.start_run(training_args, model_args.model_name_or_path)
    raw = load_semeval2010_task8(
        data_args.dataset_name,
        train_file=data_args.train_file,
        test_file=data_args.test_file,
        validation_file=data_args.validation_file,
        validation_size=data_args.validation_size,
        **({"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}),
    )
    raw = limit_samples(raw, data_args.sample_limits(), data_args.sample_seeds())
    runtime.check_splits(raw, training_args)
    with training_args.main_process_first(desc="encoder"):
        path = encoder_checkpoint(model_args, training_args.output_dir, export=training_args.local_process_index == 0)
    tokenizer = AutoTokenizer.from_pretrained(path, **model_args.hub_kwargs())
    labels = {"id2label": dict(enumerate(SEMEVAL_LABELS)), "label2id": {n: i for i, n in enumerate(SEMEVAL_LABELS)}}
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=len(SEMEVAL_LABELS), **labels, **model_args.hub_kwargs()
    )
    if [model.config.id2label[i] for i in range(model.config.num_labels)] != list(SEMEVAL_LABELS):
        raise ValueError(
            f"{path} classifies into {list(model.config.id2label.values())}, not the SemEval-2010 Task 8 labels"
        )
    runtime.check_max_seq_length(data_args.max_seq_length, model)
    featurizer = MarkedSentenceFeaturizer(tokenizer, data_args.max_seq_length)
    features, results = {}, {}
    for split in raw:
        with training_args.main_process_first(desc=f"{split} features"):
            features[split] = raw[split].map(
                featurizer,
                batched=True,
                remove_columns=raw[split].column_names,
                num_proc=data_args.preprocessing_num_workers,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Tokenising {split}",
            )
        results[f"{split}_truncated"] = sum(features[split]["truncated"])
        if results[f"{split}_truncated"]:
            logger.warning(
                "%s: %d of %d marked sentences exceed %d tokens and are cut",
                split,
                results[f"{split}_truncated"],
                len(features[split]),
                data_args.max_seq_length,
            )
        features[split] = features[split].remove_columns("truncated")
    trainer = KeplmTrainer(
        model=model,
        args=training_args,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=data_args.pad_to_multiple_of),
        train_dataset=features.get("train") if training_args.do_train else None,
        eval_dataset=features.get("validation") if training_args.do_eval else None,
        compute_metrics=RelationClassificationComputeMetrics(model.config.id2label, SEMEVAL_RELATIONS),
    )
    if training_args.do_train:
        results.update(runtime.train_and_save(trainer, training_args, len(features["train"])))
    if training_args.do_eval:
        results.update(
            runtime.record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(features["validation"])))
        )
    if training_args.do_predict:
        output = trainer.predict(features["test"], metric_key_prefix="predict")
        results.update(runtime.record(trainer, "predict", dict(output.metrics, predict_samples=len(features["test"]))))
    trainer.save_metrics("data", {k: v for k, v in results.items() if k.endswith("_truncated")})
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
