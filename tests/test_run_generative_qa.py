"""run_scripts/run_generative_qa.py end to end on a tiny random T5 built in code (KALA 5.6): SQuAD files split by
article, the context linked against the KG, KFM in T5's encoder, the paper's optimizers (Adafactor for T5, an AdamW
of their own for the knowledge modules), answers generated with beams and scored with SQuAD EM/F1, the model saved
with its knowledge assets and card, and reloaded through AutoModelForSeq2SeqLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, T5ForConditionalGeneration

from keplm import KalaForConditionalGeneration, KalaProcessor

from .seq2seq_fixtures import seq2seq_tokenizer, t5_config
from .test_run_scripts import ARTICLE_SPLIT, ARTICLES, load_script, read_json, tiny_run_args, write_tiny_files


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory, tokenizer, kg) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny-t5")
    files = write_tiny_files(root, tokenizer, kg)
    torch.manual_seed(0)
    s2s_tokenizer = seq2seq_tokenizer()
    T5ForConditionalGeneration(t5_config(len(s2s_tokenizer), layers=4)).save_pretrained(root / "t5")
    s2s_tokenizer.save_pretrained(root / "t5")
    return {**files, "model": str(root / "t5")}


def generative_qa_args(tiny, out, *extra) -> list[str]:
    return [
        *tiny_run_args(tiny, "squad", out),
        *ARTICLE_SPLIT,
        *("--kg", tiny["kg"], "--system", "relational"),
        *("--max_seq_length", "64", "--max_answer_length", "6", "--per_device_eval_batch_size", "3"),
        *("--learning_rate", "1e-3", "--optim", "adafactor"),
        *("--knowledge_optimizer", "adamw", "--knowledge_learning_rate", "1e-3", "--generation_num_beams", "2"),
        *extra,
    ]


def test_run_generative_qa_end_to_end(tiny_t5, tmp_path):
    out = tmp_path / "t5"
    load_script("run_generative_qa").main(generative_qa_args(tiny_t5, out, "--do_train", "--do_eval", "--do_predict"))
    results = read_json(out / "all_results.json")
    for key in (
        "train_loss",
        "eval_exact_match",
        "eval_f1",
        "eval_samples",
        "predict_exact_match",
        "predict_f1",
        "predict_seen_examples",
    ):
        assert key in results, key
    assert 0.0 <= results["eval_f1"] <= 100.0 and 0.0 <= results["predict_exact_match"] <= 100.0
    eval_predictions = read_json(out / "eval_predictions.json")
    assert set(eval_predictions) == {"q2-0", "q2-1"}  # one generated answer per validation question (article 3)
    assert all(isinstance(answer, str) for answer in eval_predictions.values())
    assert set(read_json(out / "predict_predictions.json")) == {"q3-0", "q3-1"}

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    assert type(model) is KalaForConditionalGeneration and model.config.kfm_layers == [-4, -2]
    assert model.config.retrieval_mode == "relational" and model.knowledge_assets.num_entities > 1
    card = (out / "README.md").read_text()
    assert "pipeline_tag: text2text-generation" in card and "AutoModelForSeq2SeqLM.from_pretrained" in card
    assert 'pipeline("keplm-text2text"' in card and "knowledge optimizer" in card.lower()
    # the saved processor and model answer a validation question as the run did (same inputs, beams, length)
    processor = KalaProcessor.from_pretrained(out)
    title, context, questions = ARTICLES[2]
    features = processor.prepare_generative_qa_features(
        {"question": [questions[0][0]], "context": [context], "answers": [{"text": [], "answer_start": []}]},
        max_length=64,
    )
    inputs = processor.as_tensors({k: v[0] for k, v in features.items() if k not in ("labels", "answer_cut")})
    with torch.no_grad():
        ids = model.generate(**inputs, num_beams=2, max_length=6)
    answer = processor.tokenizer.decode(ids[0], skip_special_tokens=True).strip()
    assert answer == eval_predictions["q2-0"]
    assert not list(Path(out).glob("*.bin")) and not list(Path(out).glob("*.pkl"))


def test_answers_beyond_the_cut_are_counted_and_extractive_options_refused(tiny_t5, tmp_path, caplog):
    """Inputs are cut at --max_seq_length tokens, not windowed: questions whose answer lies beyond the cut are
    counted in the results and logged (none at 64 tokens, some at 12); --doc_stride / --n_best_size (extractive-QA
    options) are a ValueError, not silently ignored."""
    run = load_script("run_generative_qa").main
    whole = run(generative_qa_args(tiny_t5, tmp_path / "whole", "--do_train", "--max_steps", "1"))
    assert whole["train_answers_cut"] == 0
    args = generative_qa_args(tiny_t5, tmp_path / "cut", "--do_train", "--max_steps", "1")
    args[args.index("--max_seq_length") + 1] = "12"
    with caplog.at_level("WARNING"):
        cut = run(args)
    assert 0 < cut["train_answers_cut"] <= cut["train_samples"]
    assert "have their answer beyond the first 12 tokens" in caplog.text
    for option in ("--doc_stride", "--n_best_size"):
        with pytest.raises(ValueError, match=f"{option} is an extractive-QA option"):
            run(generative_qa_args(tiny_t5, tmp_path / "refused", "--do_train", option, "8"))
