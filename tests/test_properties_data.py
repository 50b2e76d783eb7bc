"""Property tests (hypothesis) for the NER data reader: a CoNLL file written with a byte-order mark, CRLF line ends,
runs of blank or whitespace-only lines, ``-DOCSTART-`` lines, tab or space separators, or gzip reads as its clean
file; a token line with another column count is a ValueError naming the file and line.

Bounded: few examples; a failure prints the smallest file that breaks the property."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keplm.data.ner import read_conll

BOUNDED = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
TOKENS = st.sampled_from(["Paris", "is", "in", "France", ".", "Café", "cafe\u0301", "東京", "O'Neil", "-", "U.S."])
TAGS = st.sampled_from(["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
SENTENCES = st.lists(st.lists(st.tuples(TOKENS, TAGS), min_size=1, max_size=6), min_size=1, max_size=5)
LAYOUTS = st.fixed_dictionaries(
    {
        "bom": st.booleans(),
        "crlf": st.booleans(),
        "gap": st.sampled_from(["\n", "\n\n", "\n   \n", "\n\t\n\n"]),
        "docstart": st.booleans(),
        "separator": st.sampled_from([" ", "\t", "  "]),
        "gzip": st.booleans(),
    }
)


def _write(path, sentences, layout) -> str:
    blocks = ["\n".join(layout["separator"].join((token, "NN", tag)) for token, tag in s) for s in sentences]
    text = ("-DOCSTART- -X- O\n\n" if layout["docstart"] else "") + layout["gap"].join(b + "\n" for b in blocks)
    if layout["crlf"]:
        text = text.replace("\n", "\r\n")
    data = (("\ufeff" if layout["bom"] else "") + text).encode("utf-8")
    if layout["gzip"]:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return str(path)


@BOUNDED
@given(sentences=SENTENCES, layout=LAYOUTS)
def test_a_conll_file_reads_as_its_sentences_whatever_the_layout(tmp_path_factory, sentences, layout):
    rows = read_conll(_write(tmp_path_factory.mktemp("conll") / "train.txt", sentences, layout))
    assert [(r["tokens"], r["ner_tags"]) for r in rows] == [
        ([token for token, _ in s], [tag for _, tag in s]) for s in sentences
    ]


@BOUNDED
@given(sentences=SENTENCES, where=st.integers(0, 20), bad=st.sampled_from(["Paris B-LOC", "Paris NN B-NP I-LOC"]))
def test_a_token_line_with_other_columns_is_refused_by_file_and_line(tmp_path_factory, sentences, where, bad):
    lines = [" ".join((token, "NN", tag)) for s in sentences for token, tag in s]
    where = min(where, len(lines) - 1) + 1  # never the first line: it sets the file's column count
    lines.insert(where, bad)
    path = tmp_path_factory.mktemp("bad") / "train.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"train\.txt, line {where + 1}: \d columns in"):
        read_conll(path)


@BOUNDED
@given(
    labels=st.lists(st.sampled_from(["pos", "neg", "neutral"]), min_size=1, max_size=8),
    pads=st.lists(st.sampled_from(["", " ", "  ", "\t"]), min_size=16, max_size=16),
)
def test_csv_text_labels_are_read_without_surrounding_spaces(tmp_path_factory, labels, pads):
    """A label written ``"pos "`` or ``" pos"`` is the class ``pos``: the classes are the distinct labels, each row
    the id of its own."""
    from keplm.data.glue import load_glue_dataset

    path = tmp_path_factory.mktemp("glue") / "train.csv"
    rows = [f'"s{i}","{pads[2 * i]}{label}{pads[2 * i + 1]}"' for i, label in enumerate(labels)]
    path.write_text("sentence,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    train = load_glue_dataset(train_file=str(path))["train"]
    names = train.features["label"].names
    assert names == sorted(set(labels)) and [names[i] for i in train["label"]] == labels


@pytest.mark.parametrize(("first", "second"), [("Neg", "neg"), ("pos", "POS ")])
def test_csv_labels_that_differ_only_in_case_are_refused_by_name(tmp_path, first, second):
    from keplm.data.glue import load_glue_dataset

    path = tmp_path / "train.csv"
    path.write_text(f"sentence,label\na,{first}\nb,{second}\nc,{first}\n", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=rf"labels '{first.strip()}' \(.*train.csv:2\) and '{second.strip()}' \(.*train.csv:3\) "
        "differ only in case",
    ):
        load_glue_dataset(train_file=str(path))


def test_csv_labels_with_a_fraction_are_read_as_regression_and_say_so(tmp_path, caplog):
    from keplm.data.glue import load_glue_dataset

    path = tmp_path / "train.csv"
    path.write_text("sentence,label\na,0\nb,1\nc,0.5\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="keplm.data.glue"):
        train = load_glue_dataset(train_file=str(path))["train"]
    assert train["label"] == [0.0, 1.0, 0.5]
    assert "1 non-integer number(s) (first: '0.5' at" in caplog.text and "read as regression" in caplog.text
