#!/usr/bin/env python
"""Fine-tune KALA on an encoder-decoder model (T5, BART) for generative QA (KALA section 5.6), in the style of Hugging
Face's ``run_seq2seq_qa.py``: answers are generated and scored with the official SQuAD v1.1 EM/F1.

    python run_scripts/run_generative_qa.py --model_name_or_path t5-small \\
        --dataset_name ../shared/data/squad_v1.1/dev-v1.1.json.gz --split_by_article 38 5 5 \\
        --kg trex:../shared/data/lama --system relational --optim adafactor --learning_rate 1e-4 \\
        --knowledge_optimizer adamw --knowledge_learning_rate 1e-4 --num_train_epochs 4 \\
        --do_train --do_eval --do_predict --output_dir outputs/generative_qa

The data options are ``run_qa.py``'s (``--dataset_name`` / ``--train_file`` / ``--validation_file`` / ``--test_file``,
``--split_by_article``); each question becomes one input ``question: <q> context: <c>`` (cut at ``--max_seq_length``
tokens) whose context the method's processor links against the KG, and its first gold answer the target.
``--optim adafactor --knowledge_optimizer adamw`` is the paper's setup (T5 with Adafactor, the knowledge modules with
an AdamW of their own, weight decay 0.01). ``--model_type`` picks another registered method whose run recipe trains
the ``generative_qa`` task.
"""

from __future__ import annotations

import logging
from pathlib import Path

import transformers

from keplm.training import runtime
from keplm.training.arguments import (
    GenerativeQaDataArguments,
    KeplmSeq2SeqTrainingArguments,
    ModelArguments,
    parse_args,
)
from keplm.training.knowledge_setup import Featurizer
from keplm.training.run_recipe import MethodChoice, choose_recipe
from keplm.training.trainer_seq2seq import GenerativeQuestionAnsweringTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)

TASK = "generative_qa"


def main(args: list[str] | None = None) -> dict:
    """Train / evaluate / predict one method (``--model_type``, default: the checkpoint's, else KALA) on generative
    QA: its run recipe prepares the knowledge and builds the encoder-decoder model; inputs, generated answers and
    EM/F1 are the task's."""
    model_type, recipe_class = choose_recipe(args, default="kala")
    _, model_args, data_args, method_args, training_args = parse_args(
        (
            MethodChoice,
            ModelArguments,
            GenerativeQaDataArguments,
            recipe_class.arguments,
            KeplmSeq2SeqTrainingArguments,
        ),
        args,
    )
    recipe = recipe_class(model_type, model_args, method_args, TASK)
    runtime.start_run(training_args, model_args.model_name_or_path)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.max_answer_length

    raw, data_report = runtime.load_qa_splits(data_args)
    runtime.check_splits(raw, training_args, runtime.QA_SPLIT_HINT)
    raw = runtime.used_splits(raw, training_args)
    with training_args.main_process_first(desc="knowledge"):
        processor, raw = recipe.prepare(raw, ["context"], data_args.preprocessing_num_workers)
    model = recipe.build_model(processor)
    processor = recipe.finish(processor, model)
    features = runtime.build_features(
        raw,
        lambda split: Featurizer(
            processor,
            "prepare_generative_qa_features",
            with_knowledge=recipe.reads_knowledge(model),
            max_length=data_args.max_seq_length,
            max_target_length=data_args.max_answer_length,
            **recipe.feature_options(processor, data_args),
        ),
        data_args,
        training_args,
    )
    cut = count_answers_cut(features, data_args.max_seq_length)
    trainer_kwargs = runtime.trainer_arguments(
        recipe, processor, model, raw, features, model_args, data_args, training_args, CARD_FACTS
    )
    model = trainer_kwargs["model"]
    trainer = GenerativeQuestionAnsweringTrainer(
        **trainer_kwargs,
        eval_examples=raw["validation"] if training_args.do_eval else None,
    )
    data_results = recipe.data_results(processor, raw, features, model)
    data_results.update(runtime.flatten(data_report, "data"))
    data_results.update(cut)

    return runtime.qa_train_evaluate_predict(trainer, training_args, raw, features, data_results, recipe)


def count_answers_cut(features: dict, max_seq_length: int) -> dict:
    """``{<split>_answers_cut: n}``: questions whose first answer lies (partly) beyond the --max_seq_length cut of
    their input (the model cannot read it there; contexts are cut, not windowed), logged; the features' own
    ``answer_cut`` column is dropped before the Trainer sees the features."""
    counts = {}
    for split, dataset in list(features.items()):
        if "answer_cut" not in dataset.column_names:
            continue
        counts[f"{split}_answers_cut"] = cut = int(sum(dataset["answer_cut"]))
        if cut:
            logger.warning(
                "%s: %d of %d questions have their answer beyond the first %d tokens of 'question: ... "
                "context: ...' (the input is cut there); --max_seq_length sets the cut",
                split,
                cut,
                len(dataset),
                max_seq_length,
            )
        features[split] = dataset.remove_columns("answer_cut")
    return counts


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
