"""The local Hub server (tests/hub_server.py) against the real clients: huggingface_hub 2.x and transformers 5.x push
and pull through it over HTTP, LFS uploads go through the LFS batch API (never Xet), revisions pin snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from huggingface_hub import (
    CommitOperationAdd,
    HfApi,
    ModelCard,
    ModelCardData,
    create_repo,
    hf_hub_download,
    snapshot_download,
    upload_folder,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from .hub_fixtures import hub_env, hub_server  # noqa: F401

REPO = "keplm-test/tiny"
BIG = 1_200_000  # over the server's 1 MB LFS threshold


def write_checkpoint(folder, version: str = "v1"):
    """A checkpoint-like folder: regular text files (one nested), a safetensors file and a large text file."""
    (folder / "knowledge" / "kg").mkdir(parents=True)
    (folder / "config.json").write_text(f'{{"version": "{version}"}}')
    (folder / "knowledge" / "assets_config.json").write_text(f'{{"version": "{version}"}}')
    (folder / "knowledge" / "kg" / "triples.tsv").write_text(f"Q90\tP17\tQ142\t{version}\n")
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + version.encode())
    (folder / "vocab.txt").write_text("x" * BIG)
    return folder


@pytest.fixture()
def pushed(hub_server, tmp_path):  # noqa: F811
    """REPO created and one checkpoint pushed with upload_folder; returns its commit id."""
    create_repo(REPO)
    return upload_folder(repo_id=REPO, folder_path=write_checkpoint(tmp_path / "v1"), commit_message="v1").oid


def test_create_repo(hub_server):  # noqa: F811
    url = create_repo(REPO)
    assert (url.repo_id, url.repo_type, url.endpoint) == (REPO, "model", hub_server.url)
    assert create_repo(REPO, exist_ok=True).repo_id == REPO
    with pytest.raises(HfHubHTTPError) as error:
        create_repo(REPO)
    assert error.value.response.status_code == 409
    assert HfApi().create_repo("no-namespace").repo_id == "user/no-namespace"
    assert HfApi().list_repo_files(REPO) == [".gitattributes"]  # like the Hub: a new repo has one commit


def test_upload_folder_lfs_through_batch_api(hub_server, pushed):  # noqa: F811
    lfs_uploads = [path for method, path, _ in hub_server.requests if method == "PUT"]
    assert len(lfs_uploads) == 2  # model.safetensors (pattern) and vocab.txt (size); the rest went inline
    assert ("POST", f"/{REPO}.git/info/lfs/objects/batch", 200) in hub_server.requests
    assert ("POST", f"/api/models/{REPO}/commit/main", 200) in hub_server.requests
    assert hub_server.head(REPO) == pushed
    api = HfApi()
    assert sorted(api.list_repo_files(REPO)) == [
        ".gitattributes",
        "config.json",
        "knowledge/assets_config.json",
        "knowledge/kg/triples.tsv",
        "model.safetensors",
        "vocab.txt",
    ]
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == pushed
    lfs = {sibling.rfilename: sibling.lfs is not None for sibling in info.siblings}
    assert lfs == {
        ".gitattributes": False,
        "config.json": False,
        "knowledge/assets_config.json": False,
        "knowledge/kg/triples.tsv": False,
        "model.safetensors": True,
        "vocab.txt": True,
    }
    tree = {entry.path: type(entry).__name__ for entry in api.list_repo_tree(REPO, "knowledge")}
    assert tree == {"knowledge/assets_config.json": "RepoFile", "knowledge/kg": "RepoFolder"}
    assert hub_server.errors == []


def test_download_nested_file_and_snapshot(hub_server, pushed, tmp_path):  # noqa: F811
    path = hf_hub_download(REPO, "knowledge/kg/triples.tsv")
    assert open(path).read() == "Q90\tP17\tQ142\tv1\n"
    assert pushed in path  # cached under snapshots/<commit id>
    assert os.path.getsize(hf_hub_download(REPO, "vocab.txt", cache_dir=tmp_path / "other")) == BIG
    root = snapshot_download(REPO, allow_patterns=["knowledge/*", "knowledge/**"], cache_dir=tmp_path / "snap")
    files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names)
    assert files == ["knowledge/assets_config.json", "knowledge/kg/triples.tsv"]
    assert hub_server.errors == []


def test_second_push_then_load_at_first_commit(hub_server, pushed, tmp_path):  # noqa: F811
    second = upload_folder(repo_id=REPO, folder_path=write_checkpoint(tmp_path / "v2", "v2"), commit_message="v2")
    assert second.oid != pushed and hub_server.head(REPO) == second.oid
    assert open(hf_hub_download(REPO, "config.json")).read() == '{"version": "v2"}'
    assert open(hf_hub_download(REPO, "config.json", revision=pushed)).read() == '{"version": "v1"}'
    first_kg = snapshot_download(REPO, revision=pushed, cache_dir=tmp_path / "first")
    assert open(os.path.join(first_kg, "knowledge/kg/triples.tsv")).read().endswith("v1\n")
    api = HfApi()
    api.delete_file("config.json", repo_id=REPO)
    assert "config.json" not in api.list_repo_files(REPO)
    assert "config.json" in api.list_repo_files(REPO, revision=pushed)  # old snapshots are immutable
    with pytest.raises(HfHubHTTPError) as error:  # parentCommit that is no longer the head
        api.create_commit(REPO, [CommitOperationAdd("x.txt", b"x")], commit_message="stale", parent_commit=pushed)
    assert error.value.response.status_code == 412


def test_errors_map_to_hub_exceptions(hub_server, pushed):  # noqa: F811
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.json")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("keplm-test/missing", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info("keplm-test/missing")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        list(HfApi().list_repo_tree(REPO, "no-such-folder"))


def test_transformers_hub_helpers(hub_server, pushed, tmp_path):  # noqa: F811
    from transformers import AutoConfig, BertConfig
    from transformers.utils.hub import cached_file, has_file, resolve_revision

    resolved = resolve_revision(REPO, "main")
    assert resolved == "main" and resolved.resolved == pushed
    assert open(cached_file(REPO, "knowledge/kg/triples.tsv", revision=resolved)).read().endswith("v1\n")
    assert cached_file(REPO, "missing.json", _raise_exceptions_for_missing_entries=False) is None
    assert has_file(REPO, "config.json") and not has_file(REPO, "missing.json")
    BertConfig(hidden_size=8, num_attention_heads=2).push_to_hub("keplm-test/config-only")
    assert AutoConfig.from_pretrained("keplm-test/config-only", cache_dir=tmp_path / "c").hidden_size == 8


def test_model_card_and_upload_file(hub_server, pushed):  # noqa: F811
    card = ModelCard.from_template(ModelCardData(license="apache-2.0", library_name="keplm"), model_id="tiny")
    card.push_to_hub(REPO)
    assert ModelCard.load(REPO).data.license == "apache-2.0"
    HfApi().upload_file(path_or_fileobj=b"# notes\n", path_in_repo="docs/NOTES.md", repo_id=REPO)
    assert open(hf_hub_download(REPO, "docs/NOTES.md")).read() == "# notes\n"
    assert ("POST", "/api/validate-yaml", 200) in hub_server.requests


def test_fresh_subprocess_downloads(hub_server, hub_env, pushed):  # noqa: F811
    script = textwrap.dedent(f"""
        import os
        from huggingface_hub import constants, snapshot_download
        assert constants.ENDPOINT == {hub_server.url!r} and not constants.HF_HUB_OFFLINE
        root = snapshot_download({REPO!r}, revision={pushed!r})
        assert root.startswith(os.environ["HF_HOME"])
        print(open(os.path.join(root, "knowledge/kg/triples.tsv")).read(), end="")
    """)
    result = subprocess.run([sys.executable, "-c", script], env=hub_env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Q90\tP17\tQ142\tv1\n"


def test_concurrent_commits_and_dataset_repo(hub_server):  # noqa: F811
    from concurrent.futures import ThreadPoolExecutor

    create_repo(REPO)
    api = HfApi()
    with ThreadPoolExecutor(4) as pool:  # commits to one branch serialise: none is lost
        list(
            pool.map(
                lambda i: api.upload_file(path_or_fileobj=b"%d" % i, path_in_repo=f"f{i}.txt", repo_id=REPO), range(4)
            )
        )
    assert sorted(api.list_repo_files(REPO)) == [".gitattributes", "f0.txt", "f1.txt", "f2.txt", "f3.txt"]
    create_repo("keplm-test/data", repo_type="dataset")
    api.upload_file(path_or_fileobj=b"a,b\n", path_in_repo="train.csv", repo_id="keplm-test/data", repo_type="dataset")
    assert open(hf_hub_download("keplm-test/data", "train.csv", repo_type="dataset")).read() == "a,b\n"
    with pytest.raises(RepositoryNotFoundError):  # a dataset is not a model
        hf_hub_download("keplm-test/data", "train.csv")
    assert hub_server.errors == []
