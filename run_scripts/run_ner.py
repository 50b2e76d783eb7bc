#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for named-entity recognition, in the style of Hugging Face's ``run_ner.py``.

    python run_scripts/run_ner.py --model_name_or_path <encoder> --dataset_name ../shared/data/conll2003 \\
        --kg fb15k237:../shared/data/kg/fb15k-237 --system relational \\
        --do_train --do_eval --do_predict --output_dir outputs/ner

Multi-process: ``accelerate launch --multi_gpu --num_processes 2 run_scripts/run_ner.py ...`` (on a machine
without GPUs this runs as CPU DDP with gloo). ``--tag_text "some sentence"`` reloads the saved model through
``AutoModelForTokenClassification`` and prints the tag of every word.
"""

from __future__ import annotations

import json
import logging
import os

import datasets
import transformers
from transformers import AutoModelForTokenClassification, set_seed

from keplm import KalaForTokenClassification, KalaProcessor, KnowledgeGraphCollator
from keplm.data import get_label_list, load_ner_dataset
from keplm.training.arguments import NerDataArguments, parse_args
from keplm.training.entity_init import initialize_entity_memory_from_encoder
from keplm.training.knowledge_setup import (
    NerFeaturizer,
    build_model,
    featurize,
    knowledge_source,
    load_annotations,
    prepare_processor,
)
from keplm.training.runtime import finish_training_args, setup_logging
from keplm.training.tagging import NerMetrics, argmax_logits, tag_words, word_predictions
from keplm.training.trainer import OrderedEvalTrainer

logger = logging.getLogger(__name__)


def load_data(data_args: NerDataArguments) -> datasets.DatasetDict:
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    return load_ner_dataset(
        data_args.dataset_name, train_file=data_args.train_file, validation_file=data_args.validation_file,
        test_file=data_args.test_file, max_train_samples=data_args.max_train_samples,
        max_eval_samples=data_args.max_eval_samples, max_test_samples=data_args.max_predict_samples, **extra,
    )


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, knowledge_args, training_args = parse_args(NerDataArguments, args)
    setup_logging(training_args)
    finish_training_args(training_args)
    set_seed(training_args.seed)

    raw = load_data(data_args)
    for split, needed in (("train", training_args.do_train), ("validation", training_args.do_eval),
                          ("test", training_args.do_predict)):
        if needed and split not in raw:
            raise ValueError(f"--do_{'predict' if split == 'test' else split[:5]} needs a {split} split; have {list(raw)}")
    label_list = get_label_list(raw)
    annotations = load_annotations(knowledge_args)
    with training_args.main_process_first(desc="knowledge assets"):
        processor = prepare_processor(model_args, knowledge_args, raw.get("train"), "ner", annotations)
    model = build_model(
        KalaForTokenClassification, model_args, knowledge_args, processor, "ner", num_labels=len(label_list),
        id2label=dict(enumerate(label_list)), label2id={label: i for i, label in enumerate(label_list)},
    )
    model_labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if model_labels != label_list:
        raise ValueError(f"the model's labels {model_labels} differ from the dataset's {label_list}")
    source = knowledge_source(knowledge_args, processor, model.config)
    logger.info("System %s (retrieval_mode=%s), knowledge from %s", knowledge_args.system,
                model.config.retrieval_mode, source)

    features = {}
    for split in ("train", "validation", "test"):
        if split not in raw:
            continue
        featurizer = NerFeaturizer(processor, source, annotations.get(split), max_length=data_args.max_seq_length,
                                   label_all_tokens=data_args.label_all_tokens)
        with training_args.main_process_first(desc=f"{split} features"):
            features[split] = featurize(raw[split], featurizer, data_args.preprocessing_num_workers,
                                        data_args.overwrite_cache, desc=f"Linking and tokenising {split}")

    for split, data in features.items():
        linked = sum(any(i >= 0 for i in row) for row in data["entity_token_map"])
        logger.info("%s: %d features, %d with at least one entity mention", split, len(data), linked)
    collator = KnowledgeGraphCollator(
        pad_token_id=processor.pad_token_id, pad_to_multiple_of=data_args.pad_to_multiple_of,
        graph_pad_to_multiple_of=knowledge_args.graph_pad_to_multiple_of,
        max_entity_id=model.config.entity_vocab_size,
    )
    if knowledge_args.init_entity_memory and training_args.do_train:
        initialize_entity_memory_from_encoder(
            model.to(training_args.device), features["train"], collator, training_args.per_device_eval_batch_size,
            disable_tqdm=training_args.disable_tqdm,
        )

    trainer = OrderedEvalTrainer(
        model=model, args=training_args, data_collator=collator, processing_class=processor,
        train_dataset=features.get("train") if training_args.do_train else None,
        eval_dataset=features.get("validation") if training_args.do_eval else None,
        compute_metrics=NerMetrics(label_list, per_type=data_args.return_entity_level_metrics),
        preprocess_logits_for_metrics=argmax_logits,
    )
    results = {}
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model()
        metrics = dict(train_result.metrics, train_samples=len(features["train"]))
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(features["validation"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results.update(metrics)
    if training_args.do_predict:
        output = trainer.predict(features["test"], metric_key_prefix="predict")
        metrics = dict(output.metrics, predict_samples=len(features["test"]))
        trainer.log_metrics("predict", metrics)
        trainer.save_metrics("predict", metrics)
        results.update(metrics)
        if trainer.is_world_process_zero():
            tags = word_predictions(output.predictions, output.label_ids, label_list)
            with open(os.path.join(training_args.output_dir, "predictions.txt"), "w", encoding="utf-8") as f:
                for words, sentence_tags in zip(raw["test"]["tokens"], tags):
                    f.write(" ".join(f"{w}/{t}" for w, t in zip(words, sentence_tags)) + "\n")
    if data_args.tag_text and trainer.is_world_process_zero():
        results["tagged"] = tag_with_saved_model(training_args.output_dir, data_args.tag_text)
    return results


def tag_with_saved_model(output_dir: str, text: str) -> list[tuple[str, str]]:
    """Reload the saved model and processor through the Auto API and print the tags of ``text``."""
    model = AutoModelForTokenClassification.from_pretrained(output_dir)
    processor = KalaProcessor.from_pretrained(output_dir)
    tagged = tag_words(model, processor, text)
    print(f"Tags from {type(model).__name__} reloaded from {output_dir}:")
    print("  " + " ".join(f"{word}/{tag}" for word, tag in tagged))
    with open(os.path.join(output_dir, "tagged_text.json"), "w", encoding="utf-8") as f:
        json.dump({"text": text, "tags": tagged}, f, indent=2, ensure_ascii=False)
    return tagged


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
