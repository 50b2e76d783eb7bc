"""run_ner.py's training and linking options end to end on the tiny files (tests/test_run_scripts.py holds the files,
the helpers and the basic runs): fused AdamW with compile, sparse entity memory with row-wise AdaGrad, metrics in
percent, early stopping with the best checkpoint (NER and QA), arguments from a JSON file, the spaCy mention filter,
linking only the splits the stages use, and entity-memory initialisation from the encoder."""

from __future__ import annotations

import json

import pytest
import torch

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForTokenClassification, KalaProcessor
from keplm.training.arguments import parse_args
from keplm.training.metrics import ner_metrics
from keplm.training.recipes.kala import KnowledgeArguments
from tests.test_reliability_linking import SPACY_MODEL, needs_spacy
from tests.test_run_scripts import CONLL, KALA_ARGUMENTS, load_script, ner_args, qa_args, read_json, run_ner_main


@pytest.mark.slow
def test_run_ner_fused_adamw_compile_and_graph_padding(tiny, tmp_path):
    """optim=adamw_torch_fused and torch_compile (aot_eager: no C++ toolchain needed) with padded graphs, and the
    entity memory (dense gradients) on row-wise AdaGrad."""
    out = tmp_path / "compiled"
    run_ner_main(
        tiny,
        out,
        "relational",
        "--do_train",
        "--do_eval",
        "--optim",
        "adamw_torch_fused",
        "--torch_compile",
        "--torch_compile_backend",
        "aot_eager",
        "--graph_pad_to_multiple_of",
        "8",
        "--pad_to_multiple_of",
        "8",
        "--entity_memory_optimizer",
        "rowwise_adagrad",
    )
    results = read_json(out / "all_results.json")
    assert torch.isfinite(torch.tensor(results["train_loss"]))
    assert "eval_f1" in results


def test_run_ner_sparse_entity_memory_with_rowwise_adagrad(tiny, tmp_path):
    """--sparse_entity_memory through the Trainer: gradient clipping (max_grad_norm 1.0 by default) takes the
    sparse table gradient, and row-wise AdaGrad trains the table; --knowledge_warmup_steps reaches the schedule."""
    out = tmp_path / "sparse"
    run_ner_main(
        tiny,
        out,
        "relational",
        "--do_train",
        "--sparse_entity_memory",
        "--entity_memory_optimizer",
        "rowwise_adagrad",
        "--entity_memory_learning_rate",
        "0.05",
        "--max_grad_norm",
        "0.01",
        "--knowledge_warmup_steps",
        "2",
        "--logging_steps",
        "1",
    )
    results = read_json(out / "all_results.json")
    assert torch.isfinite(torch.tensor(results["train_loss"]))
    # the logged learning rate is the first group's (the encoder's, no warm-up): it starts at 1e-3
    rates = [h["learning_rate"] for h in read_json(out / "trainer_state.json")["log_history"] if "learning_rate" in h]
    assert rates[0] == pytest.approx(1e-3)


def test_run_ner_writes_metrics_in_percent(tiny, tmp_path):
    """Every results file and the log history hold seqeval's scores in percent (``metric_unit``): the word-level
    test scores are those of the written predictions, x 100; the counts stay counts."""
    out = tmp_path / "ner"
    run_ner_main(
        tiny,
        out,
        "vanilla",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--max_predict_samples",
        "2",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "3",
    )
    results = read_json(out / "all_results.json")
    for name in ("all", "train", "eval", "predict"):
        assert read_json(out / f"{name}_results.json")["metric_unit"] == "percent", name
    written = [
        [pair.rsplit("/", 1)[1] for pair in line.split()] for line in (out / "predictions.txt").read_text().splitlines()
    ]
    gold = [tags.split() for _, tags in CONLL["test"][:2]]
    expected = ner_metrics(written, gold, per_type=False)  # fractions, as seqeval computes them
    assert expected["accuracy"] > 0.0  # some words right: a fraction and its percent differ
    for key, value in expected.items():
        assert results[f"predict_{key}"] == pytest.approx(100 * value), key
    assert isinstance(results["predict_words_truncated"], int) and results["predict_samples"] == 2
    assert results["train_words_truncated"] == results["eval_words_truncated"] == 0  # counted on every split
    logged = [entry for entry in read_json(out / "trainer_state.json")["log_history"] if "eval_accuracy" in entry]
    assert logged and logged[-1]["eval_accuracy"] == pytest.approx(results["eval_accuracy"])  # same model, step 3


