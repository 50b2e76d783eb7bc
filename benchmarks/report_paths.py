"""Paths as the benchmark reports record them: relative to the repo root or as ``$OUT/...``, ``$TMPDIR/...``,
``~/...``, never this machine's folders (tests/test_repository_hygiene.py checks the committed results)."""

from __future__ import annotations

import os
import shlex
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def portable_path(path: str) -> str:
    """``path`` as reports record it, without this machine's folders, the first that applies: relative to the repo
    root when inside the checkout; ``$OUT/...`` under the device tool's output folder (``$OUT``); ``$TMPDIR/...``
    under the temp folder; relative to the repo root when beside the checkout (``../shared/data``); ``~/...``
    under the home folder. Anything else (relative paths, option values, other absolute paths) as it is."""
    if not os.path.isabs(path):
        return path
    path = os.path.normpath(path)
    relative = os.path.relpath(path, ROOT)

    def under(folder: str | None) -> bool:
        return bool(folder) and os.path.isabs(folder) and (path + os.sep).startswith(os.path.normpath(folder) + os.sep)

    if not relative.startswith(os.pardir + os.sep) and relative != os.pardir:
        return relative
    for name, folder in (
        ("$OUT", os.environ.get("OUT")),
        ("$TMPDIR", tempfile.gettempdir()),
        ("..", "beside"),
        ("~", os.path.expanduser("~")),
    ):
        if folder == "beside":
            if not relative.startswith(os.path.join(os.pardir, os.pardir)):
                return relative
        elif under(folder):
            return name + path[len(os.path.normpath(folder)) :]
    return path


def command_line(benchmark: str, argv: list[str]) -> str:
    """``python -m benchmarks <benchmark> <argv>`` for a report, shell-quoted, every path in it made portable
    (``portable_path``; its ``$OUT``/``$TMPDIR``/``~`` prefixes stay unquoted so that the line still runs in a
    shell)."""

    def quote(arg: str) -> str:
        option, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        value = portable_path(value)
        for prefix in ("$OUT/", "$TMPDIR/", "~/"):
            if value.startswith(prefix):
                return shlex.quote(option + eq) * bool(eq) + prefix + shlex.quote(value[len(prefix) :])
        return shlex.quote(option + eq + value)

    return " ".join(["python -m benchmarks", benchmark, *(quote(arg) for arg in argv)])


def portable_frame(frame: str) -> str:
    """A profiler stack frame (``/abs/path/file.py(12): fn``) with its file made portable (``portable_path``)."""
    path, paren, rest = frame.partition("(")
    return portable_path(path) + paren + rest if paren and os.path.isabs(path) else frame
