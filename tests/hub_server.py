"""A small Hub-API-compatible HTTP server, so that tests push and pull for real over HTTP (test code, never shipped).

Endpoints (what huggingface_hub 2.x / transformers 5.x call), for model and dataset repos "namespace/name":

    POST /api/repos/create                               create_repo (409 with the url when it exists)
    GET  /api/{models|datasets}/{repo}[/revision/{rev}]   repo_info / model_info: sha + siblings
    GET  /api/{models|datasets}/{repo}/tree/{rev}[/{path}] list_repo_tree / list_repo_files (?recursive=true)
    POST /api/{models|datasets}/{repo}/preupload/{rev}    upload mode per file: "lfs" or "regular"
    POST /[datasets/]{repo}.git/info/lfs/objects/batch    LFS batch API, basic transfer (upload + verify actions)
    PUT  /__lfs/{sha256}, POST /__lfs/verify              where those actions point (the Hub's S3 stand-in)
    POST /api/{models|datasets}/{repo}/commit/{branch}    NDJSON commit: header, file, lfsFile, deletedFile/Folder
    HEAD/GET /[datasets/]{repo}/resolve/{rev}/{path}      hf_hub_download, cached_file, has_file
    POST /api/validate-yaml                               README.md check of create_commit / upload_file

A commit is an immutable snapshot (path -> blob) with a 40-hex id; a branch points to its newest commit; a revision
is a branch or a full commit id. A new repo starts, as on the Hub, with one commit holding ``.gitattributes``. Blobs
(regular and LFS) are stored on disk as ``root/blobs/<sha256>``, the commit graph in memory. Any token or none is
accepted. Unknown repos / revisions / files answer 404 with the X-Error-Code (RepoNotFound, RevisionNotFound,
EntryNotFound) that huggingface_hub turns into RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError.
``server.requests`` records every ``(method, path, status)``, ``server.errors`` every server-side traceback.

Upload mode, as the Hub's preupload decides it: "lfs" for a name matching ``LFS_PATTERNS`` (from the Hub's default
``.gitattributes``), a size of at least ``lfs_threshold`` (1 MB here, 10 MB on the Hub) or a binary sample (a NUL in
the first 512 bytes); "regular" (inline base64 in the commit) otherwise. The client sends empty files as regular.

Pointing clients at it (``tests/hub_fixtures.py`` does this): huggingface_hub reads its environment at import, so
inside a running pytest process set on ``huggingface_hub.constants``: ENDPOINT and HUGGINGFACE_CO_URL_TEMPLATE (the
server url), HF_HUB_OFFLINE = False (CI exports HF_HUB_OFFLINE=1), HF_HUB_DISABLE_XET = True (with hf_xet installed
every LFS upload goes to ``/xet-write-token`` with no fallback), HF_HUB_DISABLE_TELEMETRY = True (else the user agent
fetches ``/api/agent-harnesses``), HF_HUB_CACHE (a fresh directory); and also ``huggingface_hub.hf_api.api.endpoint``
(``create_repo``, ``upload_folder``... are methods of an HfApi made at import) and ``transformers.utils.hub._hf_api =
None`` (transformers caches an HfApi, endpoint included). A subprocess only needs the environment: HF_ENDPOINT,
HF_HUB_OFFLINE=0, HF_HUB_DISABLE_XET=1, HF_HUB_DISABLE_TELEMETRY=1, HF_HOME (empty), HF_TOKEN=dummy.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import shutil
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

#: file-name patterns stored as LFS (a subset of the Hub's default ``.gitattributes``)
LFS_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.npy",
    "*.npz",
    "*.pkl",
    "*.pickle",
    "*.model",
    "*.zip",
    "*.gz",
    "*.tar",
    "*.parquet",
    "*.arrow",
    "*tfevents*",
)
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS).encode()
API_TYPES = {"models": "model", "datasets": "dataset"}
URL_PREFIXES = {"model": "", "dataset": "datasets/"}


def git_blob_oid(data: bytes) -> str:
    """The git object id of a blob: what the Hub reports as a regular file's oid / ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file git stores in place of an LFS file (its blob id is the LFS file's oid)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def now() -> str:
    """A timestamp in the Hub's format (what huggingface_hub's parse_datetime reads)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


@dataclass(frozen=True)
class Entry:
    """One file of a snapshot: ``sha256`` names its blob on disk; ``oid`` is its git blob id (of the pointer if LFS)."""

    sha256: str
    size: int
    lfs: bool
    oid: str

    def tree_json(self, path: str) -> dict:
        """The entry as the tree API lists it."""
        lfs = {"oid": self.sha256, "size": self.size, "pointerSize": len(lfs_pointer(self.sha256, self.size))}
        return {"type": "file", "path": path, "oid": self.oid, "size": self.size, **({"lfs": lfs} if self.lfs else {})}


@dataclass(frozen=True)
class Commit:
    """An immutable snapshot of a repo."""

    oid: str
    files: dict[str, Entry]
    title: str
    date: str


@dataclass
class Repo:
    """A repo: its branches (name -> commit id) and every commit ever made (id -> commit)."""

    branches: dict[str, str]
    commits: dict[str, Commit]
    created: str


class HubError(Exception):
    """An error answer: HTTP status, message and the X-Error-Code that huggingface_hub maps to an exception."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **body):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body


