"""Bad inputs at the data loaders (issue 11): each test feeds exactly one bad input and pins the clear error or the
counted, logged fallback (see docs/reliability.md for the catalogue)."""

from __future__ import annotations

import json
import logging

import datasets
import pytest

from keplm.data import load_ner_dataset, load_qa_dataset, read_conll, read_squad_json

# --------------------------------------------------------------------------- CoNLL column count (item 8)


def test_conll_line_without_its_ner_column_is_an_error_naming_file_and_line(tmp_path):
    """``paris X X`` in a 4-column file used to be read with its chunk column as the tag (a bogus entity type)."""
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nparis X X\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.txt, line 4: 3 columns .*first token line \(1\) has 4"):
        read_conll(path)


def test_conll_space_separated_multiword_token_is_an_error(tmp_path):
    """``New York B-LOC`` in a 2-column file used to lose ``York``."""
    path = tmp_path / "train.txt"
    path.write_text("I O\nlove O\nNew York B-LOC\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.txt, line 3: 3 columns in 'New York B-LOC'.*has 2"):
        read_conll(path)
    path.write_text("I\tO\nlove\tO\nNew York\tB-LOC\n", encoding="utf-8")  # tab-separated: the token keeps its space
    assert read_conll(path)[0]["tokens"] == ["I", "love", "New York"]


def test_empty_ner_split_names_the_split_and_its_file(tmp_path):
    (tmp_path / "train.txt").write_text("Paris B-LOC\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n-DOCSTART- O\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"the validation split is empty: .*dev\.txt holds no sentence"):
        load_ner_dataset(str(tmp_path))


# --------------------------------------------------------------------------- SQuAD answers (item 3)


def _squad(path, articles):
    """Write a SQuAD v1.1 file: ``articles`` = [[(context, [(id, [(text, start), ...]), ...]), ...], ...]."""
    data = [
        {
            "title": f"article {a}",
            "paragraphs": [
                {
                    "context": context,
                    "qas": [
                        {
                            "id": qid,
                            "question": f"question {qid}?",
                            "answers": [{"text": t, "answer_start": s} for t, s in answers],
                        }
                        for qid, answers in questions
                    ],
                }
                for context, questions in paragraphs
            ],
        }
        for a, paragraphs in enumerate(articles)
    ]
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


CONTEXT = "Paris is the capital of France. Paris lies on the Seine."


def test_shifted_answer_start_is_an_error_naming_the_question_ids(tmp_path):
    path = _squad(
        tmp_path / "train.json",
        [[(CONTEXT, [("q-ok", [("Paris", 0)]), ("q-shift", [("France", 20)]), ("q-cls", [("Seine", 2)])])]],
    )
    with pytest.raises(ValueError, match=r"train\.json: 2 of 3 answers .*\['q-shift', 'q-cls'\].*nearest"):
        read_squad_json(path)
    with pytest.raises(ValueError, match="q-shift"):
        load_qa_dataset(str(path))


def test_fix_nearest_moves_drops_and_reports(tmp_path, caplog):
    second_paris = CONTEXT.index("Paris", 1)
    path = _squad(
        tmp_path / "train.json",
        [
            [
                (
                    CONTEXT,
                    [
                        ("q-ok", [("Paris", 0)]),
                        ("q-near", [("Paris", second_paris - 3)]),  # nearer the second "Paris" than the first
                        ("q-gone", [("Lyon", 4)]),  # not in the context: dropped, and the question with it
                        ("q-some", [("France", 24), ("Berlin", 0)]),  # one answer fine, one dropped: the question stays
                        ("q-none", []),  # no answer in the file: kept as it is
                    ],
                )
            ]
        ],
    )
    with caplog.at_level(logging.WARNING, logger="keplm.data.squad"):
        dsd, report = load_qa_dataset(str(path), fix_answer_starts="nearest", return_report=True)
    rows = {row["id"]: row for row in dsd["train"]}
    assert set(rows) == {"q-ok", "q-near", "q-some", "q-none"}
    assert rows["q-near"]["answers"] == {"text": ["Paris"], "answer_start": [second_paris]}
    assert rows["q-some"]["answers"] == {"text": ["France"], "answer_start": [24]}
    answers = report["answer_starts"]["file"]
    assert (answers["answers"], answers["mismatched"], answers["moved"], answers["dropped"]) == (5, 3, 1, 2)
    assert answers["questions_dropped"] == 1 and answers["questions_dropped_ids"] == ["q-gone"]
    assert answers["moved_ids"] == ["q-near"] and answers["dropped_ids"] == ["q-gone", "q-some"]
    json.dumps(report)  # goes into a run's results JSON as it is
    assert "1 moved to the nearest occurrence" in caplog.text and "q-near" in caplog.text
    with pytest.raises(ValueError, match="fix_answer_starts must be None or one of"):
        read_squad_json(path, fix_answer_starts="closest")


def test_hub_qa_data_is_checked_the_same_way(monkeypatch):
    fake = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {
                    "id": ["a", "b"],
                    "context": [CONTEXT, CONTEXT],
                    "question": ["?", "?"],
                    "answers": [{"text": ["Paris"], "answer_start": [0]}, {"text": ["Seine"], "answer_start": [0]}],
                }
            )
        }
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda name, **kwargs: fake)
    with pytest.raises(ValueError, match=r"Hub dataset 'someone/qa' split 'train': 1 of 2 answers .*\['b'\]"):
        load_qa_dataset("someone/qa")
    dsd, report = load_qa_dataset("someone/qa", fix_answer_starts="nearest", return_report=True)
    assert dsd["train"][1]["answers"]["answer_start"] == [CONTEXT.index("Seine")]
    assert report["answer_starts"]["train"]["moved"] == 1


