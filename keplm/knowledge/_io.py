"""Reading text and JSON-lines files (plain or .gz) with errors that name the file and line."""

from __future__ import annotations

import gzip
import json
import os


def open_text(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


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
