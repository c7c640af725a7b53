"""A stand-in for the Hugging Face Hub's HTTP API on 127.0.0.1, for tests that run huggingface_hub's
real download path (snapshot_download, then hf_hub_download per file) with no network.

It speaks what huggingface_hub 2.4 asks for a download at a 40-hex commit, and nothing else:

- GET  /api/{models|datasets}/{repo}/tree/{commit}?recursive=true&expand=false  the file list (one page);
- HEAD /[datasets/]{repo}/resolve/{commit}/{path}  the file's metadata in headers: X-Repo-Commit,
  and ETag + Content-Length (git blobs) or a 302 to the CDN with X-Linked-Etag + X-Linked-Size (LFS);
- GET  the same url (git blobs) or the CDN's /lfs/{sha256} (LFS files) for the bytes.

As on the hub, a git blob's ETag is its git blob id and an LFS file's is the sha256 of its content:
huggingface_hub names cache blobs by it, and databuild checks each cached file against that name.
LFS bytes come from a second origin (another port), as the real CDN is another host, so
huggingface_hub must drop the Authorization header there. No Xet header is ever sent, so the
plain HTTP download is used.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

Files = dict[str, bytes]
LFS_MIN_BYTES = 100_000  # larger files are LFS (as tokenizer.json is on the hub); parquet always is
TREE_RE = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)$")
REVISION_RE = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/revision/([^/]+)$")  # a branch's commit
RESOLVE_RE = re.compile(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
LFS_RE = re.compile(r"/lfs/([0-9a-f]{64})$")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str, data: bytes) -> bool:
    return path.endswith(".parquet") or len(data) >= LFS_MIN_BYTES


def lfs_pointer(data: bytes) -> bytes:
    """The pointer file git stores for an LFS file: the tree's `oid` of an LFS file is its blob id."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # snapshot_download opens up to 8 connections at once


@dataclass(frozen=True)
class Request:
    origin: str  # "hub" or "cdn"
    method: str
    path: str  # with the query string
    authorization: str | None


