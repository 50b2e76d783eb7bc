"""SemEval-2010 Task 8 (TRELM's downstream task): the release reader, entity marking, the official score against
hand computations, run_scripts/run_relation_classification.py on a tiny TRELM checkpoint, python -m harness.experiments
trelm-semeval and run summaries split over several files."""

from __future__ import annotations

import gzip
import json
import logging
import random

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, EvalPrediction, TrainingArguments

from keplm import TrelmProcessor
from keplm.data.semeval import SEMEVAL_LABELS, SEMEVAL_RELATIONS, load_semeval2010_task8, mark_entities
from keplm.training.arguments import ModelArguments, parse_args
from keplm.training.compute_metrics import RelationClassificationComputeMetrics
from keplm.training.metrics import semeval_task8_metrics

from .run_args import QUIET_RUN
from .test_run_scripts import load_script
from .test_trelm import make_model

# a toy task the label of which the words decide: "capital of" (e1 in e2), "lives in" (e1 goes to e2), else Other
TOY = [
    ("<e1>paris</e1> is the capital of <e2>france</e2> .", "Member-Collection(e1,e2)"),
    ("<e1>berlin</e1> is the capital of <e2>germany</e2> .", "Member-Collection(e1,e2)"),
    ("<e1>london</e1> is the capital of <e2>england</e2> .", "Member-Collection(e1,e2)"),
    ("<e1>john</e1> lives in <e2>paris</e2> .", "Entity-Destination(e1,e2)"),
    ("<e1>mary</e1> lives in <e2>berlin</e2> .", "Entity-Destination(e1,e2)"),
    ("<e1>john</e1> lives in <e2>london</e2> .", "Entity-Destination(e1,e2)"),
    ("<e1>john</e1> works for acme <e2>bank</e2> .", "Other"),
    ("<e1>mary</e1> works for the <e2>bank</e2> .", "Other"),
]


def write_release(path, rows, crlf=True, start=1):
    newline = "\r\n" if crlf else "\n"
    text = "".join(
        f'{start + i}\t"{sentence}"{newline}{label}{newline}Comment:{newline}{newline}'
        for i, (sentence, label) in enumerate(rows)
    )
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
            f.write(text)
    else:
        path.write_text(text, newline="")
    return path


def test_release_folder_reads_spans_and_holds_out_a_seeded_sample_of_training_sentences(tmp_path):
    write_release(tmp_path / "SemEval2010_task8_training__TRAIN_FILE.TXT.gz", TOY)
    write_release(tmp_path / "SemEval2010_task8_testing_keys__TEST_FILE_FULL.TXT", TOY[:3], crlf=False, start=9)
    (tmp_path / "SemEval2010_task8_testing_keys__TEST_FILE_KEY.TXT").write_text("9\tOther\n")  # not an example file
    data = load_semeval2010_task8(str(tmp_path), validation_size=2)
    assert list(data) == ["train", "validation", "test"]
    assert [len(data[s]) for s in data] == [6, 2, 3]
    held_out = sorted(str(1 + i) for i in random.Random(0).sample(range(8), 2))  # seeded, not the file's tail
    assert list(data["validation"]["id"]) == held_out
    assert sorted(list(data["train"]["id"]) + held_out) == sorted(map(str, range(1, 9)))
    other_seed = load_semeval2010_task8(str(tmp_path), validation_size=2, validation_seed=5)
    assert list(other_seed["validation"]["id"]) != held_out
    row = datasets.concatenate_datasets([data["train"], data["validation"]]).filter(lambda r: r["id"] == "7")[0]
    assert row["sentence"] == "john works for acme bank ."
    assert row["sentence"][row["e1_start"] : row["e1_end"]] == "john"
    assert row["sentence"][row["e2_start"] : row["e2_end"]] == "bank"
    assert data["test"].features["label"].int2str(data["test"][0]["label"]) == "Member-Collection(e1,e2)"
    assert mark_entities(row["sentence"], (0, 4), (20, 24)) == "@ john @ works for acme # bank # ."
    assert mark_entities("ab", (1, 2), (0, 1)) == "# a #@ b @"  # e2 ends where e1 begins: closed first
    assert len(SEMEVAL_LABELS) == 19 and SEMEVAL_LABELS[0] == "Other"


