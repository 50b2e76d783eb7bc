#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for extractive QA (SQuAD v1.1), in the style of Hugging Face's ``run_qa.py``.

    python run_scripts/run_qa.py --model_name_or_path <encoder> \\
        --dataset_name ../shared/data/squad_v1.1/dev-v1.1.json.gz --split_by_article 38 5 5 \\
        --kg trex:../shared/data/lama --system relational --do_train --do_eval --do_predict --output_dir outputs/qa

A single SQuAD file (e.g. the dev-only v1.1 file) is split by article into train/validation/test with
``--split_by_article`` (38 5 5 for SQuAD v1.1 dev); explicit ``--train_file``/``--validation_file``/``--test_file``
or a Hub dataset id work too.
Contexts are cut into ``--max_seq_length`` windows with ``--doc_stride`` overlap; answers are pooled over
windows with n-best post-processing and scored with the official SQuAD v1.1 EM/F1.
"""

from __future__ import annotations

import logging
import sys

import datasets
import transformers
from transformers import set_seed

from keplm import KalaForQuestionAnswering
from keplm.data import limit_samples, load_qa_dataset
from keplm.training.arguments import QaDataArguments, parse_args
from keplm.training.knowledge_setup import (
    Featurizer,
    add_knowledge,
    build_entity_vocabulary,
    build_model,
    maybe_add_lora,
    prepare_processor,
)
from keplm.training.metrics import squad_references, squad_v1_metrics
from keplm.training.runtime import (
    build_collator,
    build_features,
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

logger = logging.getLogger(__name__)


def load_data(data_args: QaDataArguments) -> tuple[datasets.DatasetDict, dict]:
    """The splits, and the loader's report (files, answer-start checks, the article split it made)."""
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    raw, report = load_qa_dataset(
        data_args.dataset_name, train_file=data_args.train_file, validation_file=data_args.validation_file,
        test_file=data_args.test_file, split_by_article=data_args.article_split(),
        fix_answer_starts=data_args.fix_answer_starts, return_report=True, **extra,
    )
    return limit_samples(raw, data_args.sample_limits()), report


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, knowledge_args, training_args = parse_args(QaDataArguments, args)
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw, data_report = load_data(data_args)
    check_splits(raw, training_args)
    with training_args.main_process_first(desc="knowledge"):
        processor = prepare_processor(model_args, knowledge_args)
        raw = add_knowledge(raw, processor, knowledge_args, "qa", data_args.preprocessing_num_workers)
        processor = build_entity_vocabulary(processor, raw, model_args, knowledge_args, "qa")
    if processor.tokenizer.model_max_length < data_args.max_seq_length:
        raise ValueError(f"--max_seq_length {data_args.max_seq_length} exceeds the tokenizer's "
                         f"model_max_length {processor.tokenizer.model_max_length}")
    model = build_model(KalaForQuestionAnswering, model_args, knowledge_args, processor, "qa")
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

    trainer = QuestionAnsweringTrainer(
        model=model, args=training_args, data_collator=collator, processing_class=processor,
        parameter_group_options=knowledge_args.parameter_group_options(),
        card_data={"base_model": model_args.model_name_or_path, "dataset": data_args.dataset_name,
                   "command": ["python", *sys.argv], "knowledge_args": vars(knowledge_args),
                   "train_linked_share": linked_share(raw["train"]) if uses_knowledge and "train" in raw else None},
        train_dataset=features.get("train"), eval_dataset=features.get("validation"),
        eval_examples=raw["validation"] if training_args.do_eval else None,
        n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
    )
    results = {}
    data_results = knowledge_coverage(processor, raw, uses_knowledge)
    data_results.update(flatten(data_report, "data"))
    if data_results:
        trainer.save_metrics("data", data_results)
        results.update(data_results)
    if training_args.do_train:
        results.update(train_and_save(trainer, training_args, len(features["train"]),
                                      train_linked_share=linked_share(raw["train"])))
    if training_args.do_eval:
        results.update(record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(raw["validation"]))))
    if training_args.do_predict:
        output = trainer.predict(features["test"], raw["test"], metric_key_prefix="predict")
        metrics = dict(output.metrics, predict_samples=len(raw["test"]), predict_linked_share=linked_share(raw["test"]))
        counter = UnseenEntityCounter.from_splits(raw) if knowledge_args.knowledge != "none" else None
        if counter is not None:  # KALA 5.4: contexts with >= 3 entities unseen in training vs the rest
            ids = list(raw["test"]["id"])
            references = squad_references(raw["test"])
            metrics.update(subset_metrics(
                lambda p, r: squad_v1_metrics(dict(enumerate(p)), dict(enumerate(r))),
                [output.predictions.get(i, "") for i in ids], [references[i] for i in ids],
                counter.counts(raw["test"]["knowledge"]), "predict",
            ))
        results.update(record(trainer, "predict", metrics))
    if training_args.do_train:
        trainer.create_model_card()
        if training_args.push_to_hub:  # the final push carries the card with every split's results
            trainer.push_to_hub()
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
