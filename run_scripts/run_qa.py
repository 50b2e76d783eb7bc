#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for extractive QA (SQuAD v1.1), in the style of Hugging Face's ``run_qa.py``.

    python run_scripts/run_qa.py --model_name_or_path <encoder> \\
        --dataset_name ../shared/data/squad_v1.1/dev-v1.1.json.gz --kg trex:../shared/data/lama \\
        --system relational --do_train --do_eval --do_predict --output_dir outputs/qa

A single SQuAD file (e.g. the dev-only v1.1 file) is split by article into train/validation/test (38/5/5 by
default); explicit ``--train_file``/``--validation_file``/``--test_file`` or a Hub dataset id work too.
Contexts are cut into ``--max_seq_length`` windows with ``--doc_stride`` overlap; answers are pooled over
windows with n-best post-processing and scored with the official SQuAD v1.1 EM/F1.
"""

from __future__ import annotations

import logging

import datasets
import transformers
from transformers import set_seed

from keplm import KalaForQuestionAnswering
from keplm.data import load_qa_dataset
from keplm.training.arguments import QaDataArguments, parse_args
from keplm.training.knowledge_setup import (
    QaFeaturizer,
    build_model,
    knowledge_source,
    load_annotations,
    prepare_processor,
)
from keplm.training.metrics import squad_references, squad_v1_metrics
from keplm.training.runtime import (
    build_collator,
    build_features,
    check_splits,
    finish_training_args,
    maybe_initialize_entity_memory,
    record,
    setup_logging,
    train_and_save,
    write_card,
)
from keplm.training.subsets import UnseenEntityCounter, subset_metrics
from keplm.training.trainer import QuestionAnsweringTrainer

logger = logging.getLogger(__name__)


def load_data(data_args: QaDataArguments) -> datasets.DatasetDict:
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    raw = load_qa_dataset(
        data_args.dataset_name, train_file=data_args.train_file, validation_file=data_args.validation_file,
        test_file=data_args.test_file, train_articles=data_args.train_articles,
        validation_articles=data_args.validation_articles, test_articles=data_args.test_articles, **extra,
    )
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    for split, limit in limits.items():
        if limit is not None and split in raw:
            raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
    return raw


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, knowledge_args, training_args = parse_args(QaDataArguments, args)
    setup_logging(training_args)
    finish_training_args(training_args)
    set_seed(training_args.seed)

    raw = load_data(data_args)
    check_splits(raw, training_args)
    annotations = load_annotations(knowledge_args)
    with training_args.main_process_first(desc="knowledge assets"):
        processor = prepare_processor(model_args, knowledge_args, raw.get("train"), "qa", annotations)
    if processor.tokenizer.model_max_length < data_args.max_seq_length:
        raise ValueError(f"--max_seq_length {data_args.max_seq_length} exceeds the tokenizer's "
                         f"model_max_length {processor.tokenizer.model_max_length}")
    model = build_model(KalaForQuestionAnswering, model_args, knowledge_args, processor, "qa")
    source = knowledge_source(knowledge_args, processor, model.config)
    logger.info("System %s (retrieval_mode=%s), knowledge from %s", knowledge_args.system,
                model.config.retrieval_mode, source)

    features = build_features(raw, lambda split: QaFeaturizer(
        processor, source, annotations.get(split), max_length=data_args.max_seq_length,
        doc_stride=data_args.doc_stride, training=split == "train",
    ), data_args, training_args)
    collator = build_collator(processor, model, data_args, knowledge_args)
    maybe_initialize_entity_memory(model, features, collator, knowledge_args, training_args)

    trainer = QuestionAnsweringTrainer(
        model=model, args=training_args, data_collator=collator, processing_class=processor,
        module_learning_rate=knowledge_args.knowledge_learning_rate if knowledge_args.uses_knowledge else None,
        memory_optimizer=knowledge_args.entity_memory_optimizer,
        memory_learning_rate=knowledge_args.entity_memory_learning_rate,
        train_dataset=features.get("train"), eval_dataset=features.get("validation"),
        eval_examples=raw["validation"] if training_args.do_eval else None,
        n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
    )
    results = {}
    if training_args.do_train:
        results.update(train_and_save(trainer, training_args, len(features["train"])))
    if training_args.do_eval:
        results.update(record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(raw["validation"]))))
    if training_args.do_predict:
        output = trainer.predict(features["test"], raw["test"], metric_key_prefix="predict")
        metrics = dict(output.metrics, predict_samples=len(raw["test"]))
        counter = UnseenEntityCounter.from_arguments(knowledge_args, raw, "qa", annotations,
                                                   kg=processor.knowledge_assets.kg)
        if counter is not None:  # KALA 5.4: contexts with >= 3 entities unseen in training vs the rest
            ids = list(raw["test"]["id"])
            references = squad_references(raw["test"])
            metrics.update(subset_metrics(
                lambda p, r: squad_v1_metrics(dict(enumerate(p)), dict(enumerate(r))),
                [output.predictions.get(i, "") for i in ids], [references[i] for i in ids],
                counter.counts("test", raw["test"]), "predict",
            ))
        results.update(record(trainer, "predict", metrics))
    write_card(trainer, model_args, data_args, results, "AutoModelForQuestionAnswering")
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
