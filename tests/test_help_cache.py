"""The run scripts' ``--help`` cache (keplm.training.help_cache, issue 25): the first ``--help`` of a command stores
the text argparse prints, the next one prints it without importing torch, byte for byte the same.

The end-to-end tests run the scripts in fresh interpreters with a temporary ``$KEPLM_CACHE`` and a fixed
``COLUMNS``; each script is run the slow way once (a module-scoped fixture, ~7 s a script) and the tests share
those runs. The key's parts are unit-tested in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from keplm.training import help_cache

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "run_scripts").glob("*.py"))
COLUMNS = "100"

#: runs a script as ``python <script> ARGS`` does (runpy, ``__main__``), then fails (exit 3) if torch was imported
NO_TORCH_RUNNER = textwrap.dedent("""
    import runpy, sys
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code
    heavy = sorted(m for m in ("torch", "transformers", "datasets", "accelerate") if m in sys.modules)
    if heavy:
        sys.stderr.write(f"imported {heavy}\\n")
        sys.exit(3)
    sys.exit(code)
""")


def environment(cache: Path, **extra: str) -> dict[str, str]:
    """A fresh process's environment: this checkout's keplm first, ``cache`` as keplm's cache, fixed width."""
    env = {key: value for key, value in os.environ.items() if key != help_cache.DISABLE_VARIABLE}
    env.update(KEPLM_CACHE=str(cache), COLUMNS=COLUMNS,
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p), **extra)
    return env


def run(script: str, *args: str, cache: Path, runner: str | None = None, **extra: str):
    """``python run_scripts/<script> ARGS`` (or through ``runner``) from the repository root."""
    command = [sys.executable, *(["-c", runner] if runner else []), f"run_scripts/{script}", *args]
    return subprocess.run(command, cwd=ROOT, env=environment(cache, **extra), capture_output=True, text=True,
                          timeout=300)


def entries(cache: Path) -> set[str]:
    folder = cache / "help"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def expected_key(script: str, argv: list[str], monkeypatch) -> str:
    """The key the script's process computes for ``argv``: same argv[0], width and environment."""
    monkeypatch.setattr(sys, "argv", [f"run_scripts/{script}", *argv])
    monkeypatch.setenv("COLUMNS", COLUMNS)
    return help_cache.help_key(ROOT / "run_scripts" / script, argv)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> dict:
    """Every run script's ``--help`` once (the slow way: it fills the cache), in one shared cache folder."""
    cache = tmp_path_factory.mktemp("help-cache")
    return {"cache": cache, "first": {script: run(script, "--help", cache=cache) for script in SCRIPTS}}


# ============================================================================================ end to end
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_run_script_stores_its_help_and_answers_from_it(filled, script, monkeypatch):
    first = filled["first"][script]
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.startswith(f"usage: {script} ")
    entry = filled["cache"] / "help" / f"{expected_key(script, ['--help'], monkeypatch)}.txt"
    assert entry.read_text(encoding="utf-8") == first.stdout  # the slow path stored under the fast path's key
    again = run(script, "-h", cache=filled["cache"], runner=NO_TORCH_RUNNER)  # -h or --help: the same entry
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout


def test_cached_help_is_byte_identical_to_argparse(filled, tmp_path):
    """The cached text is what argparse prints with the cache off (which neither reads nor writes an entry)."""
    uncached = run("run_ner.py", "--help", cache=tmp_path, **{help_cache.DISABLE_VARIABLE: "1"})
    assert uncached.returncode == 0, uncached.stderr[-2000:]
    assert entries(tmp_path) == set()
    cached = subprocess.run([sys.executable, "run_scripts/run_ner.py", "--help"], cwd=ROOT, capture_output=True,
                            env=environment(filled["cache"]), timeout=300)
    assert cached.returncode == 0
    assert cached.stdout == uncached.stdout.encode()  # bytes, as the terminal gets them
    assert "--num_train_epochs" in uncached.stdout and "--kfm_layers" in uncached.stdout


def test_the_cached_help_imports_no_torch(filled):
    cached = run("run_ner.py", "--help", cache=filled["cache"], runner=NO_TORCH_RUNNER)
    assert cached.returncode == 0, cached.stderr  # 3: torch or transformers was imported
    assert cached.stdout == filled["first"]["run_ner.py"].stdout


