"""transformers' own common tests (``ModelTesterMixin``, ``ConfigTester``) for keplm's models, taken from the source
distribution of the installed transformers version (the wheel does not ship them; nothing of them is copied into this
repository).

:func:`common_tests` downloads ``transformers-<version>.tar.gz`` once with ``pip download`` (the package index CI and
this machine reach), extracts ``tests/test_modeling_common.py`` and ``tests/test_configuration_common.py`` into a
cache folder (``$KEPLM_TRANSFORMERS_TESTS`` or ``~/.cache/keplm/transformers-tests/<version>``) as the package
``transformers_common_tests`` and imports it. The two files import three siblings the source distribution does not
ship; the package holds stand-ins for them, so what they would add does not run (listed in ``STAND_INS``). When the
source distribution cannot be had, the callers skip with the reason (never pass silently).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers

PACKAGE = "transformers_common_tests"
FILES = ("test_modeling_common.py", "test_configuration_common.py")
#: siblings the two files import that the source distribution lacks, and what stands in for them
STAND_INS = {
    "exporters/test_export.py": (
        "class ExportTesterMixin:  # keplm stand-in: the sdist has no tests/exporters (export tests not run)\n"
        "    pass\n"
    ),
    "generation/test_utils.py": (
        "class GenerationTesterMixin:  # keplm stand-in: the sdist has no tests/generation (generate tests not run)\n"
        "    pass\n"
    ),
    # ConfigTester.check_config_arguments_init iterates this dict: None makes it fail loudly instead of checking
    # nothing, and keplm's config tests leave that one method out by name
    "utils/test_configuration_utils.py": "config_common_kwargs = None  # keplm stand-in: not in the sdist\n",
}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "keplm" / "transformers-tests" / transformers.__version__
    return Path(os.environ.get("KEPLM_TRANSFORMERS_TESTS", default))


def _complete(package: Path) -> bool:
    return all((package / name).is_file() for name in FILES) and (package / "__init__.py").is_file()


def _fetch(target: Path) -> None:
    """Download the sdist with pip and extract the two files and the stand-ins into ``target/PACKAGE``, built beside
    it and renamed into place, so that test processes fetching at once (pytest-xdist workers) never import a
    half-written package: the first rename wins, the others drop their copy."""
    version = transformers.__version__
    package = target / f".{PACKAGE}.partial-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", f"transformers=={version}", "--no-binary", ":all:"]
        command += ["--no-deps", "--no-build-isolation", "-q", "-d", tmp]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        archives = list(Path(tmp).glob("transformers-*.tar.gz"))
        if not archives:
            raise RuntimeError(f"pip download of transformers=={version}'s sdist failed: {done.stderr.strip()[-400:]}")
        shutil.rmtree(package, ignore_errors=True)
        package.mkdir(parents=True)
        with tarfile.open(archives[0]) as archive:
            for name in FILES:
                member = archive.getmember(f"transformers-{version}/tests/{name}")
                (package / name).write_bytes(archive.extractfile(member).read())
    for relative, text in STAND_INS.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    (package / "__init__.py").write_text(f"# transformers {version}'s common tests, from its sdist\n", encoding="utf-8")
    final = target / PACKAGE
    if final.is_dir() and not _complete(final):
        shutil.rmtree(final, ignore_errors=True)  # left half-written by an interrupted fetch
    try:
        package.rename(final)
    except OSError:  # another process renamed its copy first
        shutil.rmtree(package, ignore_errors=True)
        if not _complete(final):
            raise


def common_tests():
    """``(ModelTesterMixin, ConfigTester)`` of the installed transformers; RuntimeError naming why not."""
    target = cache_dir()
    if not _complete(target / PACKAGE):
        _fetch(target)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    modeling = importlib.import_module(f"{PACKAGE}.test_modeling_common")
    configuration = importlib.import_module(f"{PACKAGE}.test_configuration_common")
    return modeling.ModelTesterMixin, configuration.ConfigTester
