"""GLUE loading: the five raw task folders of ../shared/data/glue (counts and label splits from its SOURCE.md), small
CSV / TSV / JSON files with explicit columns, errors that name file:line, and a clean offline Hub failure."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import datasets
import pytest

from keplm.data.glue import GLUE_TASKS, glue_features, glue_task, load_glue_dataset
from keplm.training.metrics import GLUE_TASKS as METRIC_TASKS

GLUE_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
needs_data = pytest.mark.skipif(not GLUE_DIR.is_dir(), reason="../shared/data/glue is absent")


def label_counts(dataset) -> dict:
    return dict(Counter(dataset["label"]))


# ------------------------------------------------------------------------------------------------ metadata
def test_task_metadata_matches_the_metric_config_names():
    assert sorted(GLUE_TASKS) == ["cola", "mrpc", "rte", "sst2", "stsb"]
    for name, task in GLUE_TASKS.items():
        assert task.metric == name and name in METRIC_TASKS
    assert GLUE_TASKS["stsb"].is_regression and GLUE_TASKS["stsb"].num_labels == 1
    assert GLUE_TASKS["rte"].label_names == ("entailment", "not_entailment")
    assert GLUE_TASKS["cola"].text_columns == ("sentence",)
    assert glue_task("SST-2") is glue_task("sst2") is glue_task("../x/SST-2/")
    assert glue_task("STS_B").name == "stsb"
    with pytest.raises(ValueError, match="unknown GLUE task 'qnli2'"):
        glue_task("qnli2")


# ------------------------------------------------------------------------------------------ real task folders
@needs_data
def test_cola_counts_and_glue_validation():
    data = load_glue_dataset(GLUE_DIR / "CoLA")
    assert data["train"].features == glue_features("cola")
    assert {s: len(d) for s, d in data.items()} == {"train": 8551, "validation": 1043}
    assert label_counts(data["train"]) == {1: 6023, 0: 2528}
    assert label_counts(data["validation"]) == {1: 365 + 354, 0: 162 + 162}
    assert data["validation"]["idx"] == list(range(1043))
    assert data["validation"][0]["sentence"] == "The sailors rode the breeze clear of the rocks."
    assert data["validation"][527]["sentence"] == "Somebody just left - guess who."  # out-of-domain follows
    in_domain = load_glue_dataset(GLUE_DIR / "CoLA", cola_validation="in_domain")["validation"]
    out_domain = load_glue_dataset(GLUE_DIR / "CoLA", cola_validation="out_of_domain")["validation"]
    assert (len(in_domain), label_counts(in_domain)) == (527, {1: 365, 0: 162})
    assert (len(out_domain), label_counts(out_domain)) == (516, {1: 354, 0: 162})


@needs_data
def test_sst2_counts_keep_the_text_verbatim():
    data = load_glue_dataset("sst2", data_dir=GLUE_DIR, max_train_samples=5)
    assert len(data["train"]) == 5 and len(data["validation"]) == 872
    assert label_counts(data["validation"]) == {1: 444, 0: 428}
    assert data["validation"][0]["sentence"] == "it 's a charming and often affecting journey . "
    full = load_glue_dataset(GLUE_DIR / "SST-2")["train"]
    assert len(full) == 67349 and label_counts(full) == {1: 37569, 0: 29780}


@needs_data
def test_mrpc_counts_bom_header_and_test_labels_from_the_msr_file():
    data = load_glue_dataset(GLUE_DIR / "MRPC")
    assert data["train"].features == glue_features("mrpc")
    assert {s: len(d) for s, d in data.items()} == {"train": 3668, "validation": 408, "test": 1725}
    assert label_counts(data["train"]) == {1: 2474, 0: 1194}
    assert label_counts(data["validation"]) == {1: 279, 0: 129}
    assert label_counts(data["test"]) == {1: 1147, 0: 578}
    first = data["test"][0]
    assert first["idx"] == 0 and first["label"] == 1 and first["sentence1"].startswith("PCCW's chief operating")
    assert data["train"][0]["sentence1"].startswith('Amrozi accused his brother, whom he called "the witness"')


@needs_data
def test_stsb_float_scores():
    data = load_glue_dataset(GLUE_DIR / "STS-B")
    assert {s: len(d) for s, d in data.items()} == {"train": 5749, "validation": 1500}
    assert data["train"].features["label"] == datasets.Value("float32")
    assert data["train"][0] == {
        "sentence1": "A plane is taking off.",
        "sentence2": "An air plane is taking off.",
        "label": 5.0,
        "idx": 0,
    }
    assert data["validation"][1]["label"] == pytest.approx(4.75)
    assert data["validation"]["idx"] == list(range(1500))
    assert 0.0 <= min(data["train"]["label"]) and max(data["train"]["label"]) <= 5.0


@needs_data
def test_rte_csv_quoting_and_unlabeled_test():
    data = load_glue_dataset(GLUE_DIR / "RTE")
    assert {s: len(d) for s, d in data.items()} == {"train": 2490, "validation": 277, "test": 3000}
    assert label_counts(data["train"]) == {0: 1249, 1: 1241}
    assert label_counts(data["validation"]) == {0: 146, 1: 131}
    assert label_counts(data["test"]) == {-1: 3000}
    quoted = data["train"][12]
    assert quoted["idx"] == 12
    assert quoted["sentence1"].startswith('Valero Energy Corp., on Monday, said it found "extensive" additional')


# --------------------------------------------------------------------------------------- small local files
def write(path: Path, text: str, compress: bool = False) -> Path:
    if compress:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_raw_task_folder_in_miniature(tmp_path):
    task_dir = tmp_path / "RTE"
    task_dir.mkdir()
    header = "sentence1\tsentence2\tlabel\tidx\n"
    write(task_dir / "train.tsv", header + '"A ""quoted"" one."\tB.\t0\t0\nC.\tD.\t1\t1\n', compress=True)
    write(task_dir / "dev.tsv", header + "E.\tF.\t1\t0\n")
    write(task_dir / "test.tsv", header + "G.\tH.\t-1\t0\n")
    data = load_glue_dataset(task_dir)
    assert data["train"][0]["sentence1"] == 'A "quoted" one.' and data["train"]["label"] == [0, 1]
    assert data["test"]["label"] == [-1]


def test_malformed_raw_rows_name_file_and_line(tmp_path):
    task_dir = tmp_path / "CoLA"
    task_dir.mkdir()
    write(task_dir / "in_domain_train.tsv", "gj04\t1\t\tGood.\ngj04\t1\tonly three fields\n")
    write(task_dir / "in_domain_dev.tsv", "gj04\t1\t\tGood.\n")
    write(task_dir / "out_of_domain_dev.tsv", "gj04\t1\t\tGood.\n")
    with pytest.raises(ValueError, match=r"in_domain_train.tsv:2: expected 4 tab-separated fields, got 3"):
        load_glue_dataset(task_dir)
    write(task_dir / "in_domain_train.tsv", "gj04\t1\t\tGood.\ngj04\t7\t\tBad label.\n")
    with pytest.raises(ValueError, match=r"in_domain_train.tsv:2: label must be one of \[0, 1\], got '7'"):
        load_glue_dataset(task_dir)
    sts = tmp_path / "STS-B"
    sts.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    write(sts / "train.tsv", header + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\tfive\n")
    write(sts / "dev.tsv", header)
    with pytest.raises(ValueError, match=r"train.tsv:2: score must be a number in \[0, 5\], got 'five'"):
        load_glue_dataset(sts)
    write(sts / "train.tsv", "wrong\theader\n")
    with pytest.raises(ValueError, match=r"train.tsv:1: expected the header"):
        load_glue_dataset(sts)


def test_mrpc_test_pair_without_a_label_is_an_error(tmp_path):
    task_dir = tmp_path / "MRPC"
    task_dir.mkdir()
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    write(task_dir / "train.tsv", header + "1\t1\t2\tA.\tB.\n")
    write(task_dir / "dev.tsv", header + "0\t3\t4\tC.\tD.\n")
    write(task_dir / "test.tsv", "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t5\t6\tE.\tF.\n1\t7\t8\tG.\tH.\n")
    write(task_dir / "msr_paraphrase_test.txt", header + "0\t5\t6\tE.\tF.\n")
    with pytest.raises(ValueError, match=r"test.tsv:3: the pair \('7', '8'\) has no label"):
        load_glue_dataset(task_dir)
    write(task_dir / "msr_paraphrase_test.txt", header + "0\t5\t6\tE.\tF.\n1\t7\t8\tG.\tH.\n")
    data = load_glue_dataset(task_dir)
    assert data["test"]["label"] == [0, 1] and data["train"][0]["sentence1"] == "A."


def test_csv_and_json_files_with_explicit_columns(tmp_path):
    train = write(tmp_path / "train.csv", 'premise,hypothesis,gold\n"A, b.",C.,not_entailment\nD.,E.,0\n')
    validation = tmp_path / "dev.jsonl"
    validation.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"premise": "F.", "hypothesis": "G.", "gold": 1, "id": 7},
                {"premise": "H.", "hypothesis": "I.", "gold": -1, "id": 8},
            ]
        )
    )
    data = load_glue_dataset(
        task="rte",
        train_file=str(train),
        validation_file=str(validation),
        text_columns=("premise", "hypothesis"),
        label_column="gold",
        idx_column="id",
    )
    assert data["train"].features == glue_features("rte")
    assert data["train"][0] == {"sentence1": "A, b.", "sentence2": "C.", "label": 1, "idx": 0}
    assert data["validation"]["idx"] == [7, 8] and data["validation"]["label"] == [1, -1]


def test_files_without_a_task_infer_schema_and_labels(tmp_path):
    (tmp_path / "train.json").write_text(
        json.dumps([{"sentence": "a", "label": "pos"}, {"sentence": "b", "label": "neg"}])
    )
    (tmp_path / "validation.json").write_text(json.dumps([{"sentence": "c", "label": "pos"}]))
    data = load_glue_dataset(tmp_path)
    assert data["train"].features["label"].names == ["neg", "pos"]
    assert data["train"]["label"] == [1, 0] and data["validation"]["label"] == [1]
    scores = write(tmp_path / "scores.tsv", "s1\ts2\tlabel\nA\tB\t3.5\n")
    regression = load_glue_dataset(str(scores), text_columns=("s1", "s2"))
    assert regression["train"].features["label"] == datasets.Value("float32")
    assert regression["train"][0] == {"sentence1": "A", "sentence2": "B", "label": 3.5, "idx": 0}


def test_bad_local_files_name_the_row(tmp_path):
    bad_label = write(tmp_path / "train.csv", "sentence,label\nok,1\nbad,maybe\n")
    with pytest.raises(ValueError, match=r"train.csv:3: label 'maybe' is neither a class id below 2"):
        load_glue_dataset(task="sst2", train_file=str(bad_label))
    short = write(tmp_path / "short.csv", "sentence,label\nok,1\nmissing\n")
    with pytest.raises(ValueError, match=r"short.csv:3: expected 2 fields"):
        load_glue_dataset(task="sst2", train_file=str(short))
    missing = tmp_path / "m.jsonl"
    missing.write_text('{"text": "a", "label": 0}\n')
    with pytest.raises(ValueError, match=r"m.jsonl:1: column 'sentence' must hold text"):
        load_glue_dataset(task="cola", train_file=str(missing))
    broken = tmp_path / "b.jsonl"
    broken.write_text('{"sentence": "a", "label": 0}\n{"sentence": \n')
    with pytest.raises(ValueError, match=r"b.jsonl:2: invalid JSON"):
        load_glue_dataset(task="cola", train_file=str(broken))
    with pytest.raises(FileNotFoundError, match="GLUE data file not found"):
        load_glue_dataset(task="cola", train_file=str(tmp_path / "nope.csv"))


def test_hub_offline_fails_cleanly(monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConnectionError, match=r"could not load 'nyu-mll/glue' \(rte\).*local task folder"):
        load_glue_dataset("rte")
    with pytest.raises(ConnectionError, match=r"could not load 'someone/rte' \(None\)"):
        load_glue_dataset("someone/rte")  # an owner/name id is a Hub id, not the task name


def test_hub_dataset_is_normalised(monkeypatch):
    hub = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"], "label": [0]})}
    )
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append(a) or hub)
    data = load_glue_dataset("someone/nli", task="rte", text_columns=("premise", "hypothesis"))
    assert calls == [("someone/nli", "rte")]
    assert data["train"][0] == {"sentence1": "a", "sentence2": "b", "label": 0, "idx": 0}
