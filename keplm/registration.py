"""One call registers a method with transformers' Auto classes, made by the method's own modeling file."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import entry_points

from transformers import AutoConfig, AutoProcessor

logger = logging.getLogger(__name__)

#: the entry-point group through which an installed package adds a method (its value: the module whose import makes
#: the package's ``register_method`` call), e.g. in its setup.cfg ``[options.entry_points] keplm.methods =
#: my_method = my_package.modeling_my_method``
PLUGIN_GROUP = "keplm.methods"

#: model type -> (config class, {Auto class name: model class}, processor class) of every registered method
REGISTERED_METHODS: dict[str, tuple[type, dict[str, type], type | None]] = {}
#: model type -> the method's run recipe for the task scripts (``keplm.training.run_recipe.RunRecipe``): a class, or
#: ``"package.module:Class"``, imported when a script first asks for it
RUN_RECIPES: dict[str, type | str] = {}


def register_method(
    config_class: type, models: Mapping[type, type], processor: type | None = None, run_recipe: type | str | None = None
) -> None:
    """Register a method: its config under its ``model_type`` (its model-card words, ``config_class.method_card``,
    come with it), each model class under its Auto class (``{AutoModelForTokenClassification:
    KalaForTokenClassification}``), its processor with ``AutoProcessor`` and its run recipe (its options and steps in
    ``run_ner.py`` / ``run_qa.py`` / ``run_glue.py``, ``--model_type <model_type>``). Idempotent; a ValueError when a
    model class was built for another config."""
    model_type = getattr(config_class, "model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"{config_class.__name__} has no model_type to register under")
    for model_class in models.values():
        if getattr(model_class, "config_class", None) is not config_class:
            raise ValueError(
                f"{model_class.__name__}.config_class is {getattr(model_class, 'config_class', None)}, "
                f"not {config_class.__name__}: it cannot be registered for {model_type!r}"
            )
    AutoConfig.register(model_type, config_class, exist_ok=True)
    for auto_class, model_class in models.items():
        auto_class.register(config_class, model_class, exist_ok=True)
    if processor:
        AutoProcessor.register(config_class, processor, exist_ok=True)
    REGISTERED_METHODS[model_type] = (config_class, {a.__name__: m for a, m in models.items()}, processor)
    if run_recipe:
        RUN_RECIPES[model_type] = run_recipe


def auto_class_name(model_class: type, model_type: str | None) -> str | None:
    """The name of the Auto class ``model_class`` is registered under for ``model_type`` (a task's Auto class before
    ``AutoModel``), or None when it is not registered."""
    models = REGISTERED_METHODS[model_type][1] if model_type in REGISTERED_METHODS else {}
    names = [name for name, registered in models.items() if registered is model_class]
    return min(names, key=lambda name: name == "AutoModel", default=None)  # the first that is not AutoModel


def registered_model_class(name: str) -> type | None:
    """The model class of a registered method (keplm's own or a plug-in's) called ``name``, or None."""
    for _, models, _ in REGISTERED_METHODS.values():
        for model_class in models.values():
            if model_class.__name__ == name:
                return model_class
    return None


def load_plugins() -> dict[str, str]:
    """Import every installed plug-in method (the ``keplm.methods`` entry points; ``import keplm`` calls this): each
    import registers its method. A plug-in that fails to import is logged with its name and error, and keplm's own
    methods stay usable. Returns {entry-point name: "loaded" or the error}."""
    outcome = {}
    for point in entry_points(group=PLUGIN_GROUP):
        try:
            point.load()
            outcome[point.name] = "loaded"
        except Exception as error:  # a broken plug-in must not stop keplm's own methods
            outcome[point.name] = f"{type(error).__name__}: {error}"
            logger.error(
                "keplm plug-in %r (%s, entry point group %s) failed to load: %s",
                point.name,
                point.value,
                PLUGIN_GROUP,
                outcome[point.name],
            )
    return outcome


__all__ = [
    "REGISTERED_METHODS",
    "RUN_RECIPES",
    "PLUGIN_GROUP",
    "register_method",
    "auto_class_name",
    "registered_model_class",
    "load_plugins",
]
