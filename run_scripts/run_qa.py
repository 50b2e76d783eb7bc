#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for extractive QA (SQuAD v1.1), in the style of Hugging Face's ``run_qa.py``.

    python run_scripts/run_qa.py --model_name_or_path <encoder> \\
        --dataset_name ../shared/data/squad_v1.1/dev-v1.1.json.gz --split_by_article 38 5 5 \\
        --kg trex:../shared/data/lama --system relational --do_train --do_eval --do_predict --output_dir outputs/qa

``--model_type roof_transformer --system roof`` trains Roof-Transformer instead (its knowledge: the triples selected
from each context, ``--selection`` / ``--verbalization`` / ``--fusion`` as in ``run_glue.py``).

A single SQuAD file (e.g. the dev-only v1.1 file) is split by article into train/validation/test with
``--split_by_article`` (38 5 5 for SQuAD v1.1 dev); explicit ``--train_file``/``--validation_file``/``--test_file``
or a Hub dataset id work too.
Contexts are cut into ``--max_seq_length`` windows with ``--doc_stride`` overlap; answers are pooled over
windows with n-best post-processing and scored with the official SQuAD v1.1 EM/F1.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import datasets
import transformers
from transformers import AutoConfig, HfArgumentParser, set_seed

from keplm import KalaForQuestionAnswering, RoofTransformerForQuestionAnswering
from keplm.data import limit_samples, load_qa_dataset
from keplm.data.collator import KeplmDataCollator
from keplm.io_utils import read_json
from keplm.tokenization.processing_roof_transformer import knowledge_statistics
from keplm.training.arguments import (
    KeplmTrainingArguments,
    ModelArguments,
    QaDataArguments,
    RoofArguments,
    parse_args,
)
from keplm.training.knowledge_setup import (
    Featurizer,
    add_knowledge,
    build_entity_vocabulary,
    build_model,
    build_roof_model,
    is_keplm_checkpoint,
    maybe_add_lora,
    prepare_processor,
    prepare_roof_knowledge,
)
from keplm.training.metrics import squad_references, squad_v1_metrics
from keplm.training.model_card import KeplmModelCardData
from keplm.training.runtime import (
    build_collator,
    build_features,
    check_max_seq_length,
    check_splits,
    flatten,
    knowledge_coverage,
    linked_share,
    maybe_initialize_entity_memory,
    record,
    setup_logging,
    train_and_save,
)
from keplm.training.subsets import UnseenEntityCounter, subset_metrics
from keplm.training.trainer import QuestionAnsweringTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)


def load_data(data_args: QaDataArguments) -> tuple[datasets.DatasetDict, dict]:
    """The splits, and the loader's report (files, answer-start checks, the article split it made)."""
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    raw, report = load_qa_dataset(
        data_args.dataset_name, train_file=data_args.train_file, validation_file=data_args.validation_file,
        test_file=data_args.test_file, split_by_article=data_args.article_split(),
        fix_answer_starts=data_args.fix_answer_starts, return_report=True, **extra,
    )
    return limit_samples(raw, data_args.sample_limits(), data_args.sample_seeds()), report


@dataclass
class QaModelChoice:
    model_type: Literal["kala", "roof_transformer"] | None = field(
        default=None,
        metadata={"help": "kala (KALA and its baselines, --system vanilla|more_params|pointwise|relational) or "
                  "roof_transformer (--system bert|roof with Roof-Transformer's knowledge settings); default: the "
                  "checkpoint's model type, else kala."},
    )


def choose_model_type(args: list[str] | None) -> tuple[str, list[str] | dict]:
    """``--model_type`` (or ``"model_type"`` in a JSON settings file) and the remaining arguments; without it, the
    type of a keplm checkpoint passed as ``--model_name_or_path``, else KALA."""
    argv = sys.argv[1:] if args is None else list(args)
    if len(argv) == 1 and argv[0].endswith(".json"):
        settings = read_json(argv[0])
        model_type, rest = settings.pop("model_type", None), settings
        path, hub_kwargs = settings.get("model_name_or_path"), {}
    else:
        choice, model_args, rest = HfArgumentParser((QaModelChoice, ModelArguments)).parse_args_into_dataclasses(
            args=argv, return_remaining_strings=True)
        model_type, path, hub_kwargs = choice.model_type, model_args.model_name_or_path, model_args.hub_kwargs()
        rest = _without_option(argv, "--model_type")
    if model_type is None and path and is_keplm_checkpoint(path, **hub_kwargs):
        model_type = AutoConfig.from_pretrained(path, **hub_kwargs).model_type
    model_type = model_type or "kala"
    if model_type not in QA_MODELS:
        raise ValueError(f"run_qa trains {sorted(QA_MODELS)}, not model type {model_type!r}")
    return model_type, rest


