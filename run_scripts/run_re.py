#!/usr/bin/env python
"""Fine-tune a document-level relation extractor (KALA appendix A) on DocRED-schema data, in the style of
Hugging Face's example scripts.

    python run_scripts/run_re.py --model_name_or_path <encoder> \\
        --train_file ../shared/data/docred/dev_revised.json.gz --validation_docs 50 \\
        --test_file ../shared/data/docred/test_revised.json.gz \\
        --relation_names_file ../shared/data/fewrel/pid2name.json.gz --negative_ratio 3 \\
        --do_train --do_eval --do_predict --output_dir outputs/re

Without ``--validation_file`` the last ``--validation_docs`` documents of the training file are held out for
validation. Metrics are precision/recall/F1 of the predicted facts (top-1 relation, or top-2 when no_relation
wins but the runner-up exceeds ``--top2_threshold``) against every gold fact, those lost to truncation
included, in percent (``metric_unit``). The output directory holds the model, its processor (tokenizer and
``processor_config.json``: ``AutoProcessor.from_pretrained`` loads it), ``relations.json`` and
``featurization.json`` (what truncation cost per split).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import datasets
import transformers
from transformers import AutoTokenizer, PreTrainedConfig, TrainingArguments

from keplm.configuration.configuration_relation_extraction import RelationExtractionConfig
from keplm.data import limit_samples
from keplm.data.collator import KeplmDataCollator
from keplm.data.docred import (
    DOCRED_ENTITY_TYPES,
    DOCRED_FEATURES,
    build_relation_vocab,
    featurization_report,
    load_relation_names,
    read_docred,
)
from keplm.modeling.modeling_relation_extraction import KeplmForRelationExtraction, select_relations
from keplm.tokenization.processing_relation_extraction import RelationExtractionProcessor
from keplm.training import runtime
from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, parse_args
from keplm.training.compute_metrics import FactMetrics
from keplm.training.trainer import KeplmTrainer

logger = logging.getLogger(__name__)


@dataclass
class RelationModelArguments(ModelArguments):
    bilinear_dim: int = field(
        default=128, metadata={"help": "Size of the head/tail projections of the bilinear layer."}
    )
    dropout: float | None = field(default=None, metadata={"help": "Entity dropout (default: the encoder's)."})
    max_relations: int = field(
        default=100, metadata={"help": "Keep the N most frequent training relations (paper: 100)."}
    )
    top2_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Take the top-2 relation when no_relation is top-1 and top-2 has p above this (default: "
            "the paper's 0.1 for a new model, the saved value for a saved one; 1.0 = top-1 only)."
        },
    )
    head_learning_rate: float | None = field(
        default=None, metadata={"help": "Learning rate of the new (non-encoder) modules; default: --learning_rate."}
    )
    use_entity_types: bool = field(
        default=False, metadata={"help": "Add a DocRED entity-type embedding (then inference needs the types too)."}
    )


@dataclass
class RelationDataArguments:
    train_file: str | None = field(default=None, metadata={"help": "DocRED-schema JSON (.json or .json.gz)."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file (default: hold out)."})
    test_file: str | None = field(default=None, metadata={"help": "Test file, scored by --do_predict."})
    validation_docs: int = field(
        default=50, metadata={"help": "Without --validation_file: hold out the last N training documents."}
    )
    relation_names_file: str | None = field(
        default=None, metadata={"help": "FewRel pid2name.json(.gz) for relation names in relations.json."}
    )
    max_seq_length: int = field(default=512, metadata={"help": "Tokens per document (longer: truncated, counted)."})
    negative_ratio: float | None = field(
        default=None, metadata={"help": "Training: keep at most this many no_relation pairs per positive pair."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training documents."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the validation documents."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Truncate the test documents."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for datasets.map."})


def load_splits(data_args: RelationDataArguments, training_args: TrainingArguments) -> dict[str, list[dict]]:
    """Rows per split: train (minus the held-out tail), validation, test."""
    splits: dict[str, list[dict]] = {}
    if data_args.train_file:
        rows = read_docred(data_args.train_file)
        if data_args.validation_file is None and training_args.do_eval:
            if not 0 < data_args.validation_docs < len(rows):
                raise ValueError(
                    f"--validation_docs {data_args.validation_docs} must leave training documents "
                    f"(the file has {len(rows)})"
                )
            rows, splits["validation"] = rows[: -data_args.validation_docs], rows[-data_args.validation_docs :]
        splits["train"] = rows
    if data_args.validation_file:
        splits["validation"] = read_docred(data_args.validation_file)
    if data_args.test_file:
        splits["test"] = read_docred(data_args.test_file)
    for split, flag in (("train", "do_train"), ("validation", "do_eval"), ("test", "do_predict")):
        if getattr(training_args, flag) and split not in splits:
            raise ValueError(f"--{flag} needs {split} documents (see --train_file/--validation_file/--test_file)")
    return limit_samples(
        splits,
        {
            "train": data_args.max_train_samples,
            "validation": data_args.max_eval_samples,
            "test": data_args.max_predict_samples,
        },
    )


def build_model(model_args: RelationModelArguments, splits: dict, training_args: TrainingArguments):
    """A saved relation extractor as it is, or a new one on a base encoder with the training relations."""
    hub = model_args.hub_kwargs()
    config_dict, _ = PreTrainedConfig.get_config_dict(model_args.model_name_or_path, **hub)
    threshold = {} if model_args.top2_threshold is None else {"top2_threshold": model_args.top2_threshold}
    if config_dict.get("model_type") == RelationExtractionConfig.model_type:
        return KeplmForRelationExtraction.from_pretrained(model_args.model_name_or_path, **hub, **threshold)
    if not training_args.do_train:
        raise ValueError(f"{model_args.model_name_or_path} is not a relation extractor; pass --do_train to train one")
    relations = build_relation_vocab(splits["train"], model_args.max_relations)
    return KeplmForRelationExtraction.from_base_pretrained(
        model_args.model_name_or_path,
        id2label=dict(enumerate(relations)),
        bilinear_dim=model_args.bilinear_dim,
        dropout=model_args.dropout,
        max_relations=model_args.max_relations,
        **threshold,
        entity_types=list(DOCRED_ENTITY_TYPES) if model_args.use_entity_types else None,
    )


class PairEvalTrainer(KeplmTrainer):
    """Evaluation outputs are per candidate pair, not per document: gather them whole (``gather_for_metrics``
    would cut the last batch to its number of documents). Metrics need a single evaluation process."""

    def evaluation_loop(self, *args, **kwargs):
        if self.args.world_size > 1:
            raise ValueError("run_re.py evaluates in one process (per-pair outputs cannot be de-duplicated)")
        self.gather_function = self.accelerator.gather
        return super().evaluation_loop(*args, **kwargs)


class PredictRelations:
    """``preprocess_logits_for_metrics``: keep only the chosen relation id of each pair (top-1/top-2 rule)."""

    def __init__(self, threshold: float, no_relation_id: int = 0):
        self.threshold, self.no_relation_id = threshold, no_relation_id

    def __call__(self, logits, labels):
        logits = logits[0] if isinstance(logits, (tuple, list)) else logits
        return select_relations(logits, self.threshold, self.no_relation_id)[0]


def save_relations(path: str, config: RelationExtractionConfig, names: dict[str, str], counts: dict[str, int]):
    relations = [
        {"id": i, "relation": r, "name": names.get(r, r), "train_facts": counts.get(r, 0)}
        for i, r in sorted(config.id2label.items())
    ]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"no_relation_id": config.label2id[config.no_relation_label], "relations": relations}, f, indent=2)


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_args(
        (RelationModelArguments, RelationDataArguments, KeplmTrainingArguments), args
    )
    if training_args.label_names is None:
        training_args.label_names = ["edge_labels"]
    runtime.start_run(training_args, model_args.model_name_or_path)

    splits = load_splits(data_args, training_args)
    model = build_model(model_args, splits, training_args)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, **model_args.hub_kwargs())
    if not tokenizer.is_fast:
        raise ValueError("relation extraction needs a fast tokenizer (character offsets)")
    config = model.config
    no_relation_id = config.label2id[config.no_relation_label]
    logger.info(
        "%d relations (+ %s), top-2 threshold %.2f",
        config.num_labels - 1,
        config.no_relation_label,
        config.top2_threshold,
    )

    def make_processor(negative_ratio=None) -> RelationExtractionProcessor:
        """The model's processor, with ``negative_ratio`` no_relation pairs per positive (None: all)."""
        return RelationExtractionProcessor.from_model_config(
            tokenizer,
            config,
            max_length=data_args.max_seq_length,
            negative_ratio=negative_ratio,
            seed=training_args.seed,
        )

    processor = make_processor()  # the saved one: no negative sampling
    features, reports = {}, {}
    for split, rows in splits.items():
        split_processor = make_processor(data_args.negative_ratio) if split == "train" else processor
        raw = datasets.Dataset.from_list(rows, features=DOCRED_FEATURES)
        with training_args.main_process_first(desc=f"{split} features"):
            features[split] = raw.map(
                split_processor.prepare_relation_features,
                batched=True,
                remove_columns=raw.column_names,
                num_proc=data_args.preprocessing_num_workers,
                desc=f"Tokenising {split}",
            )
        reports[split] = featurization_report(features[split], split)

    collator = KeplmDataCollator.from_processor(processor, model, entity_vocab_size=max(config.num_entity_types, 1))
    trainer = PairEvalTrainer(
        model=model,
        args=training_args,
        data_collator=collator,
        processing_class=processor,
        train_dataset=features.get("train") if training_args.do_train else None,
        eval_dataset=features.get("validation") if training_args.do_eval else None,
        compute_metrics=(
            FactMetrics(features["validation"], splits["validation"], config.id2label, no_relation_id)
            if training_args.do_eval
            else None
        ),
        preprocess_logits_for_metrics=PredictRelations(config.top2_threshold, no_relation_id),
        parameter_group_options={"head_learning_rate": model_args.head_learning_rate},
    )
    results = {}
    if training_args.do_train:
        train_result = trainer.train(
            resume_from_checkpoint=runtime.resume_checkpoint(
                training_args.resume_from_checkpoint, training_args.output_dir
            )
        )
        trainer.save_model()
        results.update(
            runtime.record(trainer, "train", dict(train_result.metrics, train_samples=len(features["train"])))
        )
        trainer.save_state()
    if training_args.do_eval:
        results.update(
            runtime.record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(features["validation"])))
        )
    if training_args.do_predict:
        trainer.compute_metrics = FactMetrics(features["test"], splits["test"], config.id2label, no_relation_id)
        output = trainer.predict(features["test"], metric_key_prefix="predict")
        results.update(runtime.record(trainer, "predict", dict(output.metrics, predict_samples=len(features["test"]))))
    if trainer.is_world_process_zero():
        os.makedirs(training_args.output_dir, exist_ok=True)
        if training_args.do_train:  # beside the saved model
            counts = {}
            for fact in (f for row in splits["train"] for f in row["facts"]):
                counts[fact["r"]] = counts.get(fact["r"], 0) + 1
            save_relations(
                os.path.join(training_args.output_dir, "relations.json"),
                config,
                load_relation_names(data_args.relation_names_file),
                counts,
            )
        with open(os.path.join(training_args.output_dir, "featurization.json"), "w", encoding="utf-8") as f:
            json.dump(reports, f, indent=2)
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
