"""Splits of a local dataset: which file is train / validation / test, explicit file paths, and sample limits.
Shared by every dataset loader and run script."""

from __future__ import annotations

import os
import random
import re

SPLITS = ("train", "validation", "test")

_IGNORED_SUFFIXES = {".md", ".json", ".jsonl", ".py", ".zip", ".tar", ".csv", ".pdf", ".html", ".yaml", ".yml"}
_IGNORED_PREFIXES = ("readme", "license", "licence", "source", "copying", "notice", ".")
_VALIDATION_WORDS = ("dev", "devel", "valid", "validation", "val", "testa")


def split_of_file(name: str) -> str | None:
    """The split a data file's name announces (``train``, ``dev``/``valid``/``testa`` → validation, ``test``)."""
    base = name.lower()
    base = base[:-3] if base.endswith(".gz") else base
    words = re.split(r"[^a-z0-9]+", base)
    if any(w in _VALIDATION_WORDS for w in words) or re.search(r"(dev|valid)", base):
        return "validation"
    if "train" in base:
        return "train"
    if "test" in base:
        return "test"
    return None


def find_split_files(directory: str | os.PathLike, extensions: tuple[str, ...] | None = None) -> dict[str, str]:
    """Auto-detect ``{split: path}`` in a directory from file names.

    ``extensions`` (e.g. ``(".json",)``, compressed ``.gz`` variants included) selects the data files; without it,
    every file but documentation, code and archives is a candidate (CoNLL files have no fixed extension).
    Several candidates for one split are a ValueError naming them.
    """
    directory = os.fspath(directory)
    found: dict[str, list[str]] = {}
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if not os.path.isfile(full):
            continue
        base = name.lower()[:-3] if name.lower().endswith(".gz") else name.lower()
        suffix = os.path.splitext(base)[1]
        if extensions is not None:
            if suffix not in extensions:
                continue
        elif base.startswith(_IGNORED_PREFIXES) or suffix in _IGNORED_SUFFIXES:
            continue
        split = split_of_file(name)
        if split is not None:
            found.setdefault(split, []).append(full)
    for split, paths in found.items():
        if len(paths) > 1:
            raise ValueError(f"{directory}: several candidate {split} files {paths}; pass {split}_file explicitly")
    return {split: paths[0] for split, paths in found.items()}


def resolve_data_file(path: str | None, directory: str | None, what: str = "data") -> str | None:
    """``path`` as given or relative to ``directory``; FileNotFoundError when it is neither."""
    if path is None:
        return None
    if os.path.isfile(path):
        return path
    if directory is not None and os.path.isfile(os.path.join(directory, path)):
        return os.path.join(directory, path)
    raise FileNotFoundError(f"{what} file not found: {path}")


def local_split_files(
    path, explicit: dict[str, str | None], what: str, extensions: tuple[str, ...] | None = None, by_name: bool = True
) -> dict[str, str]:
    """``{split: file}`` of local data: a folder's files (:func:`find_split_files`) or one file (in the split its name
    announces, else train; ``by_name=False``: train), then the ``explicit`` ``{split: file}`` paths, as given or
    relative to the folder. A FileNotFoundError when that makes no file."""
    files, directory = {}, None
    if path is not None:
        path = os.fspath(path)
        if os.path.isdir(path):
            directory = path
            files.update(find_split_files(path, extensions))
        else:
            files[(split_of_file(os.path.basename(path)) if by_name else None) or "train"] = path
    for split, name in explicit.items():
        resolved = resolve_data_file(name, directory, what)
        if resolved is not None:
            files[split] = resolved
    if not files:
        raise FileNotFoundError(f"no train/validation/test {what} files found in {path or 'the *_file arguments'}")
    return files


#: what a Hub dataset id looks like (``name`` or ``namespace/name``); data file endings that no Hub id has
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_FILE_ENDINGS = (".txt", ".conll", ".json", ".jsonl", ".tsv", ".csv", ".gz", ".parquet")


def is_local_data(name_or_path, what: str = "data") -> bool:
    """True for an existing local file or folder, False for a Hub dataset id; a ``FileNotFoundError`` naming
    ``name_or_path`` when it is neither (a missing path that cannot be a Hub id: ``./x``, ``x/``, ``a/b/c``,
    ``train.txt``), instead of the Hub client's error about repo id characters."""
    if name_or_path is None or os.path.exists(os.fspath(name_or_path)):
        return True
    name = os.fspath(name_or_path)
    if not _HUB_ID.match(name) or name.lower().endswith(_FILE_ENDINGS):
        raise FileNotFoundError(f"{what} not found: {name!r} is not a local file or folder, nor a Hub dataset id")
    return False


def limit_samples(splits: dict, limits: dict[str, int | None], seeds: dict[str, int | None] | None = None) -> dict:
    """Keep the first ``limits[split]`` examples of each split (a ``datasets.Dataset`` or a list of rows).

    With ``seeds[split]`` set, keep a random sample of that many instead, kept in the split's order: the first
    ``limit`` of one permutation drawn with that seed, so at one seed a smaller sample is a subset of a larger one
    (nested training sets for a learning curve), e.g. questions spread over every article of a SQuAD split rather
    than the first article's.
    """
    for split, limit in limits.items():
        if limit is not None and split in splits:
            data = splits[split]
            seed = (seeds or {}).get(split)
            if seed is None or limit >= len(data):
                keep = range(min(limit, len(data)))
            else:
                order = list(range(len(data)))
                random.Random(seed).shuffle(order)
                keep = sorted(order[:limit])
            splits[split] = [data[i] for i in keep] if isinstance(data, list) else data.select(keep)
    return splits


__all__ = [
    "SPLITS",
    "split_of_file",
    "find_split_files",
    "resolve_data_file",
    "local_split_files",
    "limit_samples",
    "is_local_data",
]
