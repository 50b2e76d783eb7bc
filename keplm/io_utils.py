"""Reading text, JSON and JSON-lines files (plain or .gz) with errors that name the file (and line), progress bars
for long reads, and the one content-derived cache fingerprint of ``datasets.map`` calls."""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import logging
import os
import shutil
import uuid
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import datasets
from datasets.utils.logging import is_progress_bar_enabled
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


def open_text(path, mode: str = "rt"):
    """Open a UTF-8 text file, gzip-compressed when the name ends with ``.gz`` (a leading byte-order mark is dropped
    when reading); FileNotFoundError when reading a missing file; reading bytes that are not UTF-8 is a ValueError
    naming the file and the line."""
    path = os.fspath(path)
    if "r" in mode and not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    # reading: "utf-8-sig" drops a byte-order mark at the start (a BOM would otherwise become part of the first
    # field, e.g. a second entity "\ufeffQ90"); without one it reads as "utf-8"
    encoding = "utf-8-sig" if "r" in mode else "utf-8"
    handle = (gzip.open if path.endswith(".gz") else open)(path, mode, encoding=encoding)
    return _NamedDecodeErrors(handle, path) if "r" in mode else handle


def first_non_utf8_line(path) -> int | None:
    """The 1-based number of the first line of a (possibly gzipped) file that is not valid UTF-8; None if all are."""
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return lineno
    return None


class _NamedDecodeErrors(AbstractContextManager):
    """A text file whose UnicodeDecodeError (raised by the decoder a chunk ahead of the line being read) becomes a
    ValueError naming the file and the first line that is not UTF-8."""

    def __init__(self, handle, path: str):
        self._handle, self._path = handle, path

    def _named(self, error: UnicodeDecodeError) -> ValueError:
        """The error naming the file's first line that is not UTF-8 (1-based)."""
        line = first_non_utf8_line(self._path)
        return ValueError(
            f"{self._path}:{line if line is not None else '?'}: not UTF-8 text ({error.reason}); "
            "re-encode the file as UTF-8"
        )

    def __iter__(self):
        try:
            yield from self._handle
        except UnicodeDecodeError as error:
            raise self._named(error) from None

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def __getattr__(self, name):
        """The file's own attributes, its ``read``, ``readline`` and ``readlines`` raising the named error."""
        attribute = getattr(self._handle, name)
        if name not in ("read", "readline", "readlines"):
            return attribute

        def read(*args):
            try:
                return attribute(*args)
            except UnicodeDecodeError as error:
                raise self._named(error) from None

        return read


def find_file(directory, name: str, required: bool = True) -> str | None:
    """``directory/name`` or its gzipped twin (``name`` given with or without ``.gz``); a FileNotFoundError naming
    both when ``required`` and neither exists, else None."""
    base = name.removesuffix(".gz")
    for candidate in (base, f"{base}.gz"):
        path = os.path.join(directory, candidate)
        if os.path.isfile(path):
            return path
    if required:
        raise FileNotFoundError(f"{directory}: no {base} (or {base}.gz)")
    return None


def read_json(path):
    """Parse a whole JSON file; ValueError with line and column on bad JSON."""
    with open_text(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None


@contextmanager
def named_json_errors(where):
    """Turn a bare ``json.JSONDecodeError`` raised inside the block (by a library reading JSON files, e.g.
    ``AutoTokenizer.from_pretrained`` on a truncated ``tokenizer.json``) into a ValueError naming ``where``."""
    try:
        yield
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{where}: invalid JSON in one of its files at line {e.lineno}, column {e.colno}: "
            f"{e.msg} (a truncated or hand-edited file?)"
        ) from e


