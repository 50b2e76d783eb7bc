"""SQuAD v1.1 readers, an article-level split of the dev file, and a QA dataset loader."""

from __future__ import annotations

import os

import datasets

from keplm.io_utils import read_json

from .splits import find_split_files, resolve_data_file, split_of_file

__all__ = ["read_squad_json", "squad_article_split", "load_qa_dataset", "QA_FEATURES"]

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


def read_squad_json(path: str | os.PathLike) -> list[dict]:
    """Flatten a SQuAD v1.1 JSON file (plain or .gz) into one row per question, in file order."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    payload = read_json(path)
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ValueError(f"{path}: expected a SQuAD object with a 'data' list of articles")
    rows = []
    for a_idx, article in enumerate(payload["data"]):
        title = article.get("title", "")
        for p_idx, paragraph in enumerate(article.get("paragraphs", [])):
            if "context" not in paragraph or "qas" not in paragraph:
                raise ValueError(
                    f"{path}: article {a_idx} ({title!r}) paragraph {p_idx} lacks 'context' or 'qas'"
                )
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                if "id" not in qa or "question" not in qa:
                    raise ValueError(
                        f"{path}: article {a_idx} paragraph {p_idx}: question without 'id'/'question'"
                    )
                answers = qa.get("answers", [])
                rows.append(
                    {
                        "id": str(qa["id"]),
                        "title": title,
                        "context": context,
                        "question": qa["question"],
                        "answers": {
                            "text": [ans["text"] for ans in answers],
                            "answer_start": [int(ans["answer_start"]) for ans in answers],
                        },
                        "article_index": a_idx,
                    }
                )
    return rows


def _to_dataset(rows: list[dict]) -> datasets.Dataset:
    columns = {name: [row[name] for row in rows] for name in QA_FEATURES}
    return datasets.Dataset.from_dict(columns, features=QA_FEATURES)


def squad_article_split(
    rows: list[dict],
    train_articles: int | None = 38,
    validation_articles: int = 5,
    test_articles: int = 5,
) -> datasets.DatasetDict:
    """Split question rows by article, in file order: the first ``train_articles`` go to train,
    the next ``validation_articles`` to validation, the next ``test_articles`` to test.

    ``train_articles=None`` gives train all articles left after validation and test.
    """
    order: list[int] = []
    seen = set()
    for row in rows:
        if row["article_index"] not in seen:
            seen.add(row["article_index"])
            order.append(row["article_index"])
    n_train = len(order) - validation_articles - test_articles if train_articles is None else train_articles
    sizes = {"train": n_train, "validation": validation_articles, "test": test_articles}
    if min(sizes.values()) < 0 or sum(sizes.values()) > len(order):
        raise ValueError(f"Cannot split {len(order)} articles into {sizes}")
    assignment: dict[int, str] = {}
    start = 0
    for split, size in sizes.items():
        for article in order[start : start + size]:
            assignment[article] = split
        start += size
    out = {}
    for split, size in sizes.items():
        if size > 0:
            out[split] = _to_dataset([row for row in rows if assignment.get(row["article_index"]) == split])
    return datasets.DatasetDict(out)


def load_qa_dataset(
    name_or_path: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    split_by_article: bool = True,
    train_articles: int | None = 38,
    validation_articles: int = 5,
    test_articles: int = 5,
    **load_kwargs,
) -> datasets.DatasetDict:
    """Load extractive QA data as a DatasetDict in the SQuAD schema.

    Accepts a SQuAD JSON file or a directory of them (split by file name), explicit ``*_file``
    paths, or a Hub id (passed to ``datasets.load_dataset``). When ``name_or_path`` yields a single
    file (e.g. ``dev-v1.1.json``), no ``*_file`` is given and ``split_by_article`` is true, it is
    split by article into train/validation/test with :func:`squad_article_split`.
    """
    explicit = {"train": train_file, "validation": validation_file, "test": test_file}
    if name_or_path is not None and not os.path.exists(os.fspath(name_or_path)):
        dsd = datasets.load_dataset(name_or_path, **load_kwargs)
        return dsd if isinstance(dsd, datasets.DatasetDict) else datasets.DatasetDict({"train": dsd})

    files: dict[str, str] = {}
    directory = None
    if name_or_path is not None:
        name_or_path = os.fspath(name_or_path)
        if os.path.isdir(name_or_path):
            directory = name_or_path
            files.update(find_split_files(directory, extensions=(".json",)))
        else:
            files[split_of_file(os.path.basename(name_or_path)) or "train"] = name_or_path
    for split, path in explicit.items():
        if path is not None:
            files[split] = resolve_data_file(path, directory, "SQuAD")
    if not files:
        raise FileNotFoundError(f"No SQuAD JSON files found in {name_or_path or 'the *_file arguments'}")

    if len(files) == 1 and split_by_article and all(path is None for path in explicit.values()):
        rows = read_squad_json(next(iter(files.values())))
        return squad_article_split(rows, train_articles, validation_articles, test_articles)
    return datasets.DatasetDict({split: _to_dataset(read_squad_json(files[split])) for split in files})