@pytest.mark.parametrize("task", ["ner", "qa"])
def test_run_stops_early_and_keeps_its_best_checkpoint(tiny, tmp_path, task):
    """--early_stopping_patience: with a learning rate of 0 validation F1 never improves, so training stops after
    1 + patience evaluations instead of --max_steps, and the best checkpoint is the model evaluated; without
    --load_best_model_at_end the option is a clear error."""
    out = tmp_path / "early"
    make_args = ner_args if task == "ner" else qa_args
    every_step = ["--eval_strategy", "steps", "--eval_steps", "1", "--save_steps", "1", "--save_total_limit", "1"]
    args = make_args(
        tiny,
        out,
        "relational",
        "--do_train",
        "--do_eval",
        "--learning_rate",
        "0",
        "--early_stopping_patience",
        "2",
        "--load_best_model_at_end",
        "--metric_for_best_model",
        "f1",
        *every_step,
    )
    args[args.index("--max_steps") + 1] = "20"
    args[args.index("--save_strategy") + 1] = "steps"
    load_script(f"run_{task}").main(args)
    state = read_json(out / "trainer_state.json")
    assert state["global_step"] == 3 and state["max_steps"] == 20
    assert read_json(out / "all_results.json")["eval_f1"] == state["best_metric"]
    assert state["best_model_checkpoint"].endswith("checkpoint-1")
    with pytest.raises(ValueError, match="needs --load_best_model_at_end"):
        parse_args(KALA_ARGUMENTS, ner_args(tiny, out, "relational", "--early_stopping_patience", "2"))


def test_parse_args_from_json_file(tiny, tmp_path):
    config = {
        "model_name_or_path": tiny["model"],
        "dataset_name": tiny["conll"],
        "output_dir": str(tmp_path),
        "system": "pointwise",
        "kg": tiny["kg"],
        "kfm_layers": [-1],
        "init_entity_memory": True,
    }
    path = tmp_path / "args.json"
    path.write_text(json.dumps(config))
    model_args, data_args, knowledge_args, training_args = parse_args(KALA_ARGUMENTS, [str(path)])
    assert knowledge_args.kfm_layers == [-1] and knowledge_args.init_entity_memory
    assert data_args.max_seq_length == 128 and training_args.output_dir == str(tmp_path)
    with pytest.raises(ValueError, match="annotation_files"):
        KnowledgeArguments(knowledge="annotations")


# ---------------------------------------------------------------------------------------------- shared pieces
@needs_spacy
def test_run_ner_links_through_the_spacy_filter(tiny, tmp_path):
    """--spacy_model reaches the linker of a run script: the saved processor (what the reloaded model links at
    inference) links only inside spaCy's entities of the chosen labels; "city", a KG name, is no longer a mention."""
    out = tmp_path / "spacy"
    run_ner_main(tiny, out, "relational", "--do_train", "--spacy_model", SPACY_MODEL, "--spacy_labels", "GPE", "LOC")
    config = read_json(out / "processor_config.json")
    assert config["linker_kwargs"]["spacy_model"] == SPACY_MODEL
    assert config["linker_kwargs"]["spacy_labels"] == ["GPE", "LOC"]
    text = "Paris is a city in France ."
    unfiltered = KalaProcessor(
        KalaProcessor.from_pretrained(out).tokenizer, KalaProcessor.from_pretrained(out).knowledge_assets
    )
    assert [m.text for m in unfiltered.link(text).entities] == ["Paris", "city", "France"]
    assert [m.text for m in KalaProcessor.from_pretrained(out).link(text).entities] == ["Paris", "France"]


def test_run_ner_links_only_the_splits_its_stages_use(tiny, tmp_path):
    """--do_train alone: the validation and test splits are neither linked nor featurised (no coverage numbers for
    them); --do_eval adds validation; the label list still comes from every split read."""
    run_ner = load_script("run_ner")
    trained = run_ner.main(ner_args(tiny, tmp_path / "train-only", "relational", "--do_train"))
    assert any(k.startswith("train_entities") for k in trained)
    assert not any(k.startswith(("validation_entities", "test_entities")) for k in trained)
    evaluated = run_ner.main(ner_args(tiny, tmp_path / "train-eval", "relational", "--do_train", "--do_eval"))
    assert any(k.startswith("validation_entities") for k in evaluated)
    assert not any(k.startswith("test_entities") for k in evaluated)


def test_run_ner_initialises_the_entity_memory_from_the_encoder(tiny, tmp_path):
    """--init_entity_memory (KALA appendix B.1) runs through the run script and moves the memory off its random
    initialisation before the first step."""

    run_ner = load_script("run_ner")
    out = tmp_path / "init"
    run_ner.main(
        ner_args(
            tiny, out, "pointwise", "--do_train", "--init_entity_memory", "--max_steps", "1", "--learning_rate", "1e-12"
        )
    )
    plain = tmp_path / "plain"
    run_ner.main(ner_args(tiny, plain, "pointwise", "--do_train", "--max_steps", "1", "--learning_rate", "1e-12"))
    memory = {
        name: KalaForTokenClassification.from_pretrained(path).kala.entity_memory.embeddings.weight.detach()
        for name, path in (("init", out), ("plain", plain))
    }
    assert not torch.allclose(memory["init"][1:], memory["plain"][1:])
