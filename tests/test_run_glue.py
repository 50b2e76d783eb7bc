"""run_scripts/run_glue.py end to end on a tiny model and tiny RTE-like files: the three systems, the roof variants,
cached knowledge encoding, and the knowledge statistics in the results."""

from __future__ import annotations

import csv
import json

import pytest

from .run_args import QUIET_RUN
from .test_run_scripts import ARTICLE_SPLIT, load_script, tiny_run_args, write_tiny_files

PAIRS = [
    ("paris is the capital of france .", "paris is in france .", 0),
    ("berlin is a city in germany .", "berlin is in england .", 1),
    ("john lives in london .", "london is a city .", 0),
    ("mary visited new york .", "new york is in usa .", 0),
    ("the seine flows through paris .", "the thames flows through paris .", 1),
    ("acme bank is in berlin .", "who works for acme bank ?", 1),
]


def write_glue_files(root) -> dict[str, str]:
    """RTE-like train / validation CSV files of PAIRS under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, rows in (("train", PAIRS), ("validation", PAIRS[:4])):
        path = root / f"{split}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence1", "sentence2", "label", "idx"])
            writer.writerows([a, b, label, i] for i, (a, b, label) in enumerate(rows))
        files[split] = str(path)
    return files


@pytest.fixture(scope="module")
def glue_files(tmp_path_factory, tokenizer, kg):
    root = tmp_path_factory.mktemp("glue")
    return write_tiny_files(root / "tiny", tokenizer, kg), write_glue_files(root)


def glue_args(tiny, files, out, *extra):
    return [
        "--model_name_or_path",
        tiny["model"],
        "--task_name",
        "rte",
        "--train_file",
        files["train"],
        "--validation_file",
        files["validation"],
        "--kg",
        tiny["kg"],
        "--output_dir",
        str(out),
        "--do_train",
        "--do_eval",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "3",
        "--max_seq_length",
        "32",
        "--max_knowledge_length",
        "48",
        "--fusion_layers",
        "1",
        "--selection",
        "no_tail",
        *QUIET_RUN,
        "--use_cpu",
        *extra,
    ]


@pytest.mark.parametrize(
    "extra",
    [
        ["--system", "bert"],
        ["--system", "bert_with_knowledge"],
        ["--system", "roof", "--fusion", "transformer"],
        ["--system", "roof", "--fusion", "lstm", "--segmentation", "type1"],
        ["--system", "roof", "--cached_knowledge_encoder"],
    ],
)
def test_run_glue_systems(glue_files, tmp_path, extra):
    tiny, files = glue_files
    if "--cached_knowledge_encoder" in extra:
        extra = [*extra, "--knowledge_cache_dir", str(tmp_path / "cache")]
    results = load_script("run_glue").main(glue_args(tiny, files, tmp_path / "out", *extra))
    # in percent: a multiple of 25 on the 4 validation pairs (labels 0 1 0 0: any constant guess gets 25 or 75)
    assert results["eval_accuracy"] in (25.0, 50.0, 75.0, 100.0)
    saved = json.loads((tmp_path / "out" / "all_results.json").read_text())
    evaluated = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert saved["metric_unit"] == evaluated["metric_unit"] == "percent"
    assert evaluated["eval_accuracy"] == saved["eval_accuracy"] == results["eval_accuracy"]
    if "roof" in extra:
        assert saved["knowledge_train_share_with_knowledge"] > 0.5 and saved["knowledge_train_kept"] > 0
    if "bert_with_knowledge" in extra:
        assert saved["knowledge_train_appended_tokens_per_example"] > 0
    if "--cached_knowledge_encoder" in extra:
        assert list((tmp_path / "cache").rglob("*.safetensors"))  # encodings persisted for the next run
    assert (tmp_path / "out" / "README.md").is_file()


def _roof_qa_args(tiny, out, *extra):
    return [
        *("--model_type", "roof_transformer"),  # first: a test drops it to read the type from a checkpoint
        *tiny_run_args(tiny, "squad", out),
        *("--kg", tiny["kg"], *ARTICLE_SPLIT, "--selection", "no_tail", "--max_seq_length", "32", "--doc_stride", "8"),
        *("--max_knowledge_length", "24", "--fusion_layers", "1", "--per_device_eval_batch_size", "3"),
        *extra,
    ]


def test_run_qa_trains_roof_with_squad_post_processing(glue_files, tmp_path):
    """run_qa --model_type roof_transformer: the SQuAD article split and n-best post-processing of KALA's runs, answers
    from the context, knowledge statistics per example; the saved checkpoint is found as Roof and gives the same
    answers when it is evaluated again (model type from its config)."""
    tiny, _ = glue_files
    from keplm.io_utils import read_json

    run_qa = load_script("run_qa")
    out = tmp_path / "roof"
    results = run_qa.main(_roof_qa_args(tiny, out, "--do_train", "--do_eval", "--do_predict"))
    assert 0.0 <= results["eval_f1"] <= 100.0 and "predict_exact_match" in results
    assert read_json(out / "predict_results.json")["metric_unit"] == "percent"  # SQuAD EM/F1: percent, as before
    predictions = read_json(out / "eval_predictions.json")
    assert set(predictions) == {"q2-0", "q2-1"}
    assert results["knowledge_validation_examples"] == 2  # windows of one question counted once
    assert results["knowledge_train_windows_examples"] >= 4
    assert read_json(out / "config.json")["model_type"] == "roof_transformer"

    again = tmp_path / "again"
    args = _roof_qa_args(tiny, again, "--do_eval")[2:]  # no --model_type: the checkpoint says Roof
    args[args.index("--model_name_or_path") + 1] = str(out)
    run_qa.main(args)
    assert read_json(again / "eval_predictions.json") == predictions


def test_run_qa_rejects_appended_knowledge(glue_files, tmp_path):
    tiny, _ = glue_files
    with pytest.raises(ValueError, match="bert_with_knowledge"):
        load_script("run_qa").main(_roof_qa_args(tiny, tmp_path, "--system", "bert_with_knowledge", "--do_train"))


def test_table_handles_ablations_run_with_fewer_seeds(monkeypatch, capsys, tmp_path):
    """python -m harness.experiments table: mean ± std over the seeds that ran a system; a system with fewer seeds
    (one-seed
    ablations) says how many in its header; GLUE metrics in % whichever unit a record has, selection statistics per
    example."""

    from harness import experiments

    def summary(seed, results):
        return {
            "settings": {"task": "mrpc", "seed": seed, "systems": list(results)},
            "results": results,
            "durations_s": {system: 100.0 * seed for system in results},
        }

    full = {
        "bert": {"eval_accuracy": 0.7, "eval_f1": 0.8},
        "roof": {
            "eval_accuracy": 0.72,
            "eval_f1": 0.82,
            "knowledge_train_share_with_knowledge": 0.1,
            "knowledge_train_cut": 50,
            "knowledge_train_examples": 100,
        },
    }
    paths = []
    # seed 2 as the run scripts write now (metric_unit: percent), seed 1 as the old records (GLUE fractions)
    new = {
        k: {
            **v,
            "eval_accuracy": 100 * (v["eval_accuracy"] + 0.02),
            "eval_f1": 100 * v["eval_f1"],
            "metric_unit": "percent",
        }
        for k, v in full.items()
    }
    for seed, results in ((1, {**full, "roof_lstm": {"eval_accuracy": 0.69}}), (2, new)):
        paths.append(tmp_path / f"seed{seed}.json")
        paths[-1].write_text(json.dumps(summary(seed, results)))
    experiments.main(["table", *map(str, paths)])
    out = capsys.readouterr().out
    assert "| metric | bert | roof | roof_lstm (1 seed) |" in out
    assert "| validation accuracy | 71.00 ± 1.41 | 73.00 ± 1.41 | 69.00 |" in out  # one seed: no spread shown
    assert "| validation F1 | 80.00 ± 0.00 | 82.00 ± 0.00 | n/a |" in out  # each record read in its own unit
    assert "| train triples cut per example | n/a | 0.50 ± 0.00 | n/a |" in out
    assert "| wall time per run (s) | 150 ± 71 | 150 ± 71 | 100 |" in out


def test_run_glue_refuses_unlabelled_training_data_before_linking(glue_files, tmp_path):
    """A training file without its label column loads as unlabelled (-1) rows: the run stops before linking and
    training with the split and the count, instead of a class -1 reaching the loss; labels outside the task's label
    set name the file and line."""
    tiny, files = glue_files
    unlabelled = tmp_path / "train.csv"
    unlabelled.write_text("sentence1,sentence2\nparis is in france .,france has paris .\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"the train split has 1 of 1 rows without a label"):
        load_script("run_glue").main(glue_args(tiny, {**files, "train": str(unlabelled)}, tmp_path / "out"))
    assert not (tmp_path / "out" / "all_results.json").exists()
    outside = tmp_path / "outside.csv"
    outside.write_text("sentence1,sentence2,label\nparis is in france .,france has paris .,7\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"outside.csv:2: label '7' is neither a class id below 2"):
        load_script("run_glue").main(glue_args(tiny, {**files, "train": str(outside)}, tmp_path / "out2"))


def test_a_roof_checkpoint_and_its_processor_share_one_kg_in_a_run(glue_files, tmp_path):
    """Fine-tuning a Roof-Transformer checkpoint loads its KG once: the model takes the processor's assets (loaded
    from the same checkpoint) instead of a second copy."""
    from transformers import AutoModelForSequenceClassification

    from keplm.training.arguments import ModelArguments
    from keplm.training.recipes.roof_transformer import (
        RoofArguments,
        build_roof_model,
        prepare_roof_knowledge,
    )

    tiny, files = glue_files
    first = tmp_path / "first"
    load_script("run_glue").main(glue_args(tiny, files, first, "--system", "roof", "--fusion", "transformer"))
    model_args = ModelArguments(model_name_or_path=str(first))
    roof_args = RoofArguments(system="roof")
    processor, _ = prepare_roof_knowledge(model_args, roof_args, {}, ())
    model = build_roof_model(AutoModelForSequenceClassification, model_args, roof_args, processor)
    assert processor.knowledge_assets.kg is not None
    assert model.knowledge_assets is processor.knowledge_assets


def test_run_glue_counts_examples_cut_at_max_seq_length(glue_files, tmp_path, tokenizer, caplog):
    """Pairs longer than ``--max_seq_length`` tokens are counted per split (``train_examples_truncated``,
    ``eval_examples_truncated`` in the results) and a WARNING names the split; at a length every pair fits, 0."""
    import logging

    tiny, files = glue_files
    lengths = [len(tokenizer(a, b)["input_ids"]) for a, b, _ in PAIRS]
    short = 14
    assert 0 < sum(n > short for n in lengths) < len(PAIRS)  # some pairs cut, some not
    args = glue_args(tiny, files, tmp_path / "out", "--system", "bert")
    args[args.index("--max_seq_length") + 1] = str(short)
    with caplog.at_level(logging.WARNING):
        results = load_script("run_glue").main(args)
    assert results["train_examples_truncated"] == sum(n > short for n in lengths)
    assert results["eval_examples_truncated"] == sum(n > short for n in lengths[:4])
    saved = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert saved["train_examples_truncated"] == results["train_examples_truncated"]
    assert any("train:" in r.getMessage() and "--max_seq_length 14" in r.getMessage() for r in caplog.records)
    full = load_script("run_glue").main(glue_args(tiny, files, tmp_path / "fits", "--system", "bert"))
    assert max(lengths) <= 32 and full["train_examples_truncated"] == full["eval_examples_truncated"] == 0
