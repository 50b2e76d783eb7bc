"""Property tests (hypothesis) for the SQuAD reader: a file of random articles (Unicode contexts, answers anywhere in
them, several answers per question, questions without an answer) written with a byte-order mark, gzip, any JSON
layout or ASCII escapes reads as its questions and answers exactly; an answer whose ``answer_start`` does not point
at its text is a ValueError naming the file and the question, or with ``fix_answer_starts="nearest"`` moves to an
occurrence of its text and is counted.

Bounded: few examples; a failure prints the smallest file that breaks the property."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keplm.data.squad import read_squad_json

BOUNDED = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
WORDS = st.sampled_from(["Paris", "is", "in", "France", ".", "Café", "cafe\u0301", "東京", "O'Neil", "-", '"', "\\"])


@st.composite
def articles(draw):
    """SQuAD articles: each question's answers are spans of its context, at their true character offsets."""
    data, number = [], 0
    for a in range(draw(st.integers(1, 3))):
        paragraphs = []
        for _ in range(draw(st.integers(1, 2))):
            context = " ".join(draw(st.lists(WORDS, min_size=1, max_size=12)))
            qas = []
            for _ in range(draw(st.integers(1, 3))):
                answers = []
                for _ in range(draw(st.integers(0, 2))):
                    start = draw(st.integers(0, len(context) - 1))
                    end = draw(st.integers(start + 1, len(context)))
                    answers.append({"text": context[start:end], "answer_start": start})
                qas.append(
                    {"id": f"q{number}", "question": " ".join(draw(st.lists(WORDS, max_size=5))), "answers": answers}
                )
                number += 1
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


LAYOUTS = st.fixed_dictionaries(
    {"bom": st.booleans(), "gzip": st.booleans(), "indent": st.sampled_from([None, 0, 2]), "ascii": st.booleans()}
)


def _write(folder, payload, layout) -> str:
    text = json.dumps(payload, indent=layout["indent"], ensure_ascii=layout["ascii"])
    data = (("\ufeff" if layout["bom"] else "") + text).encode("utf-8")
    path = folder / ("train.json.gz" if layout["gzip"] else "train.json")
    path.write_bytes(gzip.compress(data) if layout["gzip"] else data)
    return str(path)


def _expected(payload) -> list[dict]:
    return [
        {
            "id": qa["id"],
            "context": paragraph["context"],
            "question": qa["question"],
            "answers": {
                "text": [answer["text"] for answer in qa["answers"]],
                "answer_start": [answer["answer_start"] for answer in qa["answers"]],
            },
        }
        for article in payload["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]


@BOUNDED
@given(payload=articles(), layout=LAYOUTS)
def test_a_squad_file_reads_as_its_questions_whatever_the_layout(tmp_path_factory, payload, layout):
    rows = read_squad_json(_write(tmp_path_factory.mktemp("squad"), payload, layout))
    assert [{key: row[key] for key in ("id", "context", "question", "answers")} for row in rows] == _expected(payload)


@BOUNDED
@given(payload=articles(), pick=st.integers(0, 10_000), shift=st.sampled_from([-3, -1, 1, 2, 50]))
def test_a_misplaced_answer_start_is_named_or_moved_to_its_text(tmp_path_factory, payload, pick, shift):
    answered = [qa for article in payload["data"] for p in article["paragraphs"] for qa in p["qas"] if qa["answers"]]
    contexts = {qa["id"]: p["context"] for article in payload["data"] for p in article["paragraphs"] for qa in p["qas"]}
    if not answered:
        return
    qa = answered[pick % len(answered)]
    answer, context = qa["answers"][0], contexts[qa["id"]]
    moved = answer["answer_start"] + shift
    if context[moved : moved + len(answer["text"])] == answer["text"] and moved >= 0:
        return  # the shift lands on another occurrence of the same text: nothing is wrong
    answer["answer_start"] = moved
    path = _write(
        tmp_path_factory.mktemp("squad"), payload, {"bom": False, "gzip": False, "indent": None, "ascii": False}
    )
    with pytest.raises(ValueError, match=rf"train\.json: 1 of \d+ answers have an answer_start.*'{qa['id']}'"):
        read_squad_json(path)
    rows, report = read_squad_json(path, fix_answer_starts="nearest", return_report=True)
    assert report["mismatched"] == report["moved"] == 1 and report["dropped"] == 0 and report["moved_ids"] == [qa["id"]]
    (row,) = [row for row in rows if row["id"] == qa["id"]]
    start = row["answers"]["answer_start"][0]
    assert context[start : start + len(answer["text"])] == answer["text"]  # it points at its text again


@pytest.mark.parametrize("answer", [{"text": "Paris"}, {"text": "Paris", "answer_start": "x"}, "Paris"])
def test_an_answer_without_an_integer_start_is_named_by_its_question(tmp_path, answer):
    payload = {
        "data": [
            {
                "title": "t",
                "paragraphs": [{"context": "Paris", "qas": [{"id": "q7", "question": "?", "answers": [answer]}]}],
            }
        ]
    }
    (tmp_path / "train.json").write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"question 'q7': bad answer .*integer 'answer_start'"):
        read_squad_json(tmp_path / "train.json")