def test_hub_copy_is_read_into_the_release_schema(monkeypatch):
    """A Hub id goes through datasets.load_dataset; its tagged sentences and relation names map onto our labels."""
    hub_names = ["Cause-Effect(e1,e2)", "Other", "Member-Collection(e1,e2)"]  # another order than SEMEVAL_LABELS
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "relation": datasets.ClassLabel(names=hub_names)}
    )
    rows = {"sentence": [sentence for sentence, _ in TOY[:3]], "relation": [2, 2, 1]}
    fake = datasets.DatasetDict(
        {split: datasets.Dataset.from_dict(rows, features=features) for split in ("train", "test")}
    )
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, **kw: calls.append(name) or fake)
    data = load_semeval2010_task8("SemEvalWorkshop/sem_eval_2010_task_8", validation_size=1)
    assert calls == ["SemEvalWorkshop/sem_eval_2010_task_8"] and [len(data[s]) for s in data] == [2, 1, 3]
    labels = data["test"].features["label"]
    assert [labels.int2str(i) for i in data["test"]["label"]] == ["Member-Collection(e1,e2)"] * 2 + ["Other"]
    assert data["test"][0]["sentence"] == "paris is the capital of france ."


@pytest.mark.parametrize(
    "block, message",
    [
        ('1\t"no tags here"\r\nOther\r\n', r"bad\.txt:1: needs one <e1>"),
        ('1\t"<e1>a</e1> <e2>b</e2>"\r\nPart-Of(e1,e2)\r\n', r"bad\.txt:2: unknown label 'Part-Of\(e1,e2\)'"),
        ("1\t<e1>a</e1> <e2>b</e2>\r\nOther\r\n", r"bad\.txt:1: the sentence must be in double quotes"),
        ('x\t"<e1>a</e1> <e2>b</e2>"\r\nOther\r\n', r"bad\.txt:1: expected 'id<TAB>"),
        ('1\t"<e1>a <e2>b</e1></e2>"\r\nOther\r\n', r"bad\.txt:1: <e1> and <e2> overlap"),
        ('1\t"<e1>a</e1> <e2>b</e2>"\r\nOther\r\n\r\n1\t"<e1>a</e1> <e2>b</e2>"\r\nOther\r\n', "ids repeat"),
        ('1\t"<e1>a</e1> <e2>b</e2>"', "has no label line"),
    ],
)
def test_malformed_release_files_name_file_and_line(tmp_path, block, message):
    (tmp_path / "bad.txt").write_text(block, newline="")
    with pytest.raises(ValueError, match=message):
        load_semeval2010_task8(train_file=str(tmp_path / "bad.txt"), validation_size=0)