class HubServer:
    """The server: ``HubServer(root).start()``, then ``.url``; ``.stop()`` (or use it as a context manager).

    One thread per connection; the repos / commits are guarded by ``lock``, blobs are written atomically.
    """

    def __init__(self, root: str | os.PathLike, host: str = "127.0.0.1", port: int = 0, lfs_threshold: int = 10**6):
        self.blobs = Path(root) / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.address, self.lfs_threshold = (host, port), lfs_threshold
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.errors: list[str] = []
        self.lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        self._httpd = _HTTPServer(self.address, type("Handler", (_Handler,), {"hub": self}))
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="hub-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def head(self, repo_id: str, branch: str = "main", repo_type: str = "model") -> str:
        """The commit id a branch points to (for assertions)."""
        with self.lock:
            return self._repo(repo_type, repo_id).branches[branch]

    # -- routing ------------------------------------------------------------------------------------------------------

    def route(self, method: str, seg: list[str], body: bytes, query: dict) -> tuple[int, object, dict]:
        """Answer one request: (status, JSON-able payload / bytes / blob Path, headers)."""
        if seg == ["api", "validate-yaml"]:
            return 200, {"errors": [], "warnings": []}, {}
        if seg == ["api", "repos", "create"] and method == "POST":
            return self._create_repo(json.loads(body))
        if seg[0] == "__lfs" and len(seg) == 2:
            return self._lfs_object(method, seg[1], body)
        if seg[0] == "api" and len(seg) >= 4 and seg[1] in API_TYPES:
            repo_type, repo_id, op, args = API_TYPES[seg[1]], "/".join(seg[2:4]), seg[4:5], seg[5:]
            with self.lock:
                repo = self._repo(repo_type, repo_id)
                if op == [] and method == "GET":
                    return 200, self._info(repo_id, repo, self._commit(repo, "main")), {}
                if op == ["revision"] and method == "GET" and args:
                    return 200, self._info(repo_id, repo, self._commit(repo, args[0])), {}
                if op == ["tree"] and method == "GET" and args:
                    recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
                    return 200, self._tree(self._commit(repo, args[0]), "/".join(args[1:]), recursive), {}
                if op == ["preupload"] and method == "POST" and args:
                    return 200, self._preupload(self._commit(repo, args[0]), json.loads(body)), {}
                if op == ["commit"] and method == "POST" and args:
                    return self._create_commit(repo_type, repo_id, repo, args[0], body, query)
        repo_type = "dataset" if seg[0] == "datasets" else "model"  # git-side urls: [datasets/]namespace/name/...
        seg = seg[1:] if seg[0] == "datasets" else seg
        if len(seg) == 6 and seg[1].endswith(".git") and seg[2:] == ["info", "lfs", "objects", "batch"]:
            with self.lock:
                self._repo(repo_type, f"{seg[0]}/{seg[1][:-4]}")
            return self._lfs_batch(json.loads(body))
        if len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
            with self.lock:
                commit = self._commit(self._repo(repo_type, "/".join(seg[:2])), seg[3])
            return self._resolve(commit, "/".join(seg[4:]))
        raise HubError(404, f"this test server has no route for {method} /{'/'.join(seg)}")

    def _repo(self, repo_type: str, repo_id: str) -> Repo:
        if (repo_type, repo_id) not in self.repos:
            raise HubError(404, f"Repository not found: {repo_type} {repo_id}", "RepoNotFound")
        return self.repos[repo_type, repo_id]

    def _commit(self, repo: Repo, revision: str) -> Commit:
        oid = repo.branches.get(revision, revision)
        if oid not in repo.commits:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[oid]

    # -- repos, listings, downloads -----------------------------------------------------------------------------------

    def _create_repo(self, payload: dict) -> tuple[int, object, dict]:
        repo_type = payload.get("type") or "model"
        if repo_type not in URL_PREFIXES:
            raise HubError(400, f"this test server only hosts {sorted(URL_PREFIXES)} repos")
        # the Hub puts a repo without an organization under the caller's user name: here, "user"
        repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
        url = f"{self.url}/{URL_PREFIXES[repo_type]}{repo_id}"
        with self.lock:
            if (repo_type, repo_id) in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo", url=url)
            repo = self.repos[repo_type, repo_id] = Repo({}, {}, now())
            self._add_commit(repo, "main", {".gitattributes": self._store(GITATTRIBUTES, lfs=False)}, "initial commit")
        return 200, {"url": url, "name": repo_id, "id": repo_id}, {}

    def _info(self, repo_id: str, repo: Repo, commit: Commit) -> dict:
        """repo_info: what ModelInfo / DatasetInfo read (snapshot_download and resolve_revision use ``sha``)."""
        siblings = []
        for path, entry in sorted(commit.files.items()):
            pointer = len(lfs_pointer(entry.sha256, entry.size))
            lfs = {"lfs": {"sha256": entry.sha256, "size": entry.size, "pointerSize": pointer}} if entry.lfs else {}
            siblings.append({"rfilename": path, "size": entry.size, "blobId": entry.oid, **lfs})
        return {
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit.oid,
            "private": False,
            "gated": False,
            "disabled": False,
            "createdAt": repo.created,
            "lastModified": commit.date,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "siblings": siblings,
        }

    def _tree(self, commit: Commit, path: str, recursive: bool) -> list[dict]:
        """Files and folders under ``path``: direct children only unless ``recursive``."""
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        listing, folders = [], set()
        for file_path, entry in sorted(commit.files.items()):
            if not file_path.startswith(prefix):
                continue
            parts = file_path[len(prefix) :].split("/")
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                folder = prefix + "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    oid = hashlib.sha1(f"{commit.oid}:{folder}".encode()).hexdigest()  # stand-in for a git tree id
                    listing.append({"type": "directory", "path": folder, "oid": oid, "size": 0})
            if recursive or len(parts) == 1:
                listing.append(entry.tree_json(file_path))
        if prefix and not listing:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": commit.oid})
        return listing

    def _resolve(self, commit: Commit, path: str) -> tuple[int, object, dict]:
        """A file's bytes with the headers hf_hub_download reads (served directly: no redirect to a CDN)."""
        headers = {"X-Repo-Commit": commit.oid}
        entry = commit.files.get(path)
        if entry is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", headers)
        headers["ETag"] = f'"{entry.sha256 if entry.lfs else entry.oid}"'
        headers["Content-Type"] = "application/octet-stream"
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        return 200, self.blobs / entry.sha256, headers

    # -- uploads ------------------------------------------------------------------------------------------------------

    def _preupload(self, commit: Commit, payload: dict) -> dict:
        """Upload mode per file, plus the current oid (the client skips unchanged files). gitignore is not applied."""
        files = []
        for item in payload["files"]:
            path, size, sample = item["path"], item["size"], base64.b64decode(item.get("sample", ""))
            name = path.rsplit("/", 1)[-1]
            lfs = size >= self.lfs_threshold or b"\0" in sample or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)
            old = commit.files.get(path)
            files.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": False,
                    "oid": None if old is None else (old.sha256 if old.lfs else old.oid),
                }
            )
        return {"files": files, "commitOid": commit.oid}

    def _lfs_batch(self, payload: dict) -> tuple[int, object, dict]:
        """LFS batch API (upload only; downloads go through /resolve): basic transfer, never xet."""
        if payload.get("operation") != "upload":
            raise HubError(400, "this test server only accepts LFS uploads")
        objects = []
        for item in payload["objects"]:
            oid, size = item["oid"], item["size"]
            obj = {"oid": oid, "size": size, "authenticated": True}
            blob = self.blobs / oid
            if not (blob.is_file() and blob.stat().st_size == size):  # already stored: no actions, client skips it
                obj["actions"] = {
                    "upload": {"href": f"{self.url}/__lfs/{oid}"},
                    "verify": {"href": f"{self.url}/__lfs/verify"},
                }
            objects.append(obj)
        return 200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"}

    def _lfs_object(self, method: str, name: str, body: bytes) -> tuple[int, object, dict]:
        """PUT the bytes of an LFS object (checked against its sha256), or POST-verify that it is stored."""
        if method == "PUT":
            if hashlib.sha256(body).hexdigest() != name:
                raise HubError(400, f"uploaded content does not match sha256 {name}")
            self._store(body, lfs=True)
            return 200, {}, {}
        if method == "POST" and name == "verify":
            item = json.loads(body)
            blob = self.blobs / item["oid"]
            if not (blob.is_file() and blob.stat().st_size == item["size"]):
                raise HubError(404, f"LFS object {item['oid']} not found")
            return 200, {"message": "Everything is fine"}, {}
        raise HubError(405, f"{method} not allowed on /__lfs/{name}")

    def _store(self, data: bytes, lfs: bool) -> Entry:
        """Write a blob (content-addressed, atomically) and return its entry."""
        sha256 = hashlib.sha256(data).hexdigest()
        blob = self.blobs / sha256
        if not blob.exists():
            tmp = blob.with_name(f"{sha256}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, blob)
        return Entry(sha256, len(data), lfs, git_blob_oid(lfs_pointer(sha256, len(data)) if lfs else data))

    def _create_commit(self, repo_type, repo_id, repo, branch, body, query) -> tuple[int, object, dict]:
        """Apply an NDJSON commit to the branch head (under the lock, so concurrent commits serialise)."""
        if query.get("create_pr"):
            raise HubError(400, "this test server does not support pull requests")
        if branch not in repo.branches:
            raise HubError(404, f"Invalid rev id: {branch} (commits go to an existing branch)", "RevisionNotFound")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0]["key"] != "header":
            raise HubError(400, "a commit payload starts with a header line")
        header, parent = lines[0]["value"], repo.branches[branch]
        if header.get("parentCommit") and not parent.startswith(header["parentCommit"]):
            raise HubError(412, f"parentCommit {header['parentCommit']} is not the head of {branch} ({parent})")
        files = dict(repo.commits[parent].files)
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            path = value["path"]
            if key == "file":
                content = value["content"]
                data = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
                files[path] = self._store(data, lfs=False)
            elif key == "lfsFile":
                blob = self.blobs / value["oid"]
                if not blob.is_file():
                    raise HubError(422, f"LFS object {value['oid']} of {path} was never uploaded")
                size = blob.stat().st_size
                files[path] = Entry(value["oid"], size, True, git_blob_oid(lfs_pointer(value["oid"], size)))
            elif key == "deletedFile":
                if files.pop(path, None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            elif key == "deletedFolder":
                folder = path.rstrip("/") + "/"
                files = {p: e for p, e in files.items() if not p.startswith(folder)}
            else:
                raise HubError(400, f"unsupported commit operation {key!r}")
        commit = self._add_commit(repo, branch, files, header.get("summary", ""))
        url = f"{self.url}/{URL_PREFIXES[repo_type]}{repo_id}/commit/{commit.oid}"
        return 200, {"success": True, "commitOid": commit.oid, "commitUrl": url}, {}

    def _add_commit(self, repo: Repo, branch: str, files: dict[str, Entry], title: str) -> Commit:
        parent = repo.branches.get(branch, "")
        seed = json.dumps([parent, title, sorted((p, e.oid) for p, e in files.items()), time.time_ns()])
        commit = Commit(hashlib.sha1(seed.encode()).hexdigest(), files, title, now())
        repo.commits[commit.oid] = commit
        repo.branches[branch] = commit.oid
        return commit


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = 64  # snapshot_download and LFS uploads open several connections at once


class _Handler(BaseHTTPRequestHandler):
    """HTTP plumbing: read the body (Content-Length or chunked), dispatch to the HubServer, write the answer."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    timeout = 30  # idle keep-alive connections are closed after this many seconds
    hub: HubServer

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        body = self._read_body()  # always read, so that the next request on this connection starts cleanly
        segments = [unquote(part) for part in split.path.strip("/").split("/")]
        try:
            status, payload, headers = self.hub.route(self.command, segments, body, parse_qs(split.query))
        except HubError as error:
            headers = {"X-Error-Message": error.message, **error.headers}
            if error.code:
                headers["X-Error-Code"] = error.code
            status, payload = error.status, {"error": error.message, **error.body}
        except Exception as error:  # a server bug or malformed request: 400, since 5xx makes the client retry slowly
            with self.hub.lock:
                self.hub.errors.append(traceback.format_exc())
            status, payload, headers = 400, {"error": f"test hub server error: {error!r}"}, {}
        self._send(status, payload, headers)

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, payload: object, headers: dict) -> None:
        data = None
        if isinstance(payload, Path):
            size = payload.stat().st_size
        else:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            size = len(data)
            headers.setdefault("Content-Type", "application/json")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command == "HEAD":
            return
        if data is None:
            with open(payload, "rb") as blob:
                shutil.copyfileobj(blob, self.wfile)
        else:
            self.wfile.write(data)

    def log_request(self, code="-", size="-") -> None:
        with self.hub.lock:
            self.hub.requests.append((self.command, urlsplit(self.path).path, int(code)))

    def log_message(self, format, *args) -> None:  # quiet: requests are recorded in hub.requests
        pass
