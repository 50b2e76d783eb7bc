#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for named-entity recognition, in the style of Hugging Face's ``run_ner.py``; another
registered method with a run recipe through ``--model_type`` (``--help`` lists the chosen method's options).

    python run_scripts/run_ner.py --model_name_or_path <encoder> --dataset_name ../shared/data/conll2003 \\
        --kg fb15k237:../shared/data/kg/fb15k-237 --system relational \\
        --do_train --do_eval --do_predict --output_dir outputs/ner

Multi-process: ``accelerate launch --multi_gpu --num_processes 2 run_scripts/run_ner.py ...`` (on a machine
without GPUs this runs as CPU DDP with gloo). ``--tag_text "some sentence"`` reloads the saved model through
``AutoModelForTokenClassification`` and prints the entities the ``keplm-ner`` pipeline finds in the text.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import datasets
import transformers
from transformers import AutoModelForTokenClassification, AutoProcessor, pipeline

from keplm.data import get_label_list, load_ner_dataset
from keplm.training import runtime
from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, NerDataArguments, parse_args
from keplm.training.compute_metrics import NerComputeMetrics, word_level_scores
from keplm.training.knowledge_setup import Featurizer, load_for_inference
from keplm.training.run_recipe import MethodChoice, choose_recipe
from keplm.training.subsets import subset_metrics
from keplm.training.tagging import align_labels_to_model, argmax_logits, count_words_cut, word_level_tags
from keplm.training.trainer import KeplmTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)


def load_data(data_args: NerDataArguments) -> datasets.DatasetDict:
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    limits = data_args.sample_limits()
    return load_ner_dataset(
        data_args.dataset_name,
        train_file=data_args.train_file,
        validation_file=data_args.validation_file,
        test_file=data_args.test_file,
        max_train_samples=limits["train"],
        max_eval_samples=limits["validation"],
        max_test_samples=limits["test"],
        train_sample_seed=data_args.train_sample_seed,
        **extra,
    )


