"""keplm's entries in transformers' Auto classes and pipeline registry, filled on first use (a light import).

``import keplm`` imports neither torch nor transformers' model code (issue 25, "fast start"): it calls
:func:`install`, which watches the transformers modules that hold the registries keplm fills (the Auto-config,
Auto-model and Auto-processor mappings, the pipeline registry). When such a module is imported (or already was), its
registries are wrapped so that their first read imports keplm's methods (each method's modeling file registers itself
through ``keplm.registration.register_method``) and keplm's pipelines, then the plain registries are put back.
``AutoModel.from_pretrained("org/kala-...")`` after ``import keplm`` therefore works as with eager registration, and
``keplm --help`` starts without torch.

A read made while transformers, peft or keplm modules are still being imported is answered without filling (importing
keplm's models then would import half-built modules); the next read fills.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading

#: the transformers modules holding registries keplm fills -> how to find those registries: ``(object, attribute)``
#: pairs whose attribute is the dict keplm's registration writes to
WATCHED_MODULES = (
    "transformers.models.auto.configuration_auto",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.processing_auto",
    "transformers.pipelines",
)
#: modules being imported under these prefixes defer filling (see the module docstring)
IMPORTING_PREFIXES = ("transformers", "keplm", "peft")

_lock = threading.RLock()
_filling = False
#: (owner, attribute, the original dict) of every registry wrapped and not yet filled
_wrapped: list[tuple[object, str, dict]] = []


def _registries(module_name: str, module) -> list[tuple[object, str]]:
    """The ``(owner, attribute)`` registry dicts of one watched module."""
    if module_name.endswith("configuration_auto"):
        return [(module.CONFIG_MAPPING, "_extra_content")]
    if module_name.endswith("processing_auto"):
        return [(module.PROCESSOR_MAPPING, "_extra_content")]
    if module_name.endswith("modeling_auto"):
        from transformers.models.auto.auto_factory import _LazyAutoMapping

        return [(value, "_extra_content") for value in vars(module).values() if isinstance(value, _LazyAutoMapping)]
    return [(module.PIPELINE_REGISTRY, "supported_tasks")]


class _FillsOnRead(dict):
    """Stands in for a registry dict: every read fills keplm's entries first; reads and writes go to the original."""

    __slots__ = ("_original",)

    def __init__(self, original: dict):
        super().__init__()
        self._original = original

    def __setitem__(self, key, value):
        self._original[key] = value

    def __delitem__(self, key):
        del self._original[key]

    def __contains__(self, key):
        fill()
        return key in self._original

    def __getitem__(self, key):
        fill()
        return self._original[key]

    def get(self, key, default=None):
        fill()
        return self._original.get(key, default)

    def keys(self):
        fill()
        return self._original.keys()

    def values(self):
        fill()
        return self._original.values()

    def items(self):
        fill()
        return self._original.items()

    def __iter__(self):
        fill()
        return iter(self._original)

    def __len__(self):
        fill()
        return len(self._original)

    def __repr__(self):
        return repr(self._original)


def _watch(module_name: str, module) -> None:
    """Wrap the registries of a watched module that has just been imported."""
    with _lock:
        for owner, attribute in _registries(module_name, module):
            original = getattr(owner, attribute)
            if not isinstance(original, _FillsOnRead):
                setattr(owner, attribute, _FillsOnRead(original))
                _wrapped.append((owner, attribute, original))


def _importing() -> bool:
    """Whether a transformers, peft or keplm module is being imported right now (its code still running)."""
    for name, module in list(sys.modules.items()):
        if name.startswith(IMPORTING_PREFIXES) and getattr(getattr(module, "__spec__", None), "_initializing", False):
            return True
    return False


def load_methods() -> None:
    """Import keplm's own methods: each modeling file registers its config, models, processor and run recipe."""
    importlib.import_module("keplm.modeling")


def fill() -> None:
    """Fill keplm's entries into every wrapped registry and put the plain registries back (a no-op once done, while
    filling, and while transformers / peft / keplm modules are being imported)."""
    global _filling
    if not _wrapped or _filling:
        return
    with _lock:
        if not _wrapped or _filling or _importing():
            return
        _filling = True
        try:
            load_methods()
            from keplm.registration import register_processors

            register_processors()  # the processors of methods registered before AutoProcessor was imported
            if "transformers.pipelines" in sys.modules:
                from keplm.pipelines import register_pipelines

                register_pipelines()
            while _wrapped:
                owner, attribute, original = _wrapped.pop()
                setattr(owner, attribute, original)
        finally:
            _filling = False


class _WatchingFinder(importlib.abc.MetaPathFinder):
    """Finds a watched module through the other finders and wraps its registries once its code has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in WATCHED_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_watch(module):
            exec_module(module)
            _watch(fullname, module)

        spec.loader.exec_module = exec_and_watch  # this spec's own loader instance
        return spec


def install() -> None:
    """Watch the registries' modules: wrap those already imported, and the others when they are (``import keplm``)."""
    with _lock:
        if not any(isinstance(finder, _WatchingFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _WatchingFinder())
        for name in WATCHED_MODULES:
            module = sys.modules.get(name)
            if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
                _watch(name, module)


__all__ = ["WATCHED_MODULES", "fill", "install", "load_methods"]
