"""keplm's model card written by the Trainer (``KeplmTrainer.create_model_card`` and its card callback): the run's
hyper-parameters, results and figures. The card's own pieces are tested in tests/test_card.py."""

from __future__ import annotations

from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

from keplm import (
    KalaProcessor,
)

from .run_args import cpu_training_args
from .test_card import LABELS, _ner_model, assert_publishable


# ---------------------------------------------------------------------------------------------- the Trainer
def test_trainer_create_model_card_writes_card_and_figures(tmp_path, tokenizer, assets):
    """A tiny KeplmTrainer run: create_model_card writes README.md with the run's hyper-parameters, knowledge
    options, linking coverage and results, and the figures it links (what push_to_hub then uploads)."""
    import datasets

    from keplm import KeplmDataCollator
    from keplm.training.compute_metrics import NerComputeMetrics
    from keplm.training.model_card import KeplmCardCallback
    from keplm.training.recipes.kala import KnowledgeArguments
    from keplm.training.tagging import argmax_logits
    from keplm.training.trainer import KeplmTrainer

    processor = KalaProcessor(tokenizer, assets)
    sentences = [
        ("john lives in paris".split(), [3, 0, 0, 1]),
        ("mary visited berlin and london".split(), [3, 0, 1, 0, 1]),
        ("the seine flows through france".split(), [0, 1, 0, 0, 1]),
    ]
    examples = {"tokens": [w for w, _ in sentences], "ner_tags": [t for _, t in sentences]}
    features = datasets.Dataset.from_dict(processor.prepare_ner_features(examples))
    model = _ner_model(tokenizer, assets).train()
    knowledge_args = vars(
        KnowledgeArguments(
            kg="fb15k237:../shared/data/kg/fb15k-237", link_case_sensitive=True, knowledge_learning_rate=1e-3
        )
    )
    args = cpu_training_args(
        tmp_path / "out", max_steps=4, per_device_train_batch_size=2, learning_rate=1e-3, logging_steps=1, seed=7
    )
    trainer = KeplmTrainer(
        model=model,
        args=args,
        train_dataset=features,
        eval_dataset=features,
        processing_class=processor,
        data_collator=KeplmDataCollator.from_processor(processor, model),
        compute_metrics=NerComputeMetrics(LABELS),
        preprocess_logits_for_metrics=argmax_logits,
        parameter_group_options={"knowledge_learning_rate": 1e-3},
        card_data={
            "base_model": "org/bert-tiny",
            "dataset": "eriktks/conll2003",
            "command": ["python", "run_scripts/run_ner.py", "--tag_text", "a b"],
            "knowledge_args": knowledge_args,
            "train_linked_share": 2 / 3,
            "language": "en",
        },
    )
    assert any(isinstance(callback, KeplmCardCallback) for callback in trainer.callback_handler.callbacks)
    trainer.train()
    recorded = trainer.card_data  # what the callback recorded as training happened
    assert recorded.steps == 4 and recorded.hyperparameters["seed"] == 7 and recorded.device == "CPU"
    assert recorded.train_runtime > 0 and any("loss" in entry for entry in recorded.log_history)
    metrics = trainer.evaluate()
    assert recorded.metrics["eval_f1"] == metrics["eval_f1"] and "eval_runtime" not in recorded.metrics  # on_evaluate
    trainer.save_metrics("eval", dict(metrics, eval_samples=3))
    trainer.create_model_card(license="apache-2.0", tags=["from-test"])
    out = tmp_path / "out"
    text = (out / "README.md").read_text()
    data = ModelCard(text).data
    assert data.library_name == "keplm" and data.license == "apache-2.0" and "from-test" in data.tags
    assert data.pipeline_tag == "token-classification" and data.base_model == "org/bert-tiny"
    _, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert {r.dataset_split for r in results} == {"validation"}
    for row in (
        "| learning_rate | 0.001 |",  # transformers' own card table (extract_hyperparameters_from_trainer)
        "| training_steps | 4 |",
        "| seed | 7 |",
        "| train_batch_size | 2 |",
        "| knowledge learning rate | 0.001 |",  # the method's knowledge options
        "| case-sensitive linking | yes |",
    ):
        assert row in text, row
    assert "66.7 % of the training examples have at least one linked mention" in text
    assert "Run: 4 optimizer steps" in text and "on CPU" in text and " s of training." in text
    assert "python run_scripts/run_ner.py --tag_text 'a b'" in text
    # NerComputeMetrics reports percent, and the card prints it as it came (not x100 as an old seqeval record)
    assert 1.0 < metrics["eval_accuracy"] <= 100.0
    assert (
        f"| validation | 3 | {metrics['eval_f1']:.2f} | {metrics['eval_precision']:.2f} | "
        f"{metrics['eval_recall']:.2f} | {metrics['eval_accuracy']:.2f} |"
    ) in text
    for name in ("entity_frequency.png", "kfm_modulation.png", "training_curves.png"):
        assert (out / "figures" / name).is_file() and f"(figures/{name})" in text, name
    assert_publishable(text, str(tmp_path))