def test_another_model_type_has_its_own_entry_and_text(filled, monkeypatch):
    before = entries(filled["cache"])
    roof = run("run_ner.py", "--model_type", "roof_transformer", "--help", cache=filled["cache"])
    assert roof.returncode == 0, roof.stderr[-2000:]
    added = entries(filled["cache"]) - before
    assert added == {f"{expected_key('run_ner.py', ['--model_type', 'roof_transformer', '--help'], monkeypatch)}.txt"}
    default = filled["first"]["run_ner.py"].stdout
    assert roof.stdout != default
    assert "--fusion" in roof.stdout and "--kfm_layers" not in roof.stdout
    again = run("run_ner.py", "--help", "--model_type", "roof_transformer", cache=filled["cache"],
                runner=NO_TORCH_RUNNER)
    assert again.returncode == 0, again.stderr
    assert again.stdout == roof.stdout


def test_help_that_depends_on_a_checkpoint_folder_is_not_stored(filled, tmp_path):
    """Without --model_type the method comes from what --model_name_or_path holds, which the key does not cover."""
    before = entries(filled["cache"])
    shown = run("run_ner.py", "--model_name_or_path", str(tmp_path), "--help", cache=filled["cache"])
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout == filled["first"]["run_ner.py"].stdout  # an empty folder: the default method
    assert entries(filled["cache"]) == before


# ============================================================================================ in-process
@pytest.fixture()
def script(tmp_path) -> Path:
    path = tmp_path / "run_toy.py"
    path.write_text("print('toy')\n")
    return path


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("KEPLM_CACHE", str(folder))
    monkeypatch.delenv(help_cache.DISABLE_VARIABLE, raising=False)
    monkeypatch.setenv("COLUMNS", COLUMNS)
    monkeypatch.setattr(help_cache, "_pending_key", None)
    return folder


def test_the_key_ignores_the_help_flags_but_not_the_other_arguments(script, cache):
    key = help_cache.help_key(script, ["--help"])
    assert help_cache.help_key(script, ["-h"]) == key == help_cache.help_key(script, [])
    assert help_cache.help_key(script, ["--model_type", "roof_transformer", "-h"]) != key
    assert help_cache.help_key(script, ["-h", "--model_type", "roof_transformer"]) == help_cache.help_key(
        script, ["--model_type", "roof_transformer", "--help"])


def test_the_key_changes_with_the_script_width_python_and_packages(script, cache, monkeypatch):
    key = help_cache.help_key(script, ["--help"])
    script.write_text("print('toy 2')\n")
    assert help_cache.help_key(script, ["--help"]) != key
    script.write_text("print('toy')\n")
    assert help_cache.help_key(script, ["--help"]) == key
    monkeypatch.setenv("COLUMNS", "80")
    assert help_cache.help_key(script, ["--help"]) != key
    monkeypatch.setenv("COLUMNS", COLUMNS)
    python = sys.version
    monkeypatch.setattr(sys, "version", python + " (another build)")
    assert help_cache.help_key(script, ["--help"]) != key
    monkeypatch.setattr(sys, "version", python)
    assert help_cache.help_key(script, ["--help"]) == key
    real_version = help_cache.importlib.metadata.version
    for package in help_cache.PACKAGES:
        monkeypatch.setattr(help_cache.importlib.metadata, "version",
                            lambda name, package=package: "0.0.upgraded" if name == package else real_version(name))
        assert help_cache.help_key(script, ["--help"]) != key, package
    monkeypatch.setattr(help_cache, "keplm_sources_digest", lambda: "another keplm")
    assert help_cache.help_key(script, ["--help"]) != key


