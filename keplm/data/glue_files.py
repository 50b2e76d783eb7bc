"""GLUE-like classification data in user files (CSV, quoted TSV, JSON, JSON-lines): rows renamed to the ``glue``
schema, labels read as class ids or names (or regression scores), with ``file:line`` in every error.
:func:`keplm.data.glue.load_glue_dataset` reads ``train_file`` / ``validation_file`` / ``test_file`` through these.

The rows are read with the standard library's ``csv`` / ``json`` rather than ``datasets.load_dataset("csv")``, whose
pandas reader (datasets 5.2, tried 2026-11-28) takes a first row with one field too many as an index column (the text
shifts into the label) and fills a row with one field too few with an empty label, both without a word; here each is
a ValueError naming ``file:line``. The rows then become a ``datasets.Dataset`` as from any loader."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Sequence

from keplm.io_utils import iter_jsonl, open_text

logger = logging.getLogger(__name__)


def read_table(path: str) -> list[tuple[str, dict]]:
    """``(where, record)`` of a CSV (``.csv``), quoted TSV (``.tsv``), JSON array / JSON-lines (``.json``,
    ``.jsonl``) file; ``where`` is ``file:line`` (``file[item]`` in a JSON array)."""
    base = path.lower()[:-3] if path.lower().endswith(".gz") else path.lower()
    suffix = os.path.splitext(base)[1]
    if suffix in (".csv", ".tsv"):
        records = []
        with open_text(path) as handle:
            reader = csv.DictReader(handle, delimiter="," if suffix == ".csv" else "\t")
            try:
                for record in reader:
                    if None in record or None in record.values():
                        raise ValueError(
                            f"{path}:{reader.line_num}: expected {len(reader.fieldnames)} fields "
                            f"({reader.fieldnames}), got a different number"
                        )
                    records.append((f"{path}:{reader.line_num}", record))
            except csv.Error as err:
                raise ValueError(f"{path}:{reader.line_num}: {err}") from err
        return records
    if suffix not in (".json", ".jsonl"):
        raise ValueError(f"{path}: unsupported file type {suffix!r}; use .csv, .tsv, .json or .jsonl")
    with open_text(path) as handle:
        text = handle.read()
    if not text.lstrip().startswith("["):  # JSON lines, each checked to be an object
        return [(f"{path}:{line_no}", record) for _, line_no, record in iter_jsonl(path)]
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    records = [(f"{path}[{i}]", item) for i, item in enumerate(items)]
    for where, record in records:
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return records


def table_rows(
    path: str, text_columns: Sequence[str], names: Sequence[str], label_column: str, idx_column: str
) -> list[dict]:
    """Rows of one CSV/JSON file renamed to the schema; labels as written (converted in :func:`encode_labels`)."""
    rows = []
    for where, record in read_table(path):
        row = {}
        for column, name in zip(text_columns, names):
            value = record.get(column)
            if not isinstance(value, str):
                raise ValueError(
                    f"{where}: column {column!r} must hold text, got {value!r} (columns: {sorted(record)})"
                )
            row[name] = value
        row["label"] = record.get(label_column)
        idx = record.get(idx_column, len(rows))
        try:
            row["idx"] = int(idx)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {idx_column!r} must be an int, got {idx!r}") from None
        row["_where"] = where
        rows.append(row)
    return rows


def encode_labels(split_rows: dict[str, list[dict]], label_names: Sequence[str] | None) -> None:
    """Labels to class ids (names or ints; missing / empty / -1 = unlabeled -1) or floats (no label names)."""
    for rows in split_rows.values():
        for row in rows:
            value = row["label"]
            if value in (None, "", -1, "-1"):
                row["label"] = -1 if label_names is not None else math.nan
                continue
            if label_names is None:
                try:
                    row["label"] = float(value)
                except (TypeError, ValueError):
                    raise ValueError(f"{row['_where']}: a regression label must be a number, got {value!r}") from None
                continue
            if isinstance(value, str) and value in label_names:
                row["label"] = list(label_names).index(value)
                continue
            try:
                label = int(value) if not isinstance(value, float) or value.is_integer() else None
            except (TypeError, ValueError):
                label = None
            if label is None or not 0 <= label < len(label_names):
                raise ValueError(
                    f"{row['_where']}: label {value!r} is neither a class id below {len(label_names)} "
                    f"nor one of {list(label_names)}"
                )
            row["label"] = label


def infer_label_names(split_rows: dict[str, list[dict]]) -> list[str] | None:
    """Label names of files without a task: None (regression) if some label is a non-integral number (logged with
    the first one), else the class ids 0..max as strings for integer labels, else the sorted distinct strings.
    Text labels are read without surrounding spaces (``"pos "`` is ``"pos"``); two that differ only in case
    (``"Neg"``, ``"neg"``) are a ValueError naming both, not two classes."""
    labelled = [row for rows in split_rows.values() for row in rows if row["label"] not in (None, "", -1, "-1")]
    for row in labelled:
        if isinstance(row["label"], str):
            row["label"] = row["label"].strip()
    numbers = []
    for row in labelled:
        try:
            numbers.append((float(row["label"]), row))
        except (TypeError, ValueError):
            return _text_label_names(labelled)
    fractional = [(number, row) for number, row in numbers if not number.is_integer()]
    if fractional:
        number, row = fractional[0]
        logger.warning(
            "the labels hold %d non-integer number(s) (first: %r at %s): read as regression scores (STS-B style); "
            "a classification file needs integer class ids or label names",
            len(fractional),
            row["label"],
            row["_where"],
        )
        return None
    return [str(i) for i in range(int(max((n for n, _ in numbers), default=1)) + 1)]


def _text_label_names(labelled: list[dict]) -> list[str]:
    """The sorted distinct text labels; a ValueError names two that differ only in case."""
    first: dict[str, dict] = {}
    for row in labelled:
        label = str(row["label"])
        other = first.setdefault(label.casefold(), row)
        if str(other["label"]) != label:
            raise ValueError(
                f"labels {other['label']!r} ({other['_where']}) and {label!r} ({row['_where']}) differ only in case: "
                "write each class one way (or they would be two classes)"
            )
    return sorted({str(row["label"]) for row in labelled})


__all__ = ["encode_labels", "infer_label_names", "read_table", "table_rows"]
