"""SQuAD v1.1 readers (answer offsets checked against the answer text), an article-level split of one file, and a
QA dataset loader whose every choice (splits, moved answers) is logged and reported."""

from __future__ import annotations

import logging
import os

import datasets

from keplm.io_utils import read_json

from .splits import SPLITS, is_local_data, local_split_files

__all__ = [
    "read_squad_json",
    "squad_article_split",
    "load_qa_dataset",
    "check_answers",
    "QA_FEATURES",
    "SQUAD_V11_DEV_ARTICLE_SPLIT",
    "ANSWER_START_FIXES",
]

logger = logging.getLogger(__name__)

#: the article split of the SQuAD v1.1 dev file used for CPU-scale experiments (train, validation, test articles)
SQUAD_V11_DEV_ARTICLE_SPLIT = (38, 5, 5)
#: the ways :func:`read_squad_json` can repair an ``answer_start`` that does not point at its answer text
ANSWER_START_FIXES = ("nearest",)
_SHOWN = 5  # offenders named in an error or a warning

QA_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": {
            "text": datasets.Sequence(datasets.Value("string")),
            "answer_start": datasets.Sequence(datasets.Value("int32")),
        },
        "article_index": datasets.Value("int32"),
    }
)


def _occurrences(context: str, text: str) -> list[int]:
    found, position = [], context.find(text)
    while position >= 0:
        found.append(position)
        position = context.find(text, position + 1)
    return found


def check_answers(context: str, answers: dict, fix: str | None = None) -> tuple[dict, int, int, int]:
    """Check every answer's ``answer_start`` against its text: ``context[start:start + len(text)] == text``.

    Returns ``(answers, mismatched, moved, dropped)``. With ``fix=None`` the answers come back unchanged (the
    caller decides what a mismatch means); with ``fix="nearest"`` a mismatched answer moves to the occurrence of
    its text nearest to the given start (the earlier one on a tie), and one whose text is empty or absent from
    the context is dropped.
    """
    if fix is not None and fix not in ANSWER_START_FIXES:
        raise ValueError(f"fix_answer_starts must be None or one of {ANSWER_START_FIXES}, got {fix!r}")
    texts, starts = list(answers["text"]), list(answers["answer_start"])
    if len(texts) != len(starts):
        raise ValueError(f"{len(texts)} answer texts but {len(starts)} answer_start values")
    kept_texts, kept_starts = [], []
    mismatched = moved = dropped = 0
    for text, start in zip(texts, starts):
        if not (text and start >= 0 and context[start : start + len(text)] == text):
            mismatched += 1
            if fix is not None:
                found = _occurrences(context, text) if text else []
                if not found:
                    dropped += 1
                    continue
                start = min(found, key=lambda position: (abs(position - start), position))
                moved += 1
        kept_texts.append(text)
        kept_starts.append(start)
    return {"text": kept_texts, "answer_start": kept_starts}, mismatched, moved, dropped


def _answer_report(where: str, fix: str | None) -> dict:
    kinds = ("mismatched", "moved", "dropped", "questions_dropped")  # counted, and the first question ids of each
    report = {"file": where, "fix": fix, "questions": 0, "answers": 0, **dict.fromkeys(kinds, 0)}
    return report | {f"{kind}_ids": [] for kind in kinds}


def _note(report: dict, key: str, question_id: str) -> None:
    if len(report[key]) < _SHOWN:
        report[key].append(question_id)


def _check_question(report: dict, question_id: str, context: str, answers: dict, fix: str | None) -> dict | None:
    """:func:`check_answers` of one question, counted in ``report``; its answers, or None when it lost them all."""
    fixed, mismatched, moved, dropped = check_answers(context, answers, fix)
    report["questions"] += 1
    report["answers"] += len(answers["text"])
    for key, count in (("mismatched", mismatched), ("moved", moved), ("dropped", dropped)):
        report[key] += count
        if count:
            _note(report, f"{key}_ids", question_id)
    if answers["text"] and not fixed["text"]:
        report["questions_dropped"] += 1
        _note(report, "questions_dropped_ids", question_id)
        return None
    return fixed


def _finish_answer_report(report: dict) -> dict:
    """Raise on mismatches without a fix; log what a fix changed (WARNING, with the first question ids)."""
    where, mismatched = report["file"], report["mismatched"]
    if mismatched and report["fix"] is None:
        raise ValueError(
            f"{where}: {mismatched} of {report['answers']} answers have an answer_start that does not point at their "
            f"text (question ids {report['mismatched_ids']}{', ...' if mismatched > _SHOWN else ''}); fix the file or "
            "pass fix_answer_starts='nearest' to move each to the nearest occurrence of its text (answers whose text "
            "is not in the context are then dropped)"
        )
    if mismatched:
        logger.warning(
            "%s: %d of %d answers had an answer_start not pointing at their text: %d moved to the nearest occurrence "
            "(e.g. question ids %s), %d dropped as their text is not in the context (e.g. %s); %d questions left "
            "without an answer dropped (e.g. %s)",
            where,
            mismatched,
            report["answers"],
            report["moved"],
            report["moved_ids"],
            report["dropped"],
            report["dropped_ids"],
            report["questions_dropped"],
            report["questions_dropped_ids"],
        )
    return report


