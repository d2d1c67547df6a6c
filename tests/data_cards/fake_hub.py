"""A fake Hugging Face Hub on loopback: the HTTP endpoints huggingface_hub calls to push a dataset.

Implements repo creation, README metadata validation, preupload (upload mode
and remote oid per file), the git-LFS batch API with basic PUT transfers and
verify, the NDJSON commit endpoint and repo info, keeping repos and objects in
memory. Every request is recorded (method, path, query, authorization header,
decoded body) so tests can assert exactly what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import yaml

LFS_SUFFIXES = (".parquet", ".png")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None
    body: Any


@dataclass
class Repo:
    repo_id: str
    private: bool | None
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # path -> (oid, content)
    commits: list[dict[str, Any]] = field(default_factory=list)


class FakeHub:
    """Start with ``with FakeHub() as hub``; ``hub.url`` is the endpoint."""

    def __init__(self, fail_commit: int | None = None):
        self.requests: list[Request] = []
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.fail_commit = fail_commit  # fail the n-th commit request (1-based) once with a 500
        self._commit_requests = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def calls(self) -> list[tuple[str, str]]:
        """(method, path) of every request, in order."""
        return [(r.method, r.path) for r in self.requests]

    # ------------------------------------------------------------ endpoints
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/api/repos/create":
            repo_id = f"{body['organization']}/{body['name']}"
            if repo_id in self.repos:
                return 409, {"error": "You already created this dataset repo", "url": f"{self.url}/datasets/{repo_id}"}
            visibility = body.get("visibility")
            self.repos[repo_id] = Repo(repo_id, None if visibility is None else visibility == "private")
            return 200, {"url": f"{self.url}/datasets/{repo_id}", "name": repo_id}
        if method == "POST" and path == "/api/validate-yaml":
            return self._validate_yaml(body["content"])
        if m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/preupload/([^/]+)", path):
            repo = self.repos[m[1]]
            files = [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) else "regular",
                    "shouldIgnore": False,
                    **({"oid": repo.files[f["path"]][0]} if f["path"] in repo.files else {}),
                }
                for f in body["files"]
            ]
            return 200, {"files": files}
        if m := re.fullmatch(r"/datasets/([^/]+/[^/]+)\.git/info/lfs/objects/batch", path):
            objects = []
            for obj in body["objects"]:
                if obj["oid"] in self.lfs:
                    objects.append({"oid": obj["oid"], "size": obj["size"]})
                else:
                    actions = {
                        "upload": {"href": f"{self.url}/lfs/{obj['oid']}"},
                        "verify": {"href": f"{self.url}/lfs/verify"},
                    }
                    objects.append({"oid": obj["oid"], "size": obj["size"], "authenticated": True, "actions": actions})
            return 200, {"transfer": "basic", "objects": objects}
        if method == "PUT" and (m := re.fullmatch(r"/lfs/([0-9a-f]{64})", path)):
            if hashlib.sha256(body).hexdigest() != m[1]:
                return 400, {"error": "sha256 mismatch"}
            self.lfs[m[1]] = body
            return 200, {}
        if method == "POST" and path == "/lfs/verify":
            return (200, {}) if body["oid"] in self.lfs and len(self.lfs[body["oid"]]) == body["size"] else (404, {})
        if m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/commit/([^/]+)", path):
            self._commit_requests += 1
            if self._commit_requests == self.fail_commit:
                return 500, {"error": "Internal Error - We're working hard to fix this as soon as possible!"}
            return self._commit(self.repos[m[1]], body)
        if m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/revision/([^/]+)", path):
            repo = self.repos[m[1]]
            return 200, {
                "id": repo.repo_id,
                "sha": _head(repo),
                "private": repo.private,
                "siblings": [{"rfilename": p} for p in sorted(repo.files)],
            }
        return 404, {"error": f"fake hub: no route for {method} {path}"}

    def _validate_yaml(self, content: str) -> tuple[int, Any]:
        match = re.match(r"^---\n(.*?)\n---\n", content, re.DOTALL)
        try:
            meta = yaml.safe_load(match[1]) if match else None
        except yaml.YAMLError as e:
            return 400, {"errors": [{"message": f"invalid YAML: {e}"}]}
        if not isinstance(meta, dict):
            return 400, {"errors": [{"message": "no metadata block"}]}
        for config in meta.get("configs") or []:
            if not config.get("config_name") or not config.get("data_files"):
                return 400, {"errors": [{"message": f"bad config {config}"}]}
        return 200, {"errors": [], "warnings": []}

    def _commit(self, repo: Repo, lines: list[dict[str, Any]]) -> tuple[int, Any]:
        header = lines[0]
        assert header["key"] == "header", header
        added = []
        for line in lines[1:]:
            value = line["value"]
            if line["key"] == "file":
                content = base64.b64decode(value["content"])
                blob = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
                repo.files[value["path"]] = (blob, content)
            elif line["key"] == "lfsFile":
                if value["oid"] not in self.lfs:
                    return 422, {"error": f"LFS object {value['oid']} was not uploaded"}
                repo.files[value["path"]] = (value["oid"], self.lfs[value["oid"]])
            else:
                return 400, {"error": f"unexpected commit operation {line['key']}"}
            added.append(value["path"])
        repo.commits.append({"summary": header["value"]["summary"], "files": added})
        oid = _head(repo)
        return 200, {
            "commitUrl": f"{self.url}/datasets/{repo.repo_id}/commit/{oid}",
            "commitOid": oid,
            "pullRequestUrl": None,
        }

    # ------------------------------------------------------------ HTTP plumbing
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                raw = self._body()
                ctype = self.headers.get("Content-Type") or ""
                if "ndjson" in ctype:
                    body: Any = [json.loads(line) for line in raw.splitlines() if line.strip()]
                elif "json" in ctype:
                    body = json.loads(raw or b"null")
                else:
                    body = raw
                with hub._lock:
                    hub.requests.append(
                        Request(
                            self.command, parts.path, parse_qs(parts.query), self.headers.get("Authorization"), body
                        )
                    )
                    status, payload = hub.handle(self.command, parts.path, parse_qs(parts.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _serve

        return Handler


def _head(repo: Repo) -> str:
    return hashlib.sha1(json.dumps(repo.commits).encode()).hexdigest()
