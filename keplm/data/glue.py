"""GLUE tasks (CoLA, SST-2, MRPC, STS-B, RTE) as ``datasets.DatasetDict`` in the Hugging Face ``glue`` schema.

Every split has the task's text columns (``sentence``, or ``sentence1`` / ``sentence2``), ``label`` (a
``ClassLabel`` with the Hub's label names, ``float32`` for STS-B; -1 where a split has no labels) and ``idx``
(``int32``). Sources: a task folder laid out as ``../shared/data/glue/<TASK>`` (its ``SOURCE.md``: each task
keeps its own raw format), local CSV / TSV / JSON / JSON-lines files with explicit columns, or a Hub dataset id.
Malformed rows are ValueErrors naming ``file:line``.

Local task folders (files plain or ``.gz``):

=====  ===========================================================  ==============================================
task   files                                                        format
=====  ===========================================================  ==============================================
CoLA   ``in_domain_train.tsv``, ``in_domain_dev.tsv``,               no header; ``source  label  mark  sentence``
       ``out_of_domain_dev.tsv``
SST-2  ``train.tsv``, ``dev.tsv``                                    header ``sentence  label``
MRPC   ``train.tsv``, ``dev.tsv``, ``test.tsv`` + labels of test     header ``Quality  #1 ID  #2 ID  #1 String
       from ``msr_paraphrase_test.txt`` (matched by the id pair)     #2 String`` (UTF-8 BOM); test ``index ...``
STS-B  ``train.tsv``, ``dev.tsv``                                    10 columns, ``sentence1 sentence2 score``
                                                                     last, score a float in [0, 5]
RTE    ``train.tsv``, ``dev.tsv``, ``test.tsv``                      a CSV-quoted HF export ``sentence1 sentence2
                                                                     label idx``; test label -1
=====  ===========================================================  ==============================================

GLUE's CoLA validation set (1,043 sentences, the Hub's ``validation``) is the in-domain dev set followed by the
out-of-domain one; ``cola_validation="in_domain"`` / ``"out_of_domain"`` keeps one of them.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import datasets

from keplm.io_utils import find_file, open_text

from .glue_files import encode_labels, infer_label_names, read_table, table_rows
from .splits import SPLITS, is_local_data, limit_samples, local_split_files

__all__ = [
    "GlueTask",
    "GLUE_TASKS",
    "GLUE_HUB_ID",
    "count_examples_cut",
    "glue_task",
    "glue_features",
    "load_glue_dataset",
    "read_glue_task_dir",
    "task_of_dataset",
]

#: the Hub dataset a bare task name is loaded from when no local folder is given
GLUE_HUB_ID = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    """What a GLUE task's examples hold. ``name`` is the Hub config name and the task name of
    :func:`keplm.training.metrics.glue_metrics`; ``directory`` the task's folder under ``glue/``."""

    name: str
    directory: str
    text_columns: tuple[str, ...]
    label_names: tuple[str, ...] | None  # None: regression (STS-B)
    metric_config: str | None = None  # the GLUE metric config it is scored with (default: its name)

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def metric(self) -> str:
        return self.metric_config or self.name


GLUE_TASKS: dict[str, GlueTask] = {
    "cola": GlueTask("cola", "CoLA", ("sentence",), ("unacceptable", "acceptable")),
    "sst2": GlueTask("sst2", "SST-2", ("sentence",), ("negative", "positive")),
    "mrpc": GlueTask("mrpc", "MRPC", ("sentence1", "sentence2"), ("not_equivalent", "equivalent")),
    "stsb": GlueTask("stsb", "STS-B", ("sentence1", "sentence2"), None),
    "rte": GlueTask("rte", "RTE", ("sentence1", "sentence2"), ("entailment", "not_entailment")),
}