def _without_option(argv: list[str], option: str) -> list[str]:
    """``argv`` without ``option VALUE`` / ``option=VALUE``."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(f"{option}="):
            rest.append(arg)
    return rest


#: how a single SQuAD-style file gets its validation and test splits
SPLIT_HINT = ("one SQuAD-style file has one split: --split_by_article 38 5 5 splits SQuAD v1.1 dev by article, or "
              "give --validation_file / --test_file")


def main(args: list[str] | None = None) -> dict:
    model_type, rest = choose_model_type(args)
    return QA_MODELS[model_type](rest)


def main_kala(args) -> dict:
    """KALA (or its baselines) for QA: the entity vocabulary, the KFM layers and the unseen-entity subsets (5.4)."""
    model_args, data_args, knowledge_args, training_args = parse_args(QaDataArguments, args)
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw, data_report = load_data(data_args)
    check_splits(raw, training_args, SPLIT_HINT)
    with training_args.main_process_first(desc="knowledge"):
        processor = prepare_processor(model_args, knowledge_args)
        annotation_report = {}
        raw = add_knowledge(raw, processor, knowledge_args, "qa", data_args.preprocessing_num_workers,
                            report=annotation_report)
        processor = build_entity_vocabulary(processor, raw, model_args, knowledge_args, "qa")
    check_window(processor, data_args)
    model = build_model(KalaForQuestionAnswering, model_args, knowledge_args, processor, "qa")
    check_max_seq_length(data_args.max_seq_length, model)
    uses_knowledge = model.config.uses_knowledge
    if not uses_knowledge:
        processor = processor.without_knowledge()  # the baseline's checkpoint carries no KG
    logger.info("System %s (retrieval_mode=%s), knowledge from %s", knowledge_args.system,
                model.config.retrieval_mode, knowledge_args.knowledge if uses_knowledge else "none")

    features = build_features(raw, lambda split: Featurizer(
        processor, "prepare_qa_features", with_knowledge=uses_knowledge, max_length=data_args.max_seq_length,
        doc_stride=data_args.doc_stride, training=split == "train", question_annotation_column=None,
    ), data_args, training_args)
    collator = build_collator(processor, model, data_args, knowledge_args)
    maybe_initialize_entity_memory(model, features, collator, knowledge_args, training_args)
    model = maybe_add_lora(model, model_args)

    group_options = knowledge_args.parameter_group_options(training_args.lr_scheduler_type,
                                                           training_args.lr_scheduler_kwargs)
    trainer = QuestionAnsweringTrainer(
        model=model, args=training_args, data_collator=collator, processing_class=processor,
        parameter_group_options=group_options,
        card_data=KeplmModelCardData(
            base_model=model_args.model_name_or_path, dataset=data_args.dataset_name, command=["python", *sys.argv],
            knowledge_args={**vars(knowledge_args), **group_options},
            train_linked_share=linked_share(raw["train"]) if uses_knowledge and "train" in raw else None,
            card_facts=CARD_FACTS),
        train_dataset=features.get("train"), eval_dataset=features.get("validation"),
        eval_examples=raw["validation"] if training_args.do_eval else None,
        n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
    )
    data_results = knowledge_coverage(processor, raw, uses_knowledge)
    data_results.update(flatten(annotation_report, "annotations"))
    counter = UnseenEntityCounter.from_splits(raw) if knowledge_args.knowledge != "none" else None

    def unseen_subsets(output) -> dict:  # KALA 5.4: contexts with >= 3 entities unseen in training vs the rest
        if counter is None:
            return {}
        ids = list(raw["test"]["id"])
        references = squad_references(raw["test"])
        return subset_metrics(lambda p, r: squad_v1_metrics(dict(enumerate(p)), dict(enumerate(r))),
                              [output.predictions.get(i, "") for i in ids], [references[i] for i in ids],
                              counter.counts(raw["test"]["knowledge"]), "predict")

    data_results.update(flatten(data_report, "data"))
    train_extra = {"train_linked_share": linked_share(raw["train"])} if "train" in raw else {}
    return train_evaluate_predict(trainer, training_args, raw, features, data_results, train_extra=train_extra,
                                  predict_extra=lambda output: {"predict_linked_share": linked_share(raw["test"]),
                                                                **unseen_subsets(output)})


def main_roof(args) -> dict:
    """Roof-Transformer (or the one-encoder baseline, ``--system bert``) for QA: the knowledge selected from each
    context is encoded beside every window of it; answers only come from the text positions."""
    model_args, data_args, roof_args, training_args = parse_args(
        (ModelArguments, QaDataArguments, RoofArguments, KeplmTrainingArguments), args)
    if roof_args.system == "bert_with_knowledge":
        raise ValueError("--system bert_with_knowledge appends knowledge to sentence pairs (run_glue.py); for QA use "
                         "--system bert or roof")
    setup_logging(training_args)
    set_seed(training_args.seed)
    raw, data_report = load_data(data_args)
    check_splits(raw, training_args, SPLIT_HINT)
    with training_args.main_process_first(desc="knowledge"):
        processor, raw = prepare_roof_knowledge(model_args, roof_args, raw, ["context"],
                                                data_args.preprocessing_num_workers)
    check_window(processor, data_args)
    model = build_roof_model(RoofTransformerForQuestionAnswering, model_args, roof_args, processor)
    check_max_seq_length(data_args.max_seq_length, model)
    uses_knowledge = model.config.uses_knowledge
    features = build_features(raw, lambda split: Featurizer(
        processor, "prepare_qa_features", with_knowledge=uses_knowledge, max_length=data_args.max_seq_length,
        doc_stride=data_args.doc_stride, training=split == "train",
    ), data_args, training_args)
    model = maybe_add_lora(model, model_args)
    trainer = QuestionAnsweringTrainer(
        model=model, args=training_args, processing_class=processor,
        data_collator=KeplmDataCollator.from_processor(processor, model,
                                                       pad_to_multiple_of=data_args.pad_to_multiple_of),
        parameter_group_options={"fusion_lr_multiplier": roof_args.fusion_lr_multiplier} if uses_knowledge else {},
        card_data=KeplmModelCardData(base_model=model_args.model_name_or_path, dataset=data_args.dataset_name,
                                     command=["python", *sys.argv], card_facts=CARD_FACTS),
        train_dataset=features.get("train"), eval_dataset=features.get("validation"),
        eval_examples=raw["validation"] if training_args.do_eval else None,
        n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
    )
    data_results = flatten(data_report, "data")
    if uses_knowledge:  # selection statistics per split: per example where windows name it, else per window
        for split, data in features.items():
            grouped = "example_id" in data.column_names
            data_results.update(flatten(knowledge_statistics(data, data["example_id"] if grouped else None),
                                        f"knowledge_{split}" if grouped else f"knowledge_{split}_windows"))
    return train_evaluate_predict(trainer, training_args, raw, features, data_results)


def check_window(processor, data_args: QaDataArguments) -> None:
    if processor.tokenizer.model_max_length < data_args.max_seq_length:
        raise ValueError(f"--max_seq_length {data_args.max_seq_length} exceeds the tokenizer's "
                         f"model_max_length {processor.tokenizer.model_max_length}")


def train_evaluate_predict(trainer, training_args, raw, features, data_results: dict, train_extra: dict | None = None,
                           predict_extra=None) -> dict:
    """The shared end of both models: data report, training, EM/F1 on validation and test, card and push."""
    results = {}
    if data_results:
        trainer.save_metrics("data", data_results)
        results.update(data_results)
    if training_args.do_train:
        results.update(train_and_save(trainer, training_args, len(features["train"]), **(train_extra or {})))
    if training_args.do_eval:
        results.update(record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(raw["validation"]))))
    if training_args.do_predict:
        output = trainer.predict(features["test"], raw["test"], metric_key_prefix="predict")
        metrics = dict(output.metrics, predict_samples=len(raw["test"]))
        if predict_extra is not None:
            metrics.update(predict_extra(output))
        results.update(record(trainer, "predict", metrics))
    if training_args.do_train:
        trainer.create_model_card()
        if training_args.push_to_hub:  # the final push carries the card with every split's results
            trainer.push_to_hub()
    return results


QA_MODELS = {"kala": main_kala, "roof_transformer": main_roof}


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
