"""Tests for NER/SQuAD data loading, NER and SQuAD metrics, and QA post-processing."""

import gzip
import os

import datasets
import numpy as np
import pytest

from keplm.data import (
    find_split_files,
    get_label_list,
    limit_samples,
    load_ner_dataset,
    load_qa_dataset,
    read_conll,
    read_squad_json,
    sort_labels,
    squad_article_split,
)
from keplm.training.metrics import (
    align_ner_predictions,
    ner_metrics,
    normalize_answer,
    squad_references,
    squad_v1_metrics,
)
from keplm.training.qa_postprocessing import postprocess_qa_predictions

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def _data(*parts):
    path = os.path.join(DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"real data not available: {path}")
    return path


CONLL_TEXT = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- -X- O

Bonn NNP B-NP B-LOC
"""


# --------------------------------------------------------------------------- CoNLL


@pytest.mark.parametrize("compressed", [False, True])
def test_read_conll_docstart_and_blank_lines(tmp_path, compressed):
    path = tmp_path / ("toy.txt.gz" if compressed else "toy.txt")
    if compressed:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(CONLL_TEXT)
    else:
        path.write_text(CONLL_TEXT, encoding="utf-8")
    rows = read_conll(path)
    assert [r["tokens"] for r in rows] == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["Bonn"]]
    assert rows[0]["ner_tags"] == ["B-ORG", "O", "B-MISC"]
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    # tag_column picks another column (the chunk tags here)
    assert read_conll(path, tag_column=2)[1]["ner_tags"] == ["B-NP", "I-NP"]


def test_read_conll_tab_separated_and_whitespace_separator(tmp_path):
    path = tmp_path / "wnut.conll"
    path.write_text("New York\tB-location\nrocks\tO\n\t\nhi\tO\n", encoding="utf-8")
    rows = read_conll(path)
    assert rows[0]["tokens"] == ["New York", "rocks"]  # tab files keep inner spaces
    assert rows[1]["tokens"] == ["hi"]  # a line holding only a tab separates sentences


def test_read_conll_malformed_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("EU B-ORG\nrejects\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.txt, line 2"):
        read_conll(path)
    with pytest.raises(ValueError, match="tag_column"):
        read_conll(tmp_path / "bad.txt", tag_column=5)
    with pytest.raises(FileNotFoundError):
        read_conll(tmp_path / "missing.txt")


def test_fingerprinted_map_caches_an_in_memory_dataset_by_content(tmp_path, monkeypatch):
    """An in-memory input (the pre-training corpus) is mapped once: a rebuilt dataset with the same content and
    signature reads the cached file (the SI pass over a corpus costs minutes); other content or signature maps again."""
    from keplm.io_utils import fingerprinted_map

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))
    calls = []

    def double(batch):
        calls.append(len(batch["x"]))
        return {"y": [2 * v for v in batch["x"]]}

    first = fingerprinted_map(datasets.Dataset.from_dict({"x": [1, 2, 3]}), double, {"v": 1})
    again = fingerprinted_map(datasets.Dataset.from_dict({"x": [1, 2, 3]}), double, {"v": 1})
    assert calls == [3] and again["y"] == first["y"] == [2, 4, 6]
    assert again.cache_files[0]["filename"].startswith(str(tmp_path / "keplm"))
    fingerprinted_map(datasets.Dataset.from_dict({"x": [1, 2, 4]}), double, {"v": 1})
    fingerprinted_map(datasets.Dataset.from_dict({"x": [1, 2, 3]}), double, {"v": 2})
    assert calls == [3, 3, 3]


def test_sort_labels_order():
    labels = ["I-PER", "B-ORG", "O", "B-PER", "I-ORG", "B-creative-work", "I-creative-work"]
    assert sort_labels(labels) == [
        "O",
        "B-ORG",
        "I-ORG",
        "B-PER",
        "I-PER",
        "B-creative-work",
        "I-creative-work",
    ]


def test_load_ner_dataset_explicit_files(tmp_path):
    (tmp_path / "train.txt").write_text(CONLL_TEXT, encoding="utf-8")
    (tmp_path / "dev.txt").write_text("Paris NNP B-NP B-LOC\nis VBZ B-VP O\n", encoding="utf-8")
    dsd = load_ner_dataset(str(tmp_path), max_train_samples=2)
    assert set(dsd) == {"train", "validation"}
    assert len(dsd["train"]) == 2
    labels = get_label_list(dsd)
    assert labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert dsd["train"].features["ner_tags"].feature.names == labels
    assert dsd["validation"][0]["ner_tags"] == [labels.index("B-LOC"), 0]
    only = load_ner_dataset(train_file=str(tmp_path / "train.txt"), label_list=labels + ["I-LOC"])
    assert list(only) == ["train"]
    with pytest.raises(ValueError, match="not in label_list"):
        load_ner_dataset(train_file=str(tmp_path / "train.txt"), label_list=["O"])
    with pytest.raises(FileNotFoundError):
        load_ner_dataset(train_file=str(tmp_path / "nope.txt"))


def test_load_ner_dataset_hub_string_tags(monkeypatch):
    fake = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [["B-X", "O"]]}),
            "dev": datasets.Dataset.from_dict({"tokens": [["c"]], "ner_tags": [["I-X"]]}),
        }
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda name, **kw: fake)
    dsd = load_ner_dataset("someone/not-a-local-path")
    assert set(dsd) == {"train", "validation"}
    assert get_label_list(dsd) == ["O", "B-X", "I-X"]
    assert dsd["validation"][0]["ner_tags"] == [2]
    assert dsd["train"][0]["id"] == "0"


@pytest.mark.parametrize(
    "folder,counts,n_labels",
    [
        ("conll2003", (14041, 3250, 3453), 9),
        ("wnut17", (3394, 1009, 1287), 13),
        ("ncbi_disease", (5432, 923, 940), 3),
    ],
)
def test_real_ner_counts(folder, counts, n_labels):
    path = _data(folder)
    dsd = load_ner_dataset(path)
    assert tuple(len(dsd[s]) for s in ("train", "validation", "test")) == counts
    labels = get_label_list(dsd)
    assert len(labels) == n_labels and labels[0] == "O"


def test_find_split_files_real_layouts():
    files = find_split_files(_data("wnut17"))
    assert os.path.basename(files["train"]) == "wnut17train.conll.gz"
    assert os.path.basename(files["validation"]) == "emerging.dev.conll.gz"
    assert os.path.basename(files["test"]) == "emerging.test.annotated.gz"


# --------------------------------------------------------------------------- SQuAD data


def test_squad_article_split_counts():
    path = _data("squad_v1.1", "dev-v1.1.json.gz")
    rows = read_squad_json(path)
    assert len(rows) == 10570 and len({r["article_index"] for r in rows}) == 48
    dsd = squad_article_split(rows)
    assert {s: len(d) for s, d in dsd.items()} == {"train": 8582, "validation": 1032, "test": 956}
    assert set(dsd["train"]["article_index"]) == set(range(38))
    assert set(dsd["test"]["article_index"]) == set(range(43, 48))
    loaded = load_qa_dataset(os.path.dirname(path), split_by_article=(38, 5, 5))
    assert {s: len(d) for s, d in loaded.items()} == {"train": 8582, "validation": 1032, "test": 956}
    first = loaded["train"][0]
    assert first["context"][first["answers"]["answer_start"][0] :].startswith(first["answers"]["text"][0])
    # the first 600 training questions are all of the first article's; a seeded sample spreads over the articles
    head = limit_samples(dict(loaded), {"train": 600})["train"]
    assert set(head["article_index"]) == {0}
    spread = limit_samples(dict(loaded), {"train": 600}, {"train": 0})["train"]
    again = limit_samples(dict(loaded), {"train": 600}, {"train": 0})["train"]
    assert len(spread) == 600 and spread["id"] == again["id"] and len(set(spread["article_index"])) > 30
    assert spread["article_index"] == sorted(spread["article_index"])  # file order kept
    assert limit_samples({"train": [1, 2, 3]}, {"train": 5}, {"train": 0}) == {"train": [1, 2, 3]}


def test_squad_json_errors(tmp_path):
    bad = tmp_path / "dev.json"
    bad.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev\.json: invalid JSON at line 1"):
        read_squad_json(bad)
    bad.write_text('{"version": "1.1"}', encoding="utf-8")
    with pytest.raises(ValueError, match="'data'"):
        read_squad_json(bad)
    with pytest.raises(ValueError, match="Cannot split"):
        squad_article_split([{"article_index": 0}], train_articles=1, validation_articles=1, test_articles=0)


# --------------------------------------------------------------------------- metrics


def test_ner_metrics_half_right():
    refs = [["B-PER", "I-PER", "O", "B-LOC"]]
    preds = [["B-PER", "I-PER", "O", "B-ORG"]]
    m = ner_metrics(preds, refs)
    assert m["precision"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(0.5)
    assert m["accuracy"] == pytest.approx(0.75)
    assert m["PER_f1"] == pytest.approx(1.0) and m["LOC_f1"] == 0.0 and m["ORG_f1"] == 0.0


def test_ner_metrics_default_mode_is_conlleval():
    refs, preds = [["B-PER", "I-PER"]], [["I-PER", "I-PER"]]
    assert ner_metrics(preds, refs)["f1"] == pytest.approx(1.0)
    assert ner_metrics(preds, refs, mode="strict", scheme="IOB2")["f1"] == 0.0
    with pytest.raises(ValueError, match="sequence 0"):
        ner_metrics([["O"]], [["O", "O"]])


def test_align_ner_predictions_drops_ignored():
    id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    logits = np.zeros((1, 4, 3))
    logits[0, [0, 1, 2, 3], [1, 0, 2, 0]] = 5.0
    labels = np.array([[1, -100, 2, -100]])
    preds, refs = align_ner_predictions(logits, labels, id2label)
    assert preds == [["B-PER", "I-PER"]] and refs == [["B-PER", "I-PER"]]
    preds_from_ids, _ = align_ner_predictions(logits.argmax(-1), labels, ["O", "B-PER", "I-PER"])
    assert preds_from_ids == preds


def test_squad_metrics_normalisation():
    assert normalize_answer("  The Cat.  ") == "cat"
    assert squad_v1_metrics({"q": "The Cat."}, {"q": ["cat"]}) == {"exact_match": 100.0, "f1": 100.0}
    m = squad_v1_metrics({"q1": "a black cat", "q2": "dog"}, {"q1": ["the cat", "black cat sat"], "q2": ["bird"]})
    # q1: EM 0, F1 = max(2/3 vs "cat", P=1 R=2/3 -> 0.8) = 0.8 ; q2: 0
    assert m["exact_match"] == 0.0
    assert m["f1"] == pytest.approx(40.0)
    # a missing prediction counts as 0
    assert squad_v1_metrics({}, {"q": ["x"]}) == {"exact_match": 0.0, "f1": 0.0}
    assert squad_references([{"id": "q", "answers": {"text": ["x"], "answer_start": [0]}}]) == {"q": ["x"]}


# --------------------------------------------------------------------------- QA post-processing


def _stride_case():
    context = "the quick brown fox jumps over the lazy dog"
    words, spans, pos = context.split(), [], 0
    for w in words:
        start = context.index(w, pos)
        spans.append((start, start + len(w)))
        pos = start + len(w)
    # layout: [CLS] q q [SEP] <context window> [SEP]; offsets None outside the context
    windows = [range(0, 6), range(3, 9)]
    features, starts, ends = [], [], []
    for window in windows:
        offsets = [None, None, None, None] + [spans[i] for i in window] + [None]
        features.append({"example_id": "ex1", "offset_mapping": offsets})
        starts.append(np.full(len(offsets), -10.0))
        ends.append(np.full(len(offsets), -10.0))
    # feature 0: a question token has the highest logits (must be ignored); a high start on "over"
    # (last word of the window) with a high end on "the" (first word) is an end-before-start pair;
    # "quick ... jumps" (words 1-4) scores 3 + 3 but is 4 tokens long.
    starts[0][1], ends[0][2] = 50.0, 50.0
    starts[0][4 + 5], ends[0][4 + 0] = 9.0, 9.0
    starts[0][4 + 1], ends[0][4 + 4] = 3.0, 3.0
    # feature 1 (words 3..8): "lazy dog" = words 7-8 -> positions 4+4, 4+5, score 2.5 + 2.5
    starts[1][4 + 4], ends[1][4 + 5] = 2.5, 2.5
    return [{"id": "ex1", "context": context}], features, np.stack(starts), np.stack(ends)


def test_postprocess_picks_best_valid_span_across_features():
    examples, features, starts, ends = _stride_case()
    preds = postprocess_qa_predictions(examples, features, starts, ends, max_answer_length=30, disable_tqdm=True)
    assert preds == {"ex1": "quick brown fox jumps"}
    preds, nbest = postprocess_qa_predictions(
        examples, features, starts, ends, max_answer_length=3, return_nbest=True, disable_tqdm=True
    )
    assert preds["ex1"] == "lazy dog"  # the 4-token span is now too long
    top = nbest["ex1"][0]
    assert top["score"] == pytest.approx(5.0) and (top["start"], top["end"]) == (35, 43)
    assert sum(c["probability"] for c in nbest["ex1"]) == pytest.approx(1.0)
    assert len(nbest["ex1"]) <= 20


def test_postprocess_accepts_datasets_and_checks_input():
    examples, features, starts, ends = _stride_case()
    ds_features = datasets.Dataset.from_list(features)
    ds_examples = datasets.Dataset.from_list(examples)
    preds = postprocess_qa_predictions(ds_examples, ds_features, starts, ends, disable_tqdm=True)
    assert preds == {"ex1": "quick brown fox jumps"}
    with pytest.raises(ValueError, match="2 features but 1 rows"):
        postprocess_qa_predictions(examples, features, starts[:1], ends[:1], disable_tqdm=True)
    bad = [dict(features[0], example_id="other"), features[1]]
    with pytest.raises(ValueError, match="unknown example"):
        postprocess_qa_predictions(examples, bad, starts, ends, disable_tqdm=True)


@pytest.mark.parametrize("seed", [0, 7])
def test_seeded_training_draws_are_nested(seed):
    """At one seed a smaller draw is a subset of a larger one, each kept in file order, and the labels (collected
    before the limit) are the same at every size: a learning curve's training sets."""
    rows = list(range(1000))
    draws = [limit_samples({"train": rows}, {"train": n}, {"train": seed})["train"] for n in (10, 50, 250, 999)]
    for small, large in zip(draws, draws[1:]):
        assert set(small) < set(large)
    assert all(draw == sorted(draw) for draw in draws) and [len(d) for d in draws] == [10, 50, 250, 999]
    assert draws[0] != limit_samples({"train": rows}, {"train": 10}, {"train": seed + 1})["train"]
    path = _data("ncbi_disease")
    small = load_ner_dataset(path, max_train_samples=20, train_sample_seed=seed)
    large = load_ner_dataset(path, max_train_samples=200, train_sample_seed=seed)
    assert set(small["train"]["id"]) < set(large["train"]["id"])
    assert small["train"].features == large["train"].features == load_ner_dataset(path)["train"].features
    assert small["train"]["id"] != load_ner_dataset(path, max_train_samples=20)["train"]["id"]
