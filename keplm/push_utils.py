"""Pushing a saved keplm folder to the Hub in one commit, a LoRA adapter in two (shared by models, processors, LoRA
adapters and the Trainer; below every layer that pushes, like :mod:`keplm.file_utils`).

transformers' ``push_to_hub`` uploads the files a save changed one folder deep, so a model with its nested
``knowledge/kg/`` folder cannot be pushed that way; keplm saves into a temporary folder and uploads the whole folder
with ``HfApi.upload_folder`` (large files through the LFS path, as the Hub decides). Nothing pickled is uploaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from huggingface_hub import HfApi, RepoFile, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from keplm.io_utils import read_json

logger = logging.getLogger(__name__)

#: file patterns that are Python pickles (``torch.save``, ``pickle``): never uploaded by keplm
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")
#: a model's weight files in any sharding (and its generation config): what a new save or push of the model replaces
WEIGHT_FILES = ("generation_config.json", "model.safetensors", "model-*.safetensors", "model.safetensors.index.json")
#: the files a model push owns (weights in any sharding, config, knowledge assets, adapter files; each pattern
#: anchored at the repo root, so a checkpoint folder pushed beside them, e.g. last-checkpoint/, stays): a model push
#: deletes those of an earlier push that its own save lacks, in the same commit, so the repo serves the last push
#: (a sharded push after an unsharded one would otherwise leave the old model.safetensors, which loading prefers); the
#: card and its figures stay unless the push writes new ones (a re-push of the same files keeps the card)
MODEL_FILES = (
    "config.json",
    *WEIGHT_FILES,
    "adapter_model.safetensors",
    "adapter_config.json",
    "keplm_adapter.json",
    "knowledge/**",
)
#: the files a processor push owns (tokenizer in any form, processor config, knowledge assets)
PROCESSOR_FILES = (
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "knowledge/**",
)


#: what loading a saved model needs, and its card: what a training run's push uploads from its output folder (the
#: checkpoints' optimizer / scheduler / RNG states and the run's result files stay local unless the user asks for
#: checkpoints on the Hub, ``hub_strategy``)
LOADING_PATTERNS = (*MODEL_FILES, *PROCESSOR_FILES, "*.model", "README.md", "figures/**")


ADAPTER_CONFIG = "adapter_config.json"


def adapter_base_to_pin(folder: str | os.PathLike, repo_id: str) -> dict | None:
    """``adapter_config.json`` of ``folder`` when it names ``repo_id`` itself as the adapter's base model (a keplm
    adapter saved for that repo, whose base files, config.json, keplm_adapter.json and knowledge/, live beside it):
    the config :func:`pin_adapter_base` pins after the push. None for anything else."""
    path = Path(folder, ADAPTER_CONFIG)
    if not path.is_file():
        return None
    recorded = read_json(path)
    return recorded if recorded.get("base_model_name_or_path") == repo_id else None


def pin_adapter_base(repo_id: str, adapter_config: dict | None, commit, token=None, revision: str | None = None):
    """The second commit of an adapter push: ``adapter_config.json`` with peft's ``revision`` set to ``commit`` (the
    push that uploaded the adapter with its base files; a ``CommitInfo`` or its ``Future``), so that peft's
    ``AutoPeftModel*.from_pretrained(repo, revision=R)``, which loads the base at the revision the adapter config
    names, takes the base files of the same push as the adapter, not those of main. Returns that commit's
    ``CommitInfo`` (``commit`` itself, or its ``Future``'s result, when there is nothing to pin)."""
    commit = commit.result() if hasattr(commit, "result") else commit  # a push run as a future
    if adapter_config is None:
        return commit
    return HfApi().upload_file(
        path_or_fileobj=json.dumps({**adapter_config, "revision": commit.oid}, indent=2, sort_keys=True).encode(),
        path_in_repo=ADAPTER_CONFIG,
        repo_id=repo_id,
        revision=commit.pr_revision or revision,  # a push opened as a pull request: pin on its branch
        commit_message=f"Pin the adapter's base files to {commit.oid[:12]}",
        token=token,
    )


def pin_after(commit, folder, repo_id: str, token=None, revision: str | None = None, blocking: bool = True):
    """:func:`pin_adapter_base` after the push ``commit`` (a ``CommitInfo`` or its ``Future``) of ``folder``, when the
    folder holds an adapter for ``repo_id`` (:func:`adapter_base_to_pin`, read now: the folder may change meanwhile):
    done at once (``blocking``) or queued as a ``Future`` that waits for the push. ``commit`` itself when there is
    nothing to pin."""
    adapter_config = adapter_base_to_pin(folder, repo_id)
    if adapter_config is None:
        return commit
    pin = partial(pin_adapter_base, repo_id, adapter_config, commit, token=token, revision=revision)
    return pin() if blocking else HfApi().run_as_future(pin)


def pickled_files(folder: str | os.PathLike) -> list[str]:
    """Paths (relative to ``folder``) of the files whose names mark them as pickles."""
    root = Path(folder)
    return sorted(str(p.relative_to(root)) for pattern in PICKLE_PATTERNS for p in root.rglob(pattern) if p.is_file())


def repo_has_file(repo_id: str, filename: str, token=None, revision: str | None = None) -> bool:
    """Whether the Hub repo holds ``filename`` (False for a repo that does not exist yet)."""
    try:
        return HfApi().file_exists(repo_id, filename, revision=revision, token=token)
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
        return False


def repo_model_type(repo_id: str, token=None, revision: str | None = None) -> str | None:
    """The ``model_type`` of the model a Hub repo holds (its ``config.json``), or None when it holds none (or the
    repo or revision does not exist yet)."""
    try:
        return read_json(hf_hub_download(repo_id, "config.json", token=token, revision=revision)).get("model_type")
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
        return None


def _same_content(path: Path, entry) -> bool:
    """Whether the file holds what the Hub's listing ``entry`` says: the sha256 of an LFS file, the git blob id of a
    regular file."""
    digest = hashlib.sha256() if entry.lfs else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == (entry.lfs.sha256 if entry.lfs else entry.blob_id)


def card_is_current(repo_id: str, folder: str | os.PathLike, token=None, revision: str | None = None) -> bool:
    """Whether the repo's ``README.md`` still describes what ``folder`` pushes: the repo has a card and holds every
    file of ``folder`` (the card and its figures aside) with the same content, so the push changes nothing the card
    describes (weights, config, knowledge). False for a repo or revision that does not exist yet."""
    try:
        listed = {  # the files only: a pushed file at a folder's path is no match
            entry.path: entry
            for entry in HfApi().list_repo_tree(repo_id, recursive=True, revision=revision, token=token)
            if isinstance(entry, RepoFile)
        }
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
        return False
    if "README.md" not in listed:
        return False
    root = Path(folder)
    for path in root.rglob("*"):
        name = path.relative_to(root).as_posix()
        # adapter_config.json's pinned base revision changes with every push (pin_adapter_base); its other fields
        # follow the adapter weights, which are compared
        if not path.is_file() or name in ("README.md", ADAPTER_CONFIG) or name.startswith("figures/"):
            continue
        entry = listed.get(name)
        if entry is None or not _same_content(path, entry):
            return False
    return True


def push_folder(
    save: Callable[[str], None],
    repo_id: str,
    *,
    write_card: Callable[[str], None] | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    private: bool | None = None,
    token: bool | str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    default_message: str = "Upload with keplm",
    replaces: tuple[str, ...] = (),
    model_type: str | None = None,
):
    """Create ``repo_id`` if needed, ``save`` into a temporary folder and upload that folder in one commit.

    ``write_card(folder)`` writes ``README.md`` (and its figures) from what is pushed, unless the repo's card still
    describes it (:func:`card_is_current`: a re-push of the same files keeps the card on the Hub, e.g. the Trainer's
    with its results; a re-push with other weights or another KG gets the card of what it pushes). A saved pickle is
    a ValueError naming it. ``replaces``: the patterns of the files this push owns (:data:`MODEL_FILES`,
    :data:`PROCESSOR_FILES`); the repo's files matching them that the new save lacks are deleted in the same commit.
    ``model_type``: that of the model pushed; when the repo holds a model of another type, its processor files
    (:data:`PROCESSOR_FILES`, which belong to that model) go too, with a warning to push this model's processor.
    A keplm adapter saved for this repo gets a second commit that pins its base files (:func:`pin_adapter_base`).
    Returns the ``CommitInfo`` of the last commit.
    """
    api = HfApi()
    repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    earlier = model_type and repo_model_type(repo_id, token=token, revision=revision)
    if earlier not in (None, model_type):
        logger.warning(
            "%s holds a %s model: pushing a %s model replaces it, and the earlier model's processor files go too "
            "(push this model's processor, or push with the Trainer)",
            repo_id,
            earlier,
            model_type,
        )
        replaces = (*replaces, *PROCESSOR_FILES)
    with tempfile.TemporaryDirectory() as folder:
        save(folder)
        if (
            write_card
            and not Path(folder, "README.md").exists()
            and not card_is_current(repo_id, folder, token=token, revision=revision)
        ):
            write_card(folder)
        if pickles := pickled_files(folder):
            raise ValueError(f"refusing to push pickled files {pickles} to {repo_id}: keplm saves no pickles")
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            commit_message=commit_message or default_message,
            commit_description=commit_description,
            token=token,
            revision=revision,
            create_pr=create_pr,
            delete_patterns=replaces or None,
        )
        return pin_after(commit, folder, repo_id, token=token, revision=revision)


__all__ = [
    "push_folder",
    "adapter_base_to_pin",
    "pin_adapter_base",
    "pin_after",
    "pickled_files",
    "repo_has_file",
    "repo_model_type",
    "card_is_current",
    "LOADING_PATTERNS",
    "PICKLE_PATTERNS",
    "MODEL_FILES",
    "PROCESSOR_FILES",
]