def read_squad_json(path: str | os.PathLike, fix_answer_starts: str | None = None, return_report: bool = False):
    """Flatten a SQuAD v1.1 JSON file (plain or .gz) into one row per question, in file order.

    Every answer's ``answer_start`` is checked against its text (shifted offsets would train on the wrong span,
    or on [CLS]). A mismatch is a ValueError naming the question ids, unless ``fix_answer_starts="nearest"``: then
    the answer moves to the nearest exact occurrence of its text, an answer whose text is not in the context is
    dropped, and a question left without any answer is dropped (questions that had no answer in the file stay).
    ``return_report=True`` returns ``(rows, report)``: a JSON-ready dict of what was checked, moved and dropped.
    """
    path = os.fspath(path)
    if fix_answer_starts is not None and fix_answer_starts not in ANSWER_START_FIXES:
        raise ValueError(f"fix_answer_starts must be None or one of {ANSWER_START_FIXES}, got {fix_answer_starts!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    payload = read_json(path)
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ValueError(f"{path}: expected a SQuAD object with a 'data' list of articles")
    report = _answer_report(path, fix_answer_starts)
    rows = []
    for a_idx, article in enumerate(payload["data"]):
        title = article.get("title", "")
        for p_idx, paragraph in enumerate(article.get("paragraphs", [])):
            if "context" not in paragraph or "qas" not in paragraph:
                raise ValueError(f"{path}: article {a_idx} ({title!r}) paragraph {p_idx} lacks 'context' or 'qas'")
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                if "id" not in qa or "question" not in qa:
                    raise ValueError(f"{path}: article {a_idx} paragraph {p_idx}: question without 'id'/'question'")
                question_id = str(qa["id"])
                raw = qa.get("answers", [])
                try:
                    given = {
                        "text": [str(ans["text"]) for ans in raw],
                        "answer_start": [int(ans["answer_start"]) for ans in raw],
                    }
                except (KeyError, TypeError, ValueError) as error:
                    raise ValueError(
                        f"{path}: question {question_id!r}: bad answer ({error!r}); each answer needs "
                        "'text' and an integer 'answer_start'"
                    ) from None
                answers = _check_question(report, question_id, context, given, fix_answer_starts)
                if answers is None:
                    continue
                rows.append(
                    {
                        "id": question_id,
                        "title": title,
                        "context": context,
                        "question": qa["question"],
                        "answers": answers,
                        "article_index": a_idx,
                    }
                )
    _finish_answer_report(report)
    return (rows, report) if return_report else rows


def _to_dataset(rows: list[dict]) -> datasets.Dataset:
    columns = {name: [row[name] for row in rows] for name in QA_FEATURES}
    return datasets.Dataset.from_dict(columns, features=QA_FEATURES)


def squad_article_split(
    rows: list[dict],
    train_articles: int | None = 38,
    validation_articles: int = 5,
    test_articles: int = 5,
    source: str | None = None,
) -> datasets.DatasetDict:
    """Split question rows by article, in file order: the first ``train_articles`` go to train,
    the next ``validation_articles`` to validation, the next ``test_articles`` to test.

    ``train_articles=None`` gives train all articles left after validation and test. Articles beyond the three
    counts are left out. What was made (articles and questions per split, articles left out) is logged; counts
    beyond the articles that hold questions are a ValueError naming ``source`` (the file).
    """
    source = source or "the SQuAD rows"
    order = list(dict.fromkeys(row["article_index"] for row in rows))
    n_train = len(order) - validation_articles - test_articles if train_articles is None else train_articles
    sizes = {"train": n_train, "validation": validation_articles, "test": test_articles}
    if min(sizes.values()) < 0 or sum(sizes.values()) > len(order):
        raise ValueError(f"Cannot split {len(order)} articles of {source} into {sizes}")
    assignment = dict(zip(order, (split for split, size in sizes.items() for _ in range(size))))  # in file order
    out, made = {}, []
    for split, size in sizes.items():
        if size > 0:
            split_rows = [row for row in rows if assignment.get(row["article_index"]) == split]
            out[split] = _to_dataset(split_rows)
            made.append(f"{split} {size} articles / {len(split_rows)} questions")
    left_out = len(order) - sum(sizes.values())
    logger.info(
        "Split %s by article: %s%s",
        source,
        ", ".join(made),
        f"; {left_out} articles ({sum(assignment.get(r['article_index']) is None for r in rows)} questions) left out"
        if left_out
        else "",
    )
    return datasets.DatasetDict(out)


def _article_split_option(split_by_article) -> tuple[int | None, int, int] | None:
    """``split_by_article`` as a (train, validation, test) article-count tuple or None."""
    if split_by_article is None or split_by_article is False:
        return None
    if split_by_article is True or len(tuple(split_by_article)) != 3:
        raise ValueError(
            "split_by_article must be None or a (train, validation, test) tuple of article counts (train may be None: "
            f"the rest), e.g. SQUAD_V11_DEV_ARTICLE_SPLIT = {SQUAD_V11_DEV_ARTICLE_SPLIT}; got {split_by_article!r}"
        )
    return tuple(split_by_article)


def load_qa_dataset(
    name_or_path: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    split_by_article: tuple[int | None, int, int] | None = None,
    fix_answer_starts: str | None = None,
    return_report: bool = False,
    **load_kwargs,
):
    """Load extractive QA data as a DatasetDict in the SQuAD schema.

    Accepts a SQuAD JSON file or a directory of them (split by file name), explicit ``*_file`` paths, or a Hub id
    (passed to ``datasets.load_dataset``). One local file alone:

    * with ``split_by_article=(train, validation, test)`` article counts (``SQUAD_V11_DEV_ARTICLE_SPLIT`` =
      (38, 5, 5) for the SQuAD v1.1 dev file; train ``None`` = every article left) it is split by article with
      :func:`squad_article_split`;
    * without it, all its questions are the train split.

    Either way the loader logs what it made (articles and questions per split). ``fix_answer_starts`` is passed
    to :func:`read_squad_json` (Hub data is checked the same way). An empty split is a ValueError naming the
    split and its file. ``return_report=True`` returns ``(dataset_dict, report)``, a JSON-ready dict with the
    files read, the answer checks per split (``answer_starts``: answers, mismatched, moved, dropped,
    questions_dropped and the first question ids of each) and the article split made (``article_split``).
    """
    split_option = _article_split_option(split_by_article)
    explicit_option = split_option is not None
    report: dict = {"files": {}, "answer_starts": {}, "article_split": None}
    explicit = {"train": train_file, "validation": validation_file, "test": test_file}
    if not is_local_data(name_or_path, "SQuAD data"):
        if explicit_option:
            raise ValueError(f"split_by_article splits one local SQuAD file; {name_or_path!r} is a Hub dataset id")
        dsd = datasets.load_dataset(name_or_path, **load_kwargs)
        dsd = dsd if isinstance(dsd, datasets.DatasetDict) else datasets.DatasetDict({"train": dsd})
        for split in list(dsd):
            where = f"Hub dataset {name_or_path!r} split {split!r}"
            if len(dsd[split]) == 0:
                raise ValueError(f"{where} is empty")
            report["files"][split] = name_or_path
            dsd[split], report["answer_starts"][split] = _check_dataset_answers(dsd[split], where, fix_answer_starts)
        return (dsd, report) if return_report else dsd

    files = local_split_files(name_or_path, explicit, "SQuAD", extensions=(".json",))
    if explicit_option and len(files) > 1:
        raise ValueError(f"split_by_article splits one file, but {len(files)} were found: {files}")

    if len(files) == 1:
        (path,) = files.values()
        rows, report["answer_starts"]["file"] = read_squad_json(path, fix_answer_starts, return_report=True)
        if not rows:
            raise ValueError(f"{path} holds no question")
        report["files"] = {"file": path}
        if split_option is not None:
            dsd = squad_article_split(rows, *split_option, source=path)
            report["article_split"] = {
                split: {"articles": len(set(data["article_index"])), "questions": len(data)}
                for split, data in dsd.items()
            }
        else:
            logger.info(
                "%s: one file and no split_by_article: all its %d questions (%d articles) are the train split",
                path,
                len(rows),
                len({row["article_index"] for row in rows}),
            )
            dsd = datasets.DatasetDict({"train": _to_dataset(rows)})
    else:
        splits = {}
        for split in (s for s in SPLITS if s in files):
            rows, report["answer_starts"][split] = read_squad_json(files[split], fix_answer_starts, return_report=True)
            if not rows:
                raise ValueError(f"the {split} split is empty: {files[split]} holds no question")
            splits[split] = _to_dataset(rows)
        report["files"] = dict(files)
        dsd = datasets.DatasetDict(splits)
    return (dsd, report) if return_report else dsd


def _check_dataset_answers(dataset: datasets.Dataset, where: str, fix: str | None):
    """:func:`check_answers` over a loaded dataset (Hub data): the same errors, fixes and report as for files."""
    report = _answer_report(where, fix)
    if "answers" not in dataset.column_names or "context" not in dataset.column_names:
        return dataset, report
    keep, changed = [], {}
    for index, (question_id, context, answers) in enumerate(zip(dataset["id"], dataset["context"], dataset["answers"])):
        fixed = _check_question(report, str(question_id), context, answers, fix)
        if fixed is None:
            continue
        keep.append(index)
        if fixed["answer_start"] != answers["answer_start"]:  # an answer moved or dropped
            changed[index] = fixed
    _finish_answer_report(report)
    if changed:
        dataset = dataset.map(
            lambda row, index: {"answers": changed.get(index, row["answers"])},
            with_indices=True,
            desc="Moving answer starts",
        )
    if len(keep) < len(dataset):
        dataset = dataset.select(keep)
    return dataset, report
