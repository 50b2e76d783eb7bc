"""CoNLL-style NER readers and a ``datasets.DatasetDict`` loader.

Supports plain or gzip CoNLL files (CoNLL-2003 4-column, WNUT-17 and NCBI-disease 2-column TSV), JSON-lines
files with ``tokens`` and ``ner_tags`` (as HF's ``run_ner.py`` reads them), local directories with auto-detected
splits, explicit files, and Hub dataset ids.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import datasets

from keplm.io_utils import iter_jsonl, open_text

from .splits import SPLITS, is_local_data, limit_samples, local_split_files

__all__ = [
    "read_conll",
    "read_json_ner",
    "load_ner_dataset",
    "get_label_list",
    "sort_labels",
]

_PREFIX_ORDER = {"B": 0, "I": 1, "E": 2, "L": 3, "S": 4, "U": 5}


def _split_line(line: str) -> list[str]:
    # Tab-separated files may hold tokens with inner spaces; otherwise split on any whitespace.
    if "\t" in line:
        return [part.strip() for part in line.split("\t") if part.strip()]
    return line.split()


def read_conll(path: str | os.PathLike, tag_column: int = -1) -> list[dict]:
    """Read a CoNLL file into ``[{"id", "tokens", "ner_tags"}]`` (tags as strings).

    Token is the first column, the tag is ``tag_column`` (default last). Blank or whitespace-only
    lines separate sentences; ``-DOCSTART-`` lines are skipped. Every token line of a file must have the
    column count of its first token line (CoNLL-2003: 4, WNUT-17 / NCBI-disease: 2): a line that lost its
    NER column (``paris NNP B-NP``) would otherwise be read with a chunk tag as its label, and a
    space-separated multi-word token (``New York B-LOC``) would lose a word. A mismatch is a ValueError
    naming the file and line.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"CoNLL file not found: {path}")
    sentences: list[dict] = []
    tokens: list[str] = []
    tags: list[str] = []
    columns: tuple[int, int] | None = None  # (column count, line of the first token line)

    def flush():
        if tokens:
            sentences.append({"id": str(len(sentences)), "tokens": list(tokens), "ner_tags": list(tags)})
            tokens.clear()
            tags.clear()

    with open_text(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.startswith("-DOCSTART-"):
                flush()
                continue
            parts = _split_line(line)
            if len(parts) < 2:
                raise ValueError(f"{path}, line {line_no}: expected at least 2 columns (token and tag), got {line!r}")
            if columns is None:
                columns = (len(parts), line_no)
            elif len(parts) != columns[0]:
                raise ValueError(
                    f"{path}, line {line_no}: {len(parts)} columns in {line!r}, but the file's first token "
                    f"line ({columns[1]}) has {columns[0]}; every token line must have the same columns "
                    "(token ... tag; tab-separate tokens that contain spaces)"
                )
            try:
                tag = parts[tag_column]
            except IndexError:
                raise ValueError(
                    f"{path}, line {line_no}: tag_column={tag_column} out of range for {len(parts)} columns in {line!r}"
                ) from None
            tokens.append(parts[0])
            tags.append(tag)
    flush()
    return sentences


def read_json_ner(path: str | os.PathLike, tokens_column: str = "tokens", tags_column: str = "ner_tags") -> list[dict]:
    """Read a JSON-lines NER file (``.json``/``.jsonl``, optionally gzipped): one object per sentence with a list of
    words ``tokens_column`` and as many string tags ``tags_column``; ``id`` is kept when present. A missing column
    or a length mismatch is a ValueError naming the file and line."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NER file not found: {path}")
    rows = []
    for _, line_no, obj in iter_jsonl(path):
        tokens, tags = obj.get(tokens_column), obj.get(tags_column)
        if not isinstance(tokens, list) or not isinstance(tags, list):
            raise ValueError(f"{path}:{line_no}: needs the lists {tokens_column!r} and {tags_column!r}")
        if len(tokens) != len(tags):
            raise ValueError(f"{path}:{line_no}: {len(tokens)} tokens but {len(tags)} tags")
        if any(not isinstance(t, str) for t in tags):
            raise ValueError(f"{path}:{line_no}: tags must be strings (e.g. 'B-PER'), got {tags!r}")
        rows.append({"id": str(obj.get("id", len(rows))), "tokens": [str(t) for t in tokens], "ner_tags": tags})
    return rows


def _read_split(path: str, tag_column: int) -> list[dict]:
    """A split file: JSON lines for ``.json``/``.jsonl`` (optionally ``.gz``), CoNLL columns otherwise."""
    base = path[:-3] if path.lower().endswith(".gz") else path
    if base.lower().endswith((".json", ".jsonl")):
        return read_json_ner(path)
    return read_conll(path, tag_column=tag_column)


def _label_key(label: str) -> tuple:
    if label == "O":
        return (0, "", 0)
    prefix, sep, etype = label.partition("-")
    if sep and prefix.upper() in _PREFIX_ORDER:
        return (1, etype, _PREFIX_ORDER[prefix.upper()])
    return (1, label, -1)  # tag without a BIO prefix (IO scheme)


def sort_labels(labels: Iterable[str]) -> list[str]:
    """Sort tags: ``O`` first, then by entity type, ``B-`` before ``I-`` (then E/L/S/U)."""
    return sorted(set(labels), key=_label_key)


def _classlabel_of(feature) -> datasets.ClassLabel | None:
    inner = getattr(feature, "feature", None)
    return inner if isinstance(inner, datasets.ClassLabel) else None


def get_label_list(dataset_dict: datasets.DatasetDict | datasets.Dataset, column: str = "ner_tags") -> list[str]:
    """Label names of ``column``: the ClassLabel names if present, else the sorted unique tags."""
    splits = dataset_dict.values() if isinstance(dataset_dict, datasets.DatasetDict) else [dataset_dict]
    labels: set[str] = set()
    for split in splits:
        class_label = _classlabel_of(split.features[column])
        if class_label is not None:
            return list(class_label.names)
        for row in split[column]:
            labels.update(str(tag) for tag in row)
    return sort_labels(labels)


def _build_dataset(rows: list[dict], label_list: Sequence[str]) -> datasets.Dataset:
    label2id = {label: i for i, label in enumerate(label_list)}
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=list(label_list))),
        }
    )
    data = {
        "id": [row["id"] for row in rows],
        "tokens": [row["tokens"] for row in rows],
        "ner_tags": [[label2id[tag] for tag in row["ner_tags"]] for row in rows],
    }
    return datasets.Dataset.from_dict(data, features=features)


def _check_labels(split_rows: dict[str, list[dict]], label_list: Sequence[str], files: dict[str, str]):
    known = set(label_list)
    for split, rows in split_rows.items():
        for row in rows:
            unknown = set(row["ner_tags"]) - known
            if unknown:
                raise ValueError(f"{files[split]}: sentence {row['id']} has tags {sorted(unknown)} not in label_list")


def load_ner_dataset(
    name_or_path: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    max_test_samples: int | None = None,
    tag_column: int = -1,
    label_list: Sequence[str] | None = None,
    tokens_column: str = "tokens",
    tags_column: str = "ner_tags",
    train_sample_seed: int | None = None,
    **load_kwargs,
) -> datasets.DatasetDict:
    """Load NER data as a DatasetDict with ``id``, ``tokens`` and ``ner_tags`` (ClassLabel).

    ``name_or_path`` may be a local directory (splits auto-detected by file name), a single
    CoNLL file (becomes ``train``), ``None`` with explicit ``*_file`` arguments, or a Hub id
    (``datasets.load_dataset(name_or_path, **load_kwargs)``). ``label_list`` fixes the label order;
    otherwise labels are collected from all splits and sorted with :func:`sort_labels`, before any limit, so every
    training size has the same labels. ``train_sample_seed``: with ``max_train_samples``, a seeded (nested) random
    draw of the training sentences instead of the first ones (:func:`~keplm.data.splits.limit_samples`).
    """
    seeds = {"train": train_sample_seed}
    limits = {"train": max_train_samples, "validation": max_eval_samples, "test": max_test_samples}
    explicit = {"train": train_file, "validation": validation_file, "test": test_file}
    if not is_local_data(name_or_path, "NER data"):
        return limit_samples(
            _load_hub(name_or_path, tokens_column, tags_column, label_list, **load_kwargs), limits, seeds
        )
    files = local_split_files(name_or_path, explicit, "NER data", by_name=False)
    split_rows = {split: _read_split(files[split], tag_column) for split in SPLITS if split in files}
    for split, rows in split_rows.items():
        if not rows:
            raise ValueError(f"the {split} split is empty: {files[split]} holds no sentence")
    if label_list is None:
        label_list = sort_labels(tag for rows in split_rows.values() for row in rows for tag in row["ner_tags"])
    else:
        _check_labels(split_rows, label_list, files)
    dsd = datasets.DatasetDict({split: _build_dataset(rows, label_list) for split, rows in split_rows.items()})
    return limit_samples(dsd, limits, seeds)


def _load_hub(name, tokens_column, tags_column, label_list, **load_kwargs) -> datasets.DatasetDict:
    dsd = datasets.load_dataset(name, **load_kwargs)
    if not isinstance(dsd, datasets.DatasetDict):
        dsd = datasets.DatasetDict({"train": dsd})
    if "validation" not in dsd:
        for alias in ("dev", "valid", "devel"):
            if alias in dsd:
                dsd["validation"] = dsd.pop(alias)
                break
    for split in list(dsd):
        if len(dsd[split]) == 0:
            raise ValueError(f"Hub dataset {name!r}: the {split} split is empty")
        columns = dsd[split].column_names
        for column in (tokens_column, tags_column):
            if column not in columns:
                raise ValueError(f"Hub dataset {name!r} split {split!r} has no column {column!r}: {columns}")
        renames = {old: new for old, new in ((tokens_column, "tokens"), (tags_column, "ner_tags")) if old != new}
        if renames:
            dsd[split] = dsd[split].rename_columns(renames)
        if "id" not in dsd[split].column_names:
            dsd[split] = dsd[split].add_column("id", [str(i) for i in range(len(dsd[split]))])
    first = next(iter(dsd.values()))
    if _classlabel_of(first.features["ner_tags"]) is not None:
        return dsd
    # String tags: convert to a ClassLabel sequence shared across splits.
    if label_list is None:
        label_list = get_label_list(dsd)
    label2id = {label: i for i, label in enumerate(label_list)}
    new_feature = datasets.Sequence(datasets.ClassLabel(names=list(label_list)))

    def encode(batch):
        try:
            return {"ner_tags": [[label2id[str(t)] for t in tags] for tags in batch["ner_tags"]]}
        except KeyError as err:
            raise ValueError(f"Hub dataset {name!r}: tag {err.args[0]!r} not in label_list") from None

    for split in list(dsd):
        features = dsd[split].features.copy()
        features["ner_tags"] = new_feature
        dsd[split] = dsd[split].map(encode, batched=True, features=features)
    return dsd