def test_the_sources_digest_covers_every_python_file_by_path_and_bytes(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("x = 1\n")
    (package / "notes.txt").write_text("not source")
    digest = help_cache.keplm_sources_digest(package)
    (package / "notes.txt").write_text("changed")
    assert help_cache.keplm_sources_digest(package) == digest
    (package / "sub" / "a.py").write_text("x = 2\n")
    assert help_cache.keplm_sources_digest(package) != digest
    (package / "sub" / "a.py").write_text("x = 1\n")
    assert help_cache.keplm_sources_digest(package) == digest
    (package / "sub" / "a.py").rename(package / "sub" / "b.py")
    assert help_cache.keplm_sources_digest(package) != digest
    (package / "sub" / "b.py").rename(package / "sub" / "a.py")
    (package / "sub" / "new.py").write_text("")
    assert help_cache.keplm_sources_digest(package) != digest


def test_keplms_sources_digest_is_quick():
    import time

    start = time.perf_counter()
    help_cache.keplm_sources_digest()
    assert time.perf_counter() - start < 0.1


def test_a_hit_prints_the_entry_and_exits_0_and_a_miss_returns(script, cache, capsys):
    help_cache.exit_with_cached_help(script, ["--output_dir", "x"])  # no help asked: nothing happens
    assert help_cache._pending_key is None
    help_cache.exit_with_cached_help(script, ["--help"])  # a miss: returns, remembers the key
    assert help_cache._pending_key == help_cache.help_key(script, ["--help"])
    help_cache.store_help("usage: run_toy.py [-h]\n\nüñí\n")
    assert help_cache._pending_key is None
    assert [p.name for p in (cache / "help").iterdir()] == [f"{help_cache.help_key(script, [])}.txt"]  # no .tmp
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        help_cache.exit_with_cached_help(script, ["-h"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == "usage: run_toy.py [-h]\n\nüñí\n"


def test_the_cache_switch_and_help_after_double_dash(script, cache, monkeypatch):
    help_cache.exit_with_cached_help(script, ["--help"])
    help_cache.store_help("usage: toy\n")
    monkeypatch.setenv(help_cache.DISABLE_VARIABLE, "1")
    help_cache.exit_with_cached_help(script, ["--help"])  # off: the entry is not read (no SystemExit) ...
    assert help_cache._pending_key is None  # ... and nothing is stored
    monkeypatch.delenv(help_cache.DISABLE_VARIABLE)
    help_cache.exit_with_cached_help(script, ["--", "--help"])  # after --, --help is no flag
    assert help_cache._pending_key is None


def test_a_corrupt_entry_is_a_miss_and_is_replaced(script, cache):
    (cache / "help").mkdir(parents=True)
    entry = cache / "help" / f"{help_cache.help_key(script, [])}.txt"
    entry.write_bytes(b"\xff\xfe not utf-8")
    help_cache.exit_with_cached_help(script, ["--help"])
    help_cache.store_help("usage: toy\n")
    assert entry.read_text(encoding="utf-8") == "usage: toy\n"


def test_an_unwritable_cache_folder_still_prints_the_help(script, tmp_path, monkeypatch, capsys):
    """A cache folder that cannot be made (its parent is a file; root ignores permission bits): parse_args prints
    argparse's help and exits 0, nothing is written."""
    from keplm.training.arguments import ModelArguments, parse_args

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KEPLM_CACHE", str(blocker / "cache"))
    monkeypatch.delenv(help_cache.DISABLE_VARIABLE, raising=False)
    help_cache.exit_with_cached_help(script, ["--help"])
    assert help_cache._pending_key is not None
    with pytest.raises(SystemExit) as stop:
        parse_args((ModelArguments,), ["--help"])
    assert stop.value.code == 0
    assert "--model_name_or_path" in capsys.readouterr().out
    assert help_cache._pending_key is None and blocker.read_text() == ""


def test_parse_args_stores_nothing_without_a_cache_miss_first(cache, capsys):
    """In-process callers (tests, notebooks: ``main(["--help"])``) print argparse's help and write no entry."""
    from keplm.training.arguments import ModelArguments, parse_args

    with pytest.raises(SystemExit):
        parse_args((ModelArguments,), ["--help"])
    assert "--model_name_or_path" in capsys.readouterr().out
    assert not cache.exists()


def test_old_entries_are_pruned(script, cache, monkeypatch):
    monkeypatch.setattr(help_cache, "MAX_ENTRIES", 3)
    folder = cache / "help"
    folder.mkdir(parents=True)
    for i in range(4):
        (folder / f"old{i}.txt").write_text("x")
        os.utime(folder / f"old{i}.txt", (1000 + i, 1000 + i))
    help_cache.exit_with_cached_help(script, ["--help"])
    help_cache.store_help("usage: toy\n")
    assert entries(cache) == {"old2.txt", "old3.txt", f"{help_cache.help_key(script, [])}.txt"}


def test_a_failed_write_leaves_no_partial_file(script, cache, monkeypatch):
    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(help_cache.os, "replace", full_disk)
    help_cache.exit_with_cached_help(script, ["--help"])
    help_cache.store_help("usage: toy\n")  # no error: the help was printed all the same
    assert list((cache / "help").iterdir()) == []


def test_a_closed_stdout_is_no_error(script, cache, monkeypatch):
    """``run_ner.py --help | head -1``: the reader is gone; like argparse, the cached help still exits 0."""
    help_cache.exit_with_cached_help(script, ["--help"])
    help_cache.store_help("usage: toy\n")

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(SystemExit) as stop:
        help_cache.exit_with_cached_help(script, ["--help"])
    assert stop.value.code == 0