def main(args: list[str] | None = None) -> dict:
    """Train / evaluate / predict one method (``--model_type``, default: the checkpoint's, else KALA) on NER: its run
    recipe prepares the knowledge and builds the model; labels, word-level tags and seqeval scores are the task's."""
    model_type, recipe_class = choose_recipe(args, default="kala")
    _, model_args, data_args, method_args, training_args = parse_args(
        (MethodChoice, ModelArguments, NerDataArguments, recipe_class.arguments, KeplmTrainingArguments), args
    )
    recipe = recipe_class(model_type, model_args, method_args, "ner")
    runtime.start_run(training_args, model_args.model_name_or_path)

    raw = load_data(data_args)
    runtime.check_splits(raw, training_args)
    label_list = get_label_list(raw)  # from every split read, before the unused ones go
    raw = runtime.used_splits(raw, training_args)
    with training_args.main_process_first(desc="knowledge"):
        processor, raw = recipe.prepare(raw, ["tokens"], data_args.preprocessing_num_workers)
    # a trained checkpoint keeps its label map (the data is renumbered to it); a new model takes the data's
    label_kwargs = (
        {}
        if recipe.is_checkpoint()
        else {
            "num_labels": len(label_list),
            "id2label": dict(enumerate(label_list)),
            "label2id": {label: i for i, label in enumerate(label_list)},
        }
    )
    model = recipe.build_model(processor, **label_kwargs)
    runtime.check_max_seq_length(data_args.max_seq_length, model)
    raw, label_list = align_labels_to_model(raw, label_list, model.config)
    processor = recipe.finish(processor, model)

    features = runtime.build_features(
        raw,
        lambda split: Featurizer(
            processor,
            "prepare_ner_features",
            with_knowledge=recipe.reads_knowledge(model),
            max_length=data_args.max_seq_length,
            label_all_tokens=data_args.label_all_tokens,
            **recipe.feature_options(processor, data_args),
        ),
        data_args,
        training_args,
    )
    example = {"example_text": data_args.tag_text}  # the card's usage example
    trainer_kwargs = runtime.trainer_arguments(
        recipe, processor, model, raw, features, model_args, data_args, training_args, CARD_FACTS, **example
    )
    model = trainer_kwargs["model"]
    trainer = KeplmTrainer(
        **trainer_kwargs,
        compute_metrics=NerComputeMetrics(label_list, per_type=data_args.return_entity_level_metrics),
        preprocess_logits_for_metrics=argmax_logits,
    )
    results = {}
    data_results = recipe.data_results(processor, raw, features, model)
    for split, prefix in (("train", "train"), ("validation", "eval")):  # the test split's: in its word-level scores
        if split in features:
            cut = count_words_cut(processor.tokenizer, raw[split]["tokens"], data_args.max_seq_length)
            data_results[f"{prefix}_words_truncated"] = cut
            if cut:
                logger.warning(
                    "%s: %d words lie beyond --max_seq_length %d tokens (the model never sees them)",
                    split,
                    cut,
                    data_args.max_seq_length,
                )
    if data_results:
        trainer.save_metrics("data", data_results)
        results.update(data_results)
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
    if training_args.do_predict:
        output = trainer.predict(features["test"], metric_key_prefix="predict")
        metrics = dict(
            output.metrics, predict_samples=len(features["test"]), **recipe.split_results(raw, "test", "predict")
        )
        gold = [[label_list[t] for t in tags] for tags in raw["test"]["ner_tags"]]
        written, tags, references, counts = word_level_tags(
            output.label_ids,
            output.predictions,
            raw["test"]["tokens"],
            gold,
            processor.tokenizer,
            model.config.id2label,
            data_args.max_seq_length,
            data_args.label_all_tokens,
        )
        metrics.update({f"predict_{k}": v for k, v in word_level_scores(tags, references).items()})
        metrics.update({f"predict_{k}": v for k, v in counts.items()})
        if counts["words_without_token"] or counts["words_truncated"]:
            logger.warning(
                "test: %d words yield no sub-token (predicted O, scored) and %d are cut off by "
                "--max_seq_length %d (not scored)",
                counts["words_without_token"],
                counts["words_truncated"],
                data_args.max_seq_length,
            )
        counts = recipe.unseen_entity_counts(raw, "test")
        if counts is not None:  # KALA 5.4: contexts with >= 3 entities unseen in training vs the rest; and with >= 1
            metrics.update(subset_metrics(word_level_scores, tags, references, counts, "predict"))
            metrics.update(
                subset_metrics(
                    word_level_scores,
                    tags,
                    references,
                    counts,
                    "predict",
                    threshold=1,
                    names=("all_seen", "with_unseen"),
                )
            )
        results.update(runtime.record(trainer, "predict", metrics))
        if trainer.is_world_process_zero():
            with open(os.path.join(training_args.output_dir, "predictions.txt"), "w", encoding="utf-8") as f:
                for words, sentence_tags in zip(raw["test"]["tokens"], written):
                    f.write(" ".join(f"{w}/{t}" for w, t in zip(words, sentence_tags)) + "\n")
    if training_args.do_train:
        trainer.create_model_card()
        if training_args.push_to_hub:  # the final push carries the card with every split's results
            trainer.push_to_hub()
    if data_args.tag_text and trainer.is_world_process_zero():
        saved = training_args.output_dir if training_args.do_train else model_args.model_name_or_path
        base = model_args.model_name_or_path if training_args.do_train else None  # a LoRA run's base encoder
        results["tagged"] = tag_with_saved_model(saved, data_args.tag_text, training_args.output_dir, base)
    return results


def tag_with_saved_model(
    model_dir: str, text: str, output_dir: str, base_model_name_or_path: str | None = None
) -> list[dict]:
    """Load a saved model and processor through the Auto API, find the entities of ``text`` with the ``keplm-ner``
    pipeline, print them and save them to ``tagged_text.json`` (``base_model_name_or_path``: a LoRA adapter's base
    encoder, when the adapter names it without a local path)."""
    model = load_for_inference(model_dir, AutoModelForTokenClassification, base_model_name_or_path)
    ner = pipeline("keplm-ner", model=model, processor=AutoProcessor.from_pretrained(model_dir))
    entities = [{**entity, "score": float(entity["score"])} for entity in ner(text)]
    print(f"Entities found by {type(model).__name__} loaded from {model_dir}:")
    print("  " + (", ".join(f"{text[e['start'] : e['end']]} ({e['entity_group']})" for e in entities) or "none"))
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "tagged_text.json"), "w", encoding="utf-8") as f:
        json.dump({"text": text, "entities": entities}, f, indent=2, ensure_ascii=False)
    return entities


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