def test_official_score_counts_a_wrong_direction_as_predicted_and_not_correct():
    gold = ["Cause-Effect(e1,e2)", "Cause-Effect(e1,e2)", "Message-Topic(e1,e2)", "Other", "Other"]
    pred = ["Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Other", "Message-Topic(e2,e1)", "Other"]
    scores = semeval_task8_metrics(pred, gold, relations=SEMEVAL_RELATIONS)
    # Cause-Effect: 1 correct of 2 predicted, 2 gold -> F1 0.5; Message-Topic: 0 correct -> 0; 7 others absent -> 0
    assert scores["f1_Cause-Effect"] == 0.5 and scores["f1_Message-Topic"] == 0.0
    assert scores["macro_f1"] == pytest.approx(0.5 / 9)
    assert scores["micro_f1"] == pytest.approx(2 * (1 / 3) * (1 / 3) / (2 / 3))  # 1 correct, 3 predicted, 3 gold
    assert scores["accuracy"] == pytest.approx(2 / 5)
    assert semeval_task8_metrics(pred, gold)["macro_f1"] == 0.25  # default: the relations found
    with pytest.raises(ValueError, match="unknown relations"):
        semeval_task8_metrics(["Part-Of(e1,e2)"], ["Other"], relations=SEMEVAL_RELATIONS)
    with pytest.raises(ValueError, match="2 predictions vs 1 references"):
        semeval_task8_metrics(["Other", "Other"], ["Other"])
    metric = RelationClassificationComputeMetrics(dict(enumerate(SEMEVAL_LABELS)), SEMEVAL_RELATIONS)
    ids = [SEMEVAL_LABELS.index(label) for label in pred]
    logits = np.eye(len(SEMEVAL_LABELS))[ids]
    result = metric(EvalPrediction(predictions=logits, label_ids=np.array([SEMEVAL_LABELS.index(g) for g in gold])))
    assert result["macro_f1"] == pytest.approx(100 * scores["macro_f1"])  # the run scripts report percent
    assert result["accuracy"] == pytest.approx(100 * 2 / 5)


def test_run_script_fine_tunes_a_trelm_checkpoint_and_learns_a_toy_task(
    tmp_path,
    tokenizer,
    kge_assets,
    caplog,
):
    caplog.set_level(logging.INFO)
    model = make_model(tokenizer, kge_assets)
    router = model.enable_knowledge_routing()
    with torch.no_grad():
        for p in router.delta_parameters():
            p.normal_(std=0.02)  # routed knowledge-path updates, folded into the saved FFN weights
    model.save_pretrained(tmp_path / "trelm")
    TrelmProcessor(tokenizer, kge_assets).save_pretrained(tmp_path / "trelm")
    expected = {k: v.clone() for k, v in model.trelm.encoder.state_dict().items()}  # deltas folded by the save
    train = write_release(tmp_path / "train.txt", TOY * 4)
    test = write_release(tmp_path / "test.txt", TOY, start=100)
    out = tmp_path / "out"
    results = load_script("run_relation_classification").main(
        [
            "--model_name_or_path",
            str(tmp_path / "trelm"),
            "--train_file",
            str(train),
            "--test_file",
            str(test),
            "--validation_size",
            "8",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--output_dir",
            str(out),
            "--num_train_epochs",
            "30",
            "--learning_rate",
            "1e-2",
            "--per_device_train_batch_size",
            "8",
            *QUIET_RUN,
            "--use_cpu",
        ]
    )
    exported = AutoModelForSequenceClassification.from_pretrained(out / "pretrained_encoder", num_labels=19)
    assert any(
        "has no pooler" in r.getMessage() and "starts from random weights" in r.getMessage() for r in caplog.records
    )  # the exported encoder keeps no pooler, and the run says so
    for name, value in exported.bert.state_dict().items():
        if name in expected:
            torch.testing.assert_close(value, expected[name], msg=name)
    assert results["train_samples"] == 24 and results["eval_samples"] == 8 and results["predict_samples"] == 8
    assert results["train_truncated"] == 0
    # in percent (the toy test set holds two of the nine relations, both learnt: macro-F1 2/9)
    assert results["predict_accuracy"] == 100.0 and results["predict_macro_f1"] == pytest.approx(200 / 9)
    for name in ("all", "eval", "predict"):
        assert json.loads((out / f"{name}_results.json").read_text())["metric_unit"] == "percent", name
    classifier = AutoModelForSequenceClassification.from_pretrained(out)
    assert classifier.config.id2label[0] == "Other" and classifier.config.num_labels == 19
    with pytest.raises(FileNotFoundError, match="no SemEval-2010 Task 8 file"):
        load_semeval2010_task8(str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="not a folder of the SemEval-2010 Task 8 release"):
        load_semeval2010_task8(str(tmp_path / "no-such-folder"))  # a missing local path is not taken for a Hub id
    given = load_semeval2010_task8(train_file=str(train), validation_file=str(test), test_file=str(test))
    assert [len(given[s]) for s in given] == [32, 8, 8]  # a validation file replaces the held-out sample


