"""The ``hub_server`` fixture: a local Hub (tests/hub_server.py) that this process and its subprocesses talk to.

Use it from a test module with ``from .hub_fixtures import hub_env, hub_server  # noqa: F401``, or make it available
to every test with that same line in tests/conftest.py (``pytest_plugins`` is refused in a conftest below the rootdir).
"""

from __future__ import annotations

import os

import pytest

from .hub_server import HubServer


def hub_environment(url: str, home: str | os.PathLike) -> dict[str, str]:
    """Environment variables that point a fresh process (a subprocess) at the server, with an empty cache."""
    return {
        "HF_ENDPOINT": url,
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": os.path.join(home, "hub"),
        "HF_TOKEN": "dummy",
    }


@pytest.fixture()
def hub_server(tmp_path, monkeypatch):
    """A running HubServer on 127.0.0.1 (free port), files under tmp_path/hub_server; this process points at it.

    huggingface_hub read its environment at import, so besides the env vars (for subprocesses: see ``hub_env``)
    the constants it reads at call time are patched, plus the two HfApi objects made before the test ran.
    """
    import huggingface_hub
    import huggingface_hub.hf_api
    from huggingface_hub import constants

    server = HubServer(tmp_path / "hub_server").start()
    home = tmp_path / "hf_home"
    for name, value in hub_environment(server.url, home).items():
        monkeypatch.setenv(name, value)
    for name, value in {
        "ENDPOINT": server.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": server.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HUGGINGFACE_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"),
    }.items():
        monkeypatch.setattr(constants, name, value)
    monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", server.url)  # create_repo, upload_folder, ...
    try:
        import transformers.utils.hub as transformers_hub

        monkeypatch.setattr(transformers_hub, "_hf_api", None)  # transformers' cached HfApi keeps its endpoint
    except ImportError:
        pass
    yield server
    server.stop()
    huggingface_hub.close_session()  # drop pooled keep-alive connections to the stopped server


@pytest.fixture()
def hub_env(hub_server, tmp_path):
    """The environment for a subprocess: ``os.environ`` plus the server's variables and an empty HF_HOME."""
    return {**os.environ, **hub_environment(hub_server.url, tmp_path / "subprocess_hf_home")}


#: what every pushed keplm model repo holds
MODEL_REPO_FILES = {"config.json", "model.safetensors", "README.md", "processor_config.json"}


def push_model_and_processor(model, processor, repo_id: str) -> set[str]:
    """``push_to_hub`` of both to ``repo_id`` on the test Hub; the repo's files."""
    from huggingface_hub import HfApi

    model.push_to_hub(repo_id)
    processor.push_to_hub(repo_id)
    return set(HfApi().list_repo_files(repo_id))