def iter_jsonl(path):
    """Yield ``(path, line number, object)`` for every non-empty line; ValueError on bad JSON or non-objects."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object")
            yield path, lineno, obj


def progress(iterable, desc: str, total: int | None = None, unit: str = "it"):
    """``iterable`` behind a tqdm progress bar that shows only after 2 s (quick steps stay silent) and follows the
    ``datasets`` switch for progress bars (``datasets.disable_progress_bars()``)."""
    return tqdm(iterable, desc=desc, total=total, unit=unit, delay=2, disable=not is_progress_bar_enabled())


def content_fingerprint(dataset, **signature) -> str:
    """A ``datasets`` cache fingerprint from the input data's fingerprint and everything else that determines a
    ``map``'s output (``signature``: hashes of vocabularies, KG, tokenizer, arguments). Hashing the map function
    itself with ``dill`` (what ``datasets`` does by default) would hash a whole KG on every call."""
    payload = json.dumps({"data": dataset._fingerprint, **signature}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def fingerprinted_map(
    dataset, function, signature: dict, num_proc: int | None = None, overwrite_cache: bool = False, **map_kwargs
):
    """``dataset.map(function, batched=True)`` cached under :func:`content_fingerprint` of ``signature``.

    ``datasets`` caches a map only next to the input's own cache files; an in-memory input (``Dataset.from_dict``,
    e.g. the pre-training corpus, whose fingerprint is a hash of its content) would be mapped again by every run,
    so its result goes to ``<HF_DATASETS_CACHE>/keplm/<fingerprint>.arrow``."""
    fingerprint = content_fingerprint(dataset, **signature)
    if not dataset.cache_files and datasets.is_caching_enabled() and "cache_file_name" not in map_kwargs:
        directory = os.path.join(datasets.config.HF_DATASETS_CACHE, "keplm")
        os.makedirs(directory, exist_ok=True)
        map_kwargs["cache_file_name"] = os.path.join(directory, f"{fingerprint}.arrow")
    return dataset.map(
        function,
        batched=True,
        num_proc=num_proc if num_proc and num_proc > 1 else None,
        load_from_cache_file=not overwrite_cache,
        new_fingerprint=fingerprint,
        **map_kwargs,
    )


#: the hidden siblings these writers make beside a target: a folder or file being written, an earlier folder renamed
#: aside for deletion; a killed process leaves them behind, and the next write of the same target removes them
SCRATCH_KINDS = ("partial", "saving", "old")


def _scratch_name(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name}.{kind}-{uuid.uuid4().hex[:8]}"


def remove_scratch(target, inside: bool = False) -> list[str]:
    """Delete what killed writes of ``target`` left beside it (``.<name>.partial-*``, ``.saving-*``, ``.old-*``),
    with ``inside`` also what writes of any entry of the folder ``target`` left in it (a saved model's
    ``.knowledge.old-*``), and return their names. Two writers of one target at once are not supported, so none of
    them is in use."""
    target = Path(target)
    patterns = [(target.parent, f".{glob.escape(target.name)}.{kind}-*") for kind in SCRATCH_KINDS]
    if inside:
        patterns += [(target, f".*.{kind}-*") for kind in SCRATCH_KINDS]
    removed = []
    for folder, pattern in patterns:
        for leftover in folder.glob(pattern):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
            removed.append(leftover.name)
    if removed:
        logger.info("removed what an interrupted write of %s left beside it: %s", target, sorted(removed))
    return removed


def check_output_folder(target, owner_file: str, writer: str) -> None:
    """The ValueError :func:`replaced_folder` gives for an output folder it would not replace (a file; a folder
    holding files but no ``owner_file``), for a command to give before its long work rather than after it."""
    target = Path(target)
    if target.exists():
        if not target.is_dir():
            raise ValueError(f"output_dir {target} is a file, not a folder")
        found = sorted(p.name for p in target.iterdir())
        if found and not (target / owner_file).is_file():
            raise ValueError(
                f"output_dir {target} holds files that are not an earlier {writer} output (no {owner_file}; "
                f"found {found[:5]}): it would be replaced whole; use a new or empty folder"
            )


@contextmanager
def replaced_folder(target, owner_file: str, writer: str):
    """Write a command's output folder whole or not at all: yields a new folder beside ``target`` (a hidden
    ``.<name>.partial-*``); when the block ends normally it takes ``target``'s place (an earlier output there is
    removed), and when it raises (an error, Ctrl-C) it is deleted and ``target`` is left as it was. An interrupted run
    thus never mixes new files with an earlier run's. ``target`` must be absent, empty, or an earlier output of the same
    writer (it holds ``owner_file``): a folder holding other files is refused, naming them, not replaced."""
    target = Path(target)
    check_output_folder(target, owner_file, writer)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_scratch(target)
    partial = _scratch_name(target, "partial")
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _swap_in(partial, target)


def _swap_in(new: Path, target: Path) -> None:
    """Put the folder ``new`` at ``target``'s place: an earlier ``target`` is renamed aside first and deleted after, so
    ``target`` is at every moment the earlier folder, absent, or the new one."""
    old = _scratch_name(target, "old")
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def committed_save(target, marker: str, replaces: tuple[str, ...] = ()):
    """Save files into ``target`` so that an interrupted save leaves the earlier save or a folder without ``marker``
    (which loaders refuse), never a mix: yields an empty staging folder beside ``target``; when the block ends
    normally, ``target``'s ``marker`` is removed first, then its files matching a ``replaces`` pattern that the new
    save lacks (an earlier save's weight shards), then the new files and folders move in (a folder replaces its
    namesake whole), ``marker`` last. Files of ``target`` the save does not write (a processor's, a run's results)
    stay. On an error or Ctrl-C inside the block the staging folder is deleted and ``target`` is untouched."""
    target = Path(target).resolve()
    target.mkdir(parents=True, exist_ok=True)
    remove_scratch(target, inside=True)  # inside: a subfolder (knowledge/) killed in the middle of its swap
    staging = _scratch_name(target, "saving")
    staging.mkdir()
    try:
        yield staging
        if not (staging / marker).is_file():
            raise ValueError(f"the save into {target} wrote no {marker}: nothing was moved into the folder")
        (target / marker).unlink(missing_ok=True)  # from here until the end the folder is no loadable save
        for pattern in replaces:
            for old in target.glob(pattern):
                if old.is_file() and not (staging / old.name).exists():
                    old.unlink()
        for entry in sorted(staging.iterdir()):
            if entry.is_dir():
                _swap_in(entry, target / entry.name)
            elif entry.name != marker:
                os.replace(entry, target / entry.name)
        os.replace(staging / marker, target / marker)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_json_whole(path, data, **dump_kwargs) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all: into a temporary file beside it, then renamed over it,
    so an interrupted write (a kill, Ctrl-C, a full disk) leaves the earlier file, never a truncated one."""
    path = Path(path)
    remove_scratch(path)
    partial = _scratch_name(path, "partial")
    try:
        partial.write_text(json.dumps(data, **dump_kwargs), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
