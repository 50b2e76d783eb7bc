"""run_scripts/run_qa.py end to end on the tiny files of tests/test_run_scripts.py: every system, and a reloaded
checkpoint answers as the run did."""

from __future__ import annotations

import pytest
from transformers import AutoModelForQuestionAnswering

import keplm  # noqa: F401  (registers the Auto classes)
from keplm.training.metrics import squad_v1_metrics
from tests.test_run_scripts import (
    ARTICLES,
    SYSTEMS,
    load_script,
    qa_args,
    read_json,
)


@pytest.mark.parametrize("system", SYSTEMS)
def test_run_qa_end_to_end(tiny, tmp_path, system):
    out = tmp_path / system
    run_qa = load_script("run_qa")
    run_qa.main(
        qa_args(
            tiny, out, system, "--do_train", "--do_eval", "--do_predict", "--train_sampling_strategy", "group_by_length"
        )
    )
    results = read_json(out / "all_results.json")
    for key in ("train_loss", "eval_exact_match", "eval_f1", "eval_samples", "predict_exact_match", "predict_f1"):
        assert key in results, key
    assert 0.0 <= results["eval_f1"] <= 100.0
    predictions = read_json(out / "eval_predictions.json")
    assert set(predictions) == {"q2-0", "q2-1"}  # one answer per validation question (article 3)
    context = ARTICLES[2][1]
    assert all(answer in context for answer in predictions.values())
    assert set(read_json(out / "predict_predictions.json")) == {"q3-0", "q3-1"}
    # SQuAD EM/F1 in percent, as every run script's metrics: the official script on the written answers, and the
    # results files say their unit
    gold = {f"q2-{i}": [answer] for i, (_, answer) in enumerate(ARTICLES[2][2])}
    expected = squad_v1_metrics(predictions, gold)
    assert results["eval_exact_match"] == pytest.approx(expected["exact_match"])
    assert results["eval_f1"] == pytest.approx(expected["f1"])
    for name in ("all", "eval", "predict"):
        assert read_json(out / f"{name}_results.json")["metric_unit"] == "percent", name
    results = read_json(out / "all_results.json")
    assert results["predict_seen_examples"] + results["predict_unseen_examples"] == 2
    model = AutoModelForQuestionAnswering.from_pretrained(out)
    assert model.config.retrieval_mode == {"vanilla": "none", "more_params": "none"}.get(system, system)
    if system in ("pointwise", "relational"):
        assert model.config.kfm_layers == [-4, -2]  # DEFAULT_KFM_LAYERS["qa"]


def test_run_qa_reloaded_checkpoint_gives_same_answers(tiny, tmp_path):
    run_qa = load_script("run_qa")
    first = tmp_path / "first"
    run_qa.main(qa_args(tiny, first, "relational", "--do_train", "--do_eval"))
    second = tmp_path / "second"
    args = qa_args(tiny, second, "relational", "--do_eval")
    args[args.index("--model_name_or_path") + 1] = str(first)
    run_qa.main(args)
    assert read_json(second / "eval_predictions.json") == read_json(first / "eval_predictions.json")


def test_run_qa_with_no_room_for_the_context_names_the_question(tiny, tmp_path):
    """``--max_seq_length 8``: the questions leave the context windows no room beyond ``--doc_stride``, a ValueError
    naming a question, its tokens, max_length and doc_stride before any training (not the tokenizer's truncation
    error or stride panic)."""
    args = qa_args(tiny, tmp_path / "out", "vanilla", "--do_train")
    args[args.index("--max_seq_length") + 1] = "8"
    args[args.index("--doc_stride") + 1] = "2"
    with pytest.raises(ValueError, match=r"question \d+ \(.*\) takes \d+ of max_length=8 tokens.*doc_stride=2"):
        load_script("run_qa").main(args)
    assert not (tmp_path / "out" / "all_results.json").exists()