class HubServer:
    """Serves in-memory repos {(repo_type, repo_id, commit): {path: bytes}}; `tokens` {(repo_type,
    repo_id): token} makes a repo gated (401 without a token, 403 with another one). Every request
    is kept in `requests`, in arrival order. `lfs` {sha256: bytes} is what the CDN serves: a test
    may alter it to play a transfer that went wrong, and `cut_lfs_after` N makes the CDN close the
    connection after N bytes of a file, and `down` makes the hub answer every request with a bare 403,
    as a hub behind a failing proxy would (`down_for` N: the next N requests only, as a proxy that
    recovers). `branches` {(repo_type, repo_id, branch): commit} answers the revision API, which
    resolves a branch to its commit. Use as a context manager; `url` is the HF_ENDPOINT."""

    def __init__(self, repos: dict[tuple[str, str, str], Files], tokens: dict[tuple[str, str], str] | None = None,
                 branches: dict[tuple[str, str, str], str] | None = None):
        self.repos = repos
        self.tokens = tokens or {}
        self.branches = branches or {}  # (repo_type, repo_id, branch): its commit, for the revision API
        self.lfs = {hashlib.sha256(data).hexdigest(): data for files in repos.values()
                    for path, data in files.items() if is_lfs(path, data)}
        self.requests: list[Request] = []
        self.cut_lfs_after: int | None = None
        self.down = False
        self.down_for = 0
        self._lock = threading.Lock()
        self._hub = _Server(("127.0.0.1", 0), self._handler("hub"))
        self._cdn = _Server(("127.0.0.1", 0), self._handler("cdn"))
        self.url = f"http://127.0.0.1:{self._hub.server_port}"
        self.cdn_url = f"http://127.0.0.1:{self._cdn.server_port}"

    def __enter__(self) -> HubServer:
        for server in (self._hub, self._cdn):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    def _handler(self, origin: str) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects of the hub

            def do_GET(self):
                hub._serve(self, origin, body=True)

            def do_HEAD(self):
                hub._serve(self, origin, body=False)

            def log_message(self, *args):  # the test asserts on `requests`, not on stderr noise
                pass

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler, origin: str, body: bool) -> None:
        with self._lock:
            self.requests.append(Request(origin, handler.command, handler.path,
                                         handler.headers.get("Authorization")))
        path = unquote(urlsplit(handler.path).path)
        status, headers, payload = self._cdn_response(path) if origin == "cdn" else self._hub_response(handler, path)
        handler.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(payload))}.items():
            handler.send_header(name, value)
        handler.end_headers()
        if body and origin == "cdn" and self.cut_lfs_after is not None:
            handler.wfile.write(payload[:self.cut_lfs_after])
            handler.close_connection = True
        elif body:
            handler.wfile.write(payload)

    def _cdn_response(self, path: str) -> tuple[int, dict, bytes]:
        match = LFS_RE.fullmatch(path)
        if match is None or match.group(1) not in self.lfs:
            return 404, {}, b"not found"
        return 200, {"Content-Type": "application/octet-stream"}, self.lfs[match.group(1)]

    def _hub_response(self, handler: BaseHTTPRequestHandler, path: str) -> tuple[int, dict, bytes]:
        with self._lock:
            down, self.down_for = self.down or self.down_for > 0, max(0, self.down_for - 1)
        if down:
            return 403, {}, b"forbidden by the proxy"
        if (match := REVISION_RE.fullmatch(path)) and (key := (match.group(1)[:-1], match.group(2),
                                                                  match.group(3))) in self.branches:
            info = {"id": key[1], "sha": self.branches[key]}
            return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()
        if match := TREE_RE.fullmatch(path):
            repo_type, repo_id, commit = match.group(1)[:-1], match.group(2), match.group(3)
            file_path = None
        elif match := RESOLVE_RE.fullmatch(path):
            repo_type = "dataset" if match.group(1) else "model"
            repo_id, commit, file_path = match.group(2), match.group(3), match.group(4)
        else:
            return 404, {}, b"not found"
        if not any(key[:2] == (repo_type, repo_id) for key in self.repos):
            return _error(404, "RepoNotFound", f"Repository {repo_id} not found")
        required = self.tokens.get((repo_type, repo_id))
        if required is not None:
            sent = handler.headers.get("Authorization")
            if sent is None:
                return _error(401, "GatedRepo", f"Access to {repo_type} {repo_id} is restricted. You must have "
                                                "access to it and be authenticated to access it. Please log in.")
            if sent != f"Bearer {required}":
                return _error(403, "GatedRepo", f"Access to {repo_type} {repo_id} is restricted and you are not "
                                                "in the authorized list.")
        files = self.repos.get((repo_type, repo_id, commit))
        if files is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {commit}")
        if file_path is None:
            return 200, {"Content-Type": "application/json"}, json.dumps(_tree(files)).encode()
        if file_path not in files:
            return _error(404, "EntryNotFound", f"{file_path} does not exist on {commit}", commit)
        data = files[file_path]
        if is_lfs(file_path, data):
            sha256 = hashlib.sha256(data).hexdigest()
            return 302, {"Location": f"{self.cdn_url}/lfs/{sha256}", "X-Repo-Commit": commit,
                         "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data))}, b""
        return 200, {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"',
                     "Content-Type": "application/octet-stream"}, data


def _error(status: int, code: str, message: str, commit: str | None = None) -> tuple[int, dict, bytes]:
    """An error as the hub words it: huggingface_hub picks its exception class from X-Error-Code."""
    headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
    if commit is not None:
        headers["X-Repo-Commit"] = commit
    return status, headers, json.dumps({"error": message}).encode()


def _tree(files: Files) -> list[dict]:
    """The recursive tree listing: folders, then files with their git blob id and, for LFS, the
    content's sha256 and size."""
    folders = sorted({"/".join(path.split("/")[:i]) for path in files for i in range(1, path.count("/") + 1)})
    entries = [{"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0, "path": folder}
               for folder in folders]
    for path, data in sorted(files.items()):
        if is_lfs(path, data):
            pointer = lfs_pointer(data)
            entries.append({"type": "file", "oid": git_blob_id(pointer), "size": len(data), "path": path,
                            "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                    "pointerSize": len(pointer)}})
        else:
            entries.append({"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path})
    return entries