def glue_task(name: str | GlueTask) -> GlueTask:
    """The task of a name in any spelling (``"RTE"``, ``"sst-2"``, ``"STS_B"``, a folder path ending in one)."""
    if isinstance(name, GlueTask):
        return name
    key = os.path.basename(os.path.normpath(str(name))).lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; expected one of {sorted(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def _known_task(name: str) -> GlueTask | None:
    try:
        return glue_task(name)
    except ValueError:
        return None


def task_of_dataset(dataset_dict: datasets.DatasetDict, name: str = "custom") -> GlueTask:
    """The task of GLUE-like data loaded from files without a task name: its text columns (``sentence``, or
    ``sentence1`` and ``sentence2``) and label names as loaded, scored like SST-2 (accuracy) or, for float labels,
    like STS-B (Pearson / Spearman)."""
    first = next(iter(dataset_dict.values()))
    columns = tuple(c for c in ("sentence", "sentence1", "sentence2") if c in first.column_names)
    if not columns:
        raise ValueError(f"no text column (sentence, or sentence1 and sentence2) in {first.column_names}")
    label = first.features.get("label")
    names = tuple(label.names) if isinstance(label, datasets.ClassLabel) else None
    return GlueTask(name, name, columns, names, metric_config="sst2" if names is not None else "stsb")


def glue_features(
    task: GlueTask | str | None = None,
    text_columns: Sequence[str] | None = None,
    label_names: Sequence[str] | None = None,
) -> datasets.Features:
    """The Hub ``glue`` schema: text columns, ``label`` (ClassLabel, or float32 without label names), ``idx``."""
    if task is not None:
        task = glue_task(task)
        text_columns, label_names = task.text_columns, task.label_names
    features = {column: datasets.Value("string") for column in text_columns}
    features["label"] = (
        datasets.Value("float32") if label_names is None else datasets.ClassLabel(names=list(label_names))
    )
    features["idx"] = datasets.Value("int32")
    return datasets.Features(features)


# ---------------------------------------------------------------------------------------------- raw task folders
def _tsv_lines(path: str, quoted: bool = False):
    """``(line number, fields)`` of a TSV file (``open_text`` drops a BOM); ``quoted``: CSV quoting (RTE's HF
    export)."""
    with open_text(path) as handle:
        if not quoted:
            for line_no, line in enumerate(handle, 1):
                if line.strip():
                    yield line_no, line.rstrip("\r\n").split("\t")
            return
        reader = csv.reader(handle, delimiter="\t")
        try:
            for fields in reader:
                if fields:
                    yield reader.line_num, fields
        except csv.Error as err:
            raise ValueError(f"{path}: unreadable ({err})") from err


def _check_header(path: str, line_no: int, fields: list[str], expected: tuple[str, ...]) -> None:
    if tuple(f.strip() for f in fields) != expected:
        raise ValueError(f"{path}:{line_no}: expected the header {list(expected)}, got {fields}")


def _int_label(path, line_no, value: str, allowed=(0, 1)) -> int:
    try:
        label = int(value)
    except ValueError:
        label = None
    if label not in allowed:
        raise ValueError(f"{path}:{line_no}: label must be one of {list(allowed)}, got {value!r}")
    return label


def _read_rows(
    path: str,
    header: tuple[str, ...] | None,
    num_fields: int,
    text: dict[str, int],
    label: int | None,
    idx: int | None = None,
    quoted: bool = False,
    regression: bool = False,
    allowed=(0, 1),
) -> list[dict]:
    """Rows of one raw GLUE file: ``text`` maps output columns to field positions, ``label`` / ``idx`` are field
    positions (``idx`` None: the row number)."""
    rows = []
    for line_no, fields in _tsv_lines(path, quoted):
        if header is not None and not rows and line_no == 1:
            _check_header(path, line_no, fields, header)
            continue
        if len(fields) != num_fields:
            raise ValueError(f"{path}:{line_no}: expected {num_fields} tab-separated fields, got {len(fields)}")
        row = {column: fields[position] for column, position in text.items()}
        if label is None:
            row["label"] = -1
        elif regression:
            try:
                row["label"] = float(fields[label])
            except ValueError:
                row["label"] = math.nan
            if not 0.0 <= row["label"] <= 5.0:
                raise ValueError(f"{path}:{line_no}: score must be a number in [0, 5], got {fields[label]!r}")
        else:
            row["label"] = _int_label(path, line_no, fields[label], allowed)
        if idx is None:
            row["idx"] = len(rows)
        else:
            try:
                row["idx"] = int(fields[idx])
            except ValueError:
                raise ValueError(f"{path}:{line_no}: index must be an int, got {fields[idx]!r}") from None
        row["_where"] = f"{path}:{line_no}"
        rows.append(row)
    return rows


_MRPC_HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
_STSB_HEADER = tuple("index genre filename year old_index source1 source2 sentence1 sentence2 score".split())

#: the raw train / dev (and RTE's test) files of each task but CoLA: their header, number of fields, the fields of the
#: text columns, of the label and of the index (None: the row number), and how they are read (:func:`_read_rows`)
_RAW_FORMATS = {
    "sst2": (("sentence", "label"), 2, {"sentence": 0}, 1, None, {}),
    "mrpc": (_MRPC_HEADER, 5, {"sentence1": 3, "sentence2": 4}, 0, None, {}),
    "stsb": (_STSB_HEADER, 10, {"sentence1": 7, "sentence2": 8}, 9, 0, {"regression": True}),
    "rte": (("sentence1", "sentence2", "label", "idx"), 4, {"sentence1": 0, "sentence2": 1}, 2, 3, {"quoted": True}),
}


def _mrpc_test(directory: str) -> list[dict]:
    """GLUE's MRPC test set with the labels of the original ``msr_paraphrase_test.txt`` (matched by id pair)."""
    path = find_file(directory, "test.tsv")
    rows = _read_rows(
        path,
        ("index", *_MRPC_HEADER[1:]),
        5,
        {"sentence1": 3, "sentence2": 4, "_id1": 1, "_id2": 2},
        None,
        idx=0,
    )
    labels_path = find_file(directory, "msr_paraphrase_test.txt", required=False)
    if labels_path is None:
        raise FileNotFoundError(f"{directory}: no msr_paraphrase_test.txt(.gz) with the labels of the MRPC test set")
    labels = {
        (row["_id1"], row["_id2"]): row["label"]
        for row in _read_rows(labels_path, _MRPC_HEADER, 5, {"_id1": 1, "_id2": 2}, 0)
    }
    for row in rows:
        key = (row.pop("_id1"), row.pop("_id2"))
        if key not in labels:
            raise ValueError(f"{row['_where']}: the pair {key} has no label in {labels_path}")
        row["label"] = labels[key]
    return rows


def read_glue_task_dir(
    directory: str, task: GlueTask | str | None = None, cola_validation: str = "glue"
) -> dict[str, list[dict]]:
    """``{split: rows}`` of a raw task folder (layout in the module docstring); the task defaults to the folder's
    name. Rows hold the schema's columns (a private ``_where`` names their file and line)."""
    task = glue_task(directory if task is None else task)
    directory = os.fspath(directory)
    splits: dict[str, list[dict]] = {}
    if task.name == "cola":

        def cola(name):
            return _read_rows(find_file(directory, name), None, 4, {"sentence": 3}, 1)

        choices = {
            "glue": ("in_domain_dev.tsv", "out_of_domain_dev.tsv"),
            "in_domain": ("in_domain_dev.tsv",),
            "out_of_domain": ("out_of_domain_dev.tsv",),
        }
        if cola_validation not in choices:
            raise ValueError(f"cola_validation must be one of {list(choices)}, got {cola_validation!r}")
        splits["train"] = cola("in_domain_train.tsv")
        splits["validation"] = [row for name in choices[cola_validation] for row in cola(name)]
        for i, row in enumerate(splits["validation"]):
            row["idx"] = i
    else:
        header, num_fields, text, label, idx, options = _RAW_FORMATS[task.name]
        files = {"train": "train.tsv", "validation": "dev.tsv", **({"test": "test.tsv"} if task.name == "rte" else {})}
        for split, name in files.items():
            allowed = (-1,) if split == "test" else (0, 1)  # RTE's test labels are hidden
            splits[split] = _read_rows(
                find_file(directory, name), header, num_fields, text, label, idx, **options, allowed=allowed
            )
        if task.name == "mrpc":
            splits["test"] = _mrpc_test(directory)
    return splits


# ------------------------------------------------------------------------------------------------- loading
def _to_dataset_dict(split_rows: dict[str, list[dict]], features: datasets.Features) -> datasets.DatasetDict:
    out = {}
    for split in [s for s in SPLITS if s in split_rows] + [s for s in split_rows if s not in SPLITS]:
        rows = split_rows[split]
        out[split] = datasets.Dataset.from_dict(
            {name: [row[name] for row in rows] for name in features}, features=features
        )
    return datasets.DatasetDict(out)


def _load_hub(name: str, task: GlueTask | None, text_columns, label_column, idx_column, **load_kwargs):
    config = load_kwargs.pop("name", task.name if task is not None else None)
    try:
        dsd = datasets.load_dataset(name, config, **load_kwargs)
    except ConnectionError as err:
        raise ConnectionError(
            f"could not load {name!r} ({config}) from the Hub: {err}. Offline, pass a local task "
            "folder (e.g. ../shared/data/glue/RTE) or data_dir"
        ) from err
    if not isinstance(dsd, datasets.DatasetDict):
        dsd = datasets.DatasetDict({"train": dsd})
    names = task.text_columns if task else ()
    for split in list(dsd):
        columns = dsd[split].column_names
        renames = {
            old: new
            for old, new in (*zip(text_columns or (), names), (label_column, "label"), (idx_column, "idx"))
            if old != new and old in columns
        }
        if renames:
            dsd[split] = dsd[split].rename_columns(renames)
        missing = [c for c in (*names, "label") if c not in dsd[split].column_names]
        if missing:
            raise ValueError(
                f"Hub dataset {name!r} split {split!r} lacks {missing} (columns: {columns}); "
                "map them with text_columns / label_column"
            )
        if "idx" not in dsd[split].column_names:
            dsd[split] = dsd[split].add_column("idx", list(range(len(dsd[split]))))
    return dsd


def load_glue_dataset(
    task_or_path: str | os.PathLike | None = None,
    task: str | GlueTask | None = None,
    data_dir: str | os.PathLike | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    text_columns: Sequence[str] | None = None,
    label_column: str = "label",
    idx_column: str = "idx",
    label_names: Sequence[str] | None = None,
    cola_validation: str = "glue",
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    max_test_samples: int | None = None,
    **load_kwargs,
) -> datasets.DatasetDict:
    """Load a GLUE task (or a GLUE-like sentence(-pair) task) as a DatasetDict in the Hub ``glue`` schema.

    ``task_or_path`` may be

    * a raw task folder (``../shared/data/glue/RTE``; the task is its name unless ``task`` is given),
    * a task name (``"rte"``, ``"SST-2"``): read from ``data_dir/<TASK>`` when ``data_dir`` is given, else from the
      Hub (``datasets.load_dataset("nyu-mll/glue", "rte")``; offline this is a ConnectionError saying so),
    * a folder of CSV / TSV / JSON / JSON-lines files (splits by file name), or one such file (its split by name,
      else train), or None with ``train_file`` / ``validation_file`` / ``test_file``,
    * any other Hub dataset id (the config is ``task``'s name or ``name=...``).

    For files, ``text_columns`` name the text columns (default: the task's), renamed to the task's (``sentence`` /
    ``sentence1``, ``sentence2`` without a task); ``label_column`` holds class ids or label names (missing, empty
    or -1: unlabeled, -1), or scores for a regression task; ``idx_column`` defaults to the row number.
    ``label_names`` (files without a task) fixes the classes; otherwise they are inferred (see
    :func:`infer_label_names`). ``max_*_samples`` keep the first examples of a split.
    """
    limits = {"train": max_train_samples, "validation": max_eval_samples, "test": max_test_samples}
    task = glue_task(task) if task is not None else None
    explicit = {"train": train_file, "validation": validation_file, "test": test_file}
    path = os.fspath(task_or_path) if task_or_path is not None else None
    if not is_local_data(path, "GLUE data"):
        named = _known_task(path) if "/" not in path and os.sep not in path else None  # not a Hub id "owner/name"
        if named is None or task not in (None, named):
            return limit_samples(_load_hub(path, task, text_columns, label_column, idx_column, **load_kwargs), limits)
        task = named
        if data_dir is None:
            return limit_samples(_load_hub(GLUE_HUB_ID, task, None, label_column, idx_column, **load_kwargs), limits)
        path = os.path.join(os.fspath(data_dir), task.directory)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no GLUE task folder {path}")

    if path is not None and os.path.isdir(path):
        task = task or _known_task(path)
        raw = task is not None and not any(explicit.values()) and text_columns is None
        if raw and find_file(path, "in_domain_train.tsv" if task.name == "cola" else "train.tsv", required=False):
            split_rows = read_glue_task_dir(path, task, cola_validation)
            return limit_samples(_to_dataset_dict(split_rows, glue_features(task)), limits)
    files = local_split_files(path, explicit, "GLUE data", extensions=(".csv", ".tsv", ".json", ".jsonl"))

    if task is not None:
        names = task.text_columns
        text_columns = tuple(text_columns) if text_columns is not None else names
        if len(text_columns) != len(names):
            raise ValueError(f"{task.name} has {len(names)} text columns {list(names)}, got {list(text_columns)}")
        label_names = task.label_names
    else:
        if text_columns is None:
            first = read_table(next(iter(files.values())))
            text_columns = ("sentence1", "sentence2") if first and "sentence1" in first[0][1] else ("sentence",)
        text_columns = tuple(text_columns)
        if len(text_columns) not in (1, 2):
            raise ValueError(f"text_columns must name one or two columns, got {list(text_columns)}")
        names = ("sentence",) if len(text_columns) == 1 else ("sentence1", "sentence2")
    split_rows = {
        split: table_rows(files[split], text_columns, names, label_column, idx_column)
        for split in SPLITS
        if split in files
    }
    if task is None and label_names is None:
        label_names = infer_label_names(split_rows)
    encode_labels(split_rows, label_names)
    features = glue_features(task) if task is not None else glue_features(None, names, label_names)
    return limit_samples(_to_dataset_dict(split_rows, features), limits)


def count_examples_cut(tokenizer, dataset, text_columns: Sequence[str], max_length: int, batch_size: int = 1000) -> int:
    """Examples of ``dataset`` whose ``[CLS] s1 [SEP] s2 [SEP]`` (one or two ``text_columns``) is longer than
    ``max_length`` tokens: what a cut at ``--max_seq_length`` hides from the model."""
    cut = 0
    for rows in dataset.iter(batch_size):
        texts = [rows[column] for column in text_columns]
        encoded = tokenizer(*texts, truncation=False, add_special_tokens=True)
        cut += sum(len(ids) > max_length for ids in encoded["input_ids"])
    return cut
