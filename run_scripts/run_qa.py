#!/usr/bin/env python
"""Fine-tune KALA (or a baseline) for extractive QA (SQuAD v1.1), in the style of Hugging Face's ``run_qa.py``.

    python run_scripts/run_qa.py --model_name_or_path <encoder> \\
        --dataset_name ../shared/data/squad_v1.1/dev-v1.1.json.gz --split_by_article 38 5 5 \\
        --kg trex:../shared/data/lama --system relational --do_train --do_eval --do_predict --output_dir outputs/qa

``--model_type`` picks another registered method with a run recipe: ``--model_type roof_transformer --system roof``
trains Roof-Transformer (its knowledge: the triples selected from each context, ``--selection`` /
``--verbalization`` / ``--fusion`` as in ``run_glue.py``); ``--help`` lists the chosen method's options.

A single SQuAD file (e.g. the dev-only v1.1 file) is split by article into train/validation/test with
``--split_by_article`` (38 5 5 for SQuAD v1.1 dev); explicit ``--train_file``/``--validation_file``/``--test_file``
or a Hub dataset id work too.
Contexts are cut into ``--max_seq_length`` windows with ``--doc_stride`` overlap; answers are pooled over
windows with n-best post-processing and scored with the official SQuAD v1.1 EM/F1.
"""

from __future__ import annotations

import logging
from pathlib import Path

import transformers

from keplm.training import runtime
from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, QaDataArguments, parse_args
from keplm.training.knowledge_setup import Featurizer
from keplm.training.run_recipe import MethodChoice, choose_recipe
from keplm.training.trainer_qa import QuestionAnsweringTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)


def main(args: list[str] | None = None) -> dict:
    """Train / evaluate / predict one method (``--model_type``, default: the checkpoint's, else KALA) on QA: its run
    recipe prepares the knowledge and builds the model; windows, n-best answers and EM/F1 are the task's."""
    model_type, recipe_class = choose_recipe(args, default="kala")
    _, model_args, data_args, method_args, training_args = parse_args(
        (MethodChoice, ModelArguments, QaDataArguments, recipe_class.arguments, KeplmTrainingArguments), args
    )
    recipe = recipe_class(model_type, model_args, method_args, "qa")
    runtime.start_run(training_args, model_args.model_name_or_path)

    raw, data_report = runtime.load_qa_splits(data_args)
    runtime.check_splits(raw, training_args, runtime.QA_SPLIT_HINT)
    raw = runtime.used_splits(raw, training_args)
    with training_args.main_process_first(desc="knowledge"):
        processor, raw = recipe.prepare(raw, ["context"], data_args.preprocessing_num_workers)
    check_window(processor, data_args)
    model = recipe.build_model(processor)
    runtime.check_max_seq_length(data_args.max_seq_length, model)
    processor = recipe.finish(processor, model)
    features = runtime.build_features(
        raw,
        lambda split: Featurizer(
            processor,
            "prepare_qa_features",
            with_knowledge=recipe.reads_knowledge(model),
            max_length=data_args.max_seq_length,
            doc_stride=data_args.doc_stride,
            training=split == "train",
            **recipe.feature_options(processor, data_args),
        ),
        data_args,
        training_args,
    )
    trainer_kwargs = runtime.trainer_arguments(
        recipe, processor, model, raw, features, model_args, data_args, training_args, CARD_FACTS
    )
    model = trainer_kwargs["model"]
    trainer = QuestionAnsweringTrainer(
        **trainer_kwargs,
        eval_examples=raw["validation"] if training_args.do_eval else None,
        n_best_size=data_args.n_best_size,
        max_answer_length=data_args.max_answer_length,
    )
    data_results = recipe.data_results(processor, raw, features, model)
    data_results.update(runtime.flatten(data_report, "data"))

    return runtime.qa_train_evaluate_predict(trainer, training_args, raw, features, data_results, recipe)


def check_window(processor, data_args: QaDataArguments) -> None:
    if processor.tokenizer.model_max_length < data_args.max_seq_length:
        raise ValueError(
            f"--max_seq_length {data_args.max_seq_length} exceeds the tokenizer's "
            f"model_max_length {processor.tokenizer.model_max_length}"
        )


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