# --------------------------------------------------------------------------- one SQuAD file, article split (item 13)


def _articles(n, questions_per_article=2):
    return [
        [
            (
                f"Context {a} has Paris.",
                [(f"a{a}q{q}", [("Paris", len(f"Context {a} has "))]) for q in range(questions_per_article)],
            )
        ]
        for a in range(n)
    ]


def test_single_file_without_a_split_option_is_all_train(tmp_path, caplog):
    """A single SQuAD-format file used to be cut to the 38/5/5 split meant for SQuAD dev (articles beyond 48 lost)."""
    path = _squad(tmp_path / "dev-v1.1.json", _articles(60))
    with caplog.at_level(logging.INFO, logger="keplm.data.squad"):
        dsd, report = load_qa_dataset(str(path), return_report=True)
    assert list(dsd) == ["train"] and len(dsd["train"]) == 120
    assert report["article_split"] is None
    assert "all its 120 questions (60 articles) are the train split" in caplog.text


def test_article_split_is_explicit_and_says_what_it_made(tmp_path, caplog):
    path = _squad(tmp_path / "dev-v1.1.json", _articles(60))
    with caplog.at_level(logging.INFO, logger="keplm.data.squad"):
        dsd, report = load_qa_dataset(str(path), split_by_article=(38, 5, 5), return_report=True)
    assert {s: len(d) for s, d in dsd.items()} == {"train": 76, "validation": 10, "test": 10}
    assert report["article_split"]["train"] == {"articles": 38, "questions": 76}
    assert "train 38 articles / 76 questions" in caplog.text and "12 articles (24 questions) left out" in caplog.text
    rest = load_qa_dataset(str(path), split_by_article=(None, 5, 5))
    assert len(rest["train"]) == 100
    with pytest.raises(ValueError, match="split_by_article must be None or a"):
        load_qa_dataset(str(path), split_by_article=True)
    (tmp_path / "train.json").write_text(path.read_text(), encoding="utf-8")
    with pytest.raises(ValueError, match="split_by_article splits one file"):
        load_qa_dataset(str(tmp_path), split_by_article=(2, 1, 1))


def test_empty_qa_split_names_the_split_and_its_file(tmp_path):
    _squad(tmp_path / "train.json", _articles(2))
    _squad(tmp_path / "dev.json", [[]])
    with pytest.raises(ValueError, match=r"the validation split is empty: .*dev\.json holds no question"):
        load_qa_dataset(str(tmp_path))
    path = _squad(tmp_path / "one.json", _articles(3) + [[]])  # an article without questions does not count
    with pytest.raises(ValueError, match=r"Cannot split 3 articles of .*one\.json into"):
        load_qa_dataset(str(path), split_by_article=(2, 1, 1))