def test_trelm_semeval_commands_parse_and_fine_tune_the_seeds_own_checkpoint(monkeypatch, tmp_path):
    from harness import trelm

    script = load_script("run_relation_classification")
    (tmp_path / "seed2" / "trelm").mkdir(parents=True)
    (tmp_path / "seed2" / "trelm" / "config.json").write_text("{}")
    cfg = {**trelm.SEMEVAL_DEFAULTS, "model": "tiny-model", "pretraining_dir": str(tmp_path)}
    cmd = trelm.semeval_command(cfg, "trelm", "2", str(tmp_path / "ft"))
    model_args, data_args, training_args = parse_args(
        (ModelArguments, script.RelationClassificationDataArguments, TrainingArguments), cmd[2:]
    )
    assert model_args.model_name_or_path == str(tmp_path / "seed2" / "trelm") and training_args.seed == 2
    assert data_args.max_train_samples == int(cfg["train"]) and data_args.train_sample_seed == 0
    assert trelm.semeval_command(cfg, "base", "2", "ft")[3] == "tiny-model"
    with pytest.raises(SystemExit, match="no pre-trained mlm checkpoint for seed 2"):
        trelm.semeval_command(cfg, "mlm", "2", "ft")


def test_table_merges_a_system_run_later_into_its_seeds(monkeypatch, capsys, tmp_path):
    """A fifth system (TAPT) run into other summaries of the same seeds counts those seeds, not the files."""
    from harness import experiments

    paths = []
    for seed in (1, 2):
        for system, f1 in (("vanilla", 0.5), ("tapt", 0.6)):
            paths.append(tmp_path / f"{system}{seed}.json")
            paths[-1].write_text(
                json.dumps(
                    {
                        "settings": {"task": "ner", "seed": str(seed), "systems": [system]},
                        "results": {system: {"predict_f1": f1 + seed / 100}},
                        "durations_s": {system: 10.0},
                    }
                )
            )
    experiments.main(["table", *map(str, paths)])
    out = capsys.readouterr().out
    assert out.startswith("2 seeds: ['1', '2']")
    assert "| metric | vanilla | tapt |" in out and "| test F1 | 51.50 ± 0.71 | 61.50 ± 0.71 |" in out


def test_trelm_semeval_summary_keeps_encoders_an_earlier_invocation_fine_tuned(monkeypatch, tmp_path):
    """A later ``--variants`` subset (here resumed, nothing left to run) must not drop earlier encoders."""
    from harness import experiments

    (tmp_path / "pre" / "seed1" / "trelm_no_routing").mkdir(parents=True)
    (tmp_path / "pre" / "seed1" / "trelm_no_routing" / "config.json").write_text("{}")
    for encoder, score in (("base", 0.5), ("trelm_no_routing", 0.6)):
        (tmp_path / "ft" / "seed1" / encoder).mkdir(parents=True)
        (tmp_path / "ft" / "seed1" / encoder / "all_results.json").write_text(json.dumps({"predict_macro_f1": score}))
        (tmp_path / "ft" / "seed1" / encoder / "job_done.json").write_text("{}")  # the queue's mark of a finished job
    experiments.main(
        [
            "trelm-semeval",
            "--seeds",
            "1",
            "--variants",
            "trelm_no_routing",
            "--resume",
            "--output_dir",
            str(tmp_path / "ft"),
            "--pretraining_dir",
            str(tmp_path / "pre"),
            "--model",
            "tiny-model",
        ]
    )
    summary = json.loads((tmp_path / "ft" / "seed1" / "summary.json").read_text())
    assert list(summary["results"]) == ["base", "trelm_no_routing"]
    assert summary["settings"]["task"] == "semeval2010_task8"
