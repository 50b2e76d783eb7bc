"""The run scripts' ``--help``, cached per command so that a repeated ``--help`` answers without importing torch.

A run script's help lists ``transformers.TrainingArguments``, and importing transformers' training stack (torch,
accelerate, peft) takes 5-10 s. Each script calls :func:`exit_with_cached_help` before those imports: when the
command asks for help and an entry exists for it, the stored text is printed and the script exits (well under 2 s);
otherwise the call only remembers the command's key, and :func:`keplm.training.arguments.parse_args` stores the
text argparse prints for it (:func:`store_help`).

The key is a sha256 of everything the text depends on: the script's path and bytes, the arguments with the help
flags left out (``--model_type roof_transformer --help`` shows another method's options), the width argparse wraps
at, the Python version, the installed versions of transformers, accelerate, torch, peft and datasets, and keplm's
own sources. So the first ``--help`` of a command after an install or an upgrade still pays the import.

Entries are plain ``.txt`` files under ``$KEPLM_CACHE/help`` (:func:`keplm.file_utils.cache_root`);
``KEPLM_NO_HELP_CACHE=1`` turns the cache off. A folder that cannot be read or written never fails a run: the help
is then printed as argparse prints it (the reason goes to this module's debug log).

This module imports the standard library only (and torch-free ``keplm.file_utils``): it runs before the imports
it saves.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from keplm.file_utils import cache_root

logger = logging.getLogger(__name__)

#: the flags argparse answers with the help text
HELP_FLAGS = ("-h", "--help")
#: the installed distributions whose code the help text comes from (TrainingArguments' fields and their defaults)
PACKAGES = ("transformers", "accelerate", "torch", "peft", "datasets")
#: set to 1 (or true / yes) to neither read nor write cached help
DISABLE_VARIABLE = "KEPLM_NO_HELP_CACHE"
#: environment variables argparse's text depends on: gettext's language (its headings)
LANGUAGE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
#: and, from Python 3.14 (argparse colours help on a terminal), the variables that switch colour on or off
COLOUR_VARIABLES = ("NO_COLOR", "FORCE_COLOR", "PYTHON_COLORS", "TERM")
#: entries kept in the folder; storing one more removes the oldest (each entry is a few dozen kB)
MAX_ENTRIES = 200
#: part of every key: bump it when the key's parts or the entries' layout change
KEY_VERSION = "1"

#: the key of this process's command, set by exit_with_cached_help when the cache had no entry for it: the text
#: parse_args prints for the command is stored under it (None: nothing to store)
_pending_key: str | None = None


def cache_directory() -> Path:
    """Where cached help lives: ``<keplm's cache root>/help``."""
    return cache_root() / "help"


def enabled() -> bool:
    """False when ``KEPLM_NO_HELP_CACHE`` is set to 1, true or yes."""
    return os.environ.get(DISABLE_VARIABLE, "").strip().lower() not in ("1", "true", "yes")


def asks_for_help(argv: list[str]) -> bool:
    """Whether argparse would read ``-h`` / ``--help`` in ``argv`` as the help flag (not after ``--``)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in HELP_FLAGS:
            return True
    return False


def keplm_sources_digest(package: str | os.PathLike | None = None) -> str:
    """sha256 of every ``.py`` file of ``package`` (default: the imported keplm package's folder): relative path
    and bytes, in path order."""
    package = Path(__file__).resolve().parents[1] if package is None else Path(package)
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    """``{distribution: version}`` of :data:`PACKAGES` (``absent`` for one not installed)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def help_key(script_file: str | os.PathLike, argv: list[str]) -> str:
    """The cache key (sha256 hex) of the help ``script_file`` prints for ``argv`` (the arguments after the script;
    the help flags in them do not count)."""
    script = Path(script_file).resolve()
    parts = {
        "key_version": KEY_VERSION,
        "script": str(script),
        "prog": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else script.name,  # argparse's usage line
        "script_bytes": hashlib.sha256(script.read_bytes()).hexdigest(),
        "argv": [arg for arg in argv if arg not in HELP_FLAGS],
        "columns": shutil.get_terminal_size().columns,  # argparse's HelpFormatter wraps at this width (minus 2)
        "python": sys.version,
        "environment": {name: os.environ.get(name) for name in LANGUAGE_VARIABLES},
        "packages": package_versions(),
        "keplm": keplm_sources_digest(),
    }
    if sys.version_info >= (3, 14):
        parts["colour"] = (_isatty(sys.stdout), {name: os.environ.get(name) for name in COLOUR_VARIABLES})
    return hashlib.sha256(repr(sorted(parts.items())).encode()).hexdigest()


def exit_with_cached_help(script_file: str | os.PathLike, argv: list[str] | None = None) -> None:
    """Print the cached help of this command and exit 0, when ``argv`` (default: the command line) asks for help
    and the cache has its text; else return (remembering the key, under which parse_args stores the text)."""
    global _pending_key
    argv = sys.argv[1:] if argv is None else list(argv)
    _pending_key = None
    if not asks_for_help(argv) or not enabled():
        return
    try:
        key = help_key(script_file, argv)
    except OSError as error:  # an unreadable script or keplm file: answer the slow way
        logger.debug("help cache off for this command: %s", error)
        return
    path = cache_directory() / f"{key}.txt"
    try:
        with open(path, encoding="utf-8", newline="") as f:  # newline="": the text exactly as stored
            text = f.read()
    except FileNotFoundError:
        _pending_key = key
        return
    except (OSError, UnicodeDecodeError) as error:
        logger.debug("cached help %s unreadable (%s): the help is built again", path, error)
        _pending_key = key
        return
    # as argparse's print_help and exit: the text on stdout (a closed pipe, e.g. `| head`, is no error), status 0
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (AttributeError, OSError):
        pass
    sys.exit(0)


def store_help(text: str) -> None:
    """Store ``text`` as the help of this process's command (after a cache miss in :func:`exit_with_cached_help`;
    otherwise nothing happens). Written atomically (a temporary file renamed into place); a folder that cannot be
    written is skipped, with a debug log."""
    global _pending_key
    key, _pending_key = _pending_key, None
    if key is None:
        return
    folder, partial = cache_directory(), None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".tmp")
        with open(descriptor, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(partial, folder / f"{key}.txt")
    except OSError as error:
        if partial is not None:  # a full disk, say: no half-written file stays behind
            with contextlib.suppress(OSError):
                os.unlink(partial)
        logger.debug("help not cached in %s: %s", folder, error)
        return
    try:
        _prune(folder)
    except OSError as error:  # e.g. another process pruned the same entry first
        logger.debug("help cache %s not pruned: %s", folder, error)


def not_cacheable(reason: str) -> None:
    """This command's help depends on more than the key covers (e.g. what a checkpoint folder holds): its text is
    not stored."""
    global _pending_key
    if _pending_key is not None:
        logger.debug("help not cached: %s", reason)
    _pending_key = None


def _prune(folder: Path) -> None:
    """Remove the oldest entries beyond :data:`MAX_ENTRIES` (entries of older installs are never read again)."""
    entries = list(folder.glob("*.txt"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for path in entries[: len(entries) - MAX_ENTRIES]:
        path.unlink(missing_ok=True)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stdout
        return False


__all__ = [
    "HELP_FLAGS",
    "asks_for_help",
    "cache_directory",
    "exit_with_cached_help",
    "help_key",
    "not_cacheable",
    "store_help",
]
