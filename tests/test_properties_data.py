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
