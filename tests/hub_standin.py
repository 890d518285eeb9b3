"""A local stand-in for the Hugging Face Hub (the real one is unreachable here), speaking the
subset of its HTTP API that huggingface_hub (2.x, httpx) uses, with the real API's shapes:

    GET  /api/models?search=&filter=gguf&sort=downloads&limit=&expand=...   model search
    GET  /api/models/{owner}/{name}[/revision/{rev}]?expand=...             one repo (gguf field)
    GET  /api/models/{owner}/{name}/tree/{rev}[/{path}]?recursive=True      files, sizes, lfs sha256
    HEAD /{owner}/{name}/resolve/{rev}/{path}   302 to the file store on ANOTHER host name
         (localhost vs 127.0.0.1), with X-Repo-Commit, X-Linked-Etag, X-Linked-Size, ETag, as
         the Hub answers for LFS files (huggingface_hub reads the metadata off the 302)
    GET  the same: the same 302; the store serves the bytes, with Range requests (206)

Unknown repos answer 404 with `X-Error-Code: RepositoryNotFound`. Files are served from disk
(the default model is 98 MB). Every request is logged (method, path, query, headers) and the
bytes each file's body carried are counted; `cut_once[path] = fraction` makes the next GET of
that file close its connection after that fraction of the file; `corrupt[path]` serves other
bytes than the sha256 the tree lists; `slow[path] = seconds per MiB` paces a body.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

_CHUNK = 1 << 16


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class StandinFile:
    path: str  # in the repo
    source: Path  # on disk
    sha256: str = ""
    lfs: bool = True

    def __post_init__(self) -> None:
        self.sha256 = self.sha256 or sha256_of(self.source)

    @property
    def size(self) -> int:
        return self.source.stat().st_size

    @property
    def git_oid(self) -> str:
        return hashlib.sha1(f"blob {self.path} {self.sha256}".encode()).hexdigest()


@dataclass
class StandinRepo:
    repo_id: str
    files: list[StandinFile]
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2026-11-01T00:00:00.000Z"
    gguf: dict[str, Any] | None = None  # the Hub's `gguf` field; None: the Hub has none
    gated: bool | str = False
    sha: str = ""

    def __post_init__(self) -> None:
        self.sha = self.sha or hashlib.sha1(self.repo_id.encode()).hexdigest()

    def file(self, path: str) -> StandinFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass
class HubStandin:
    repos: dict[str, StandinRepo] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)  # repo path -> body bytes sent
    cut_once: dict[str, float] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    slow: dict[str, float] = field(default_factory=dict)
    port: int = 0
    bodies: int = 0  # file bodies being sent now

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no body is being sent (a cancelled client's stream ends server-side a
        moment later), so `served` counts only what comes next."""
        deadline = time.monotonic() + timeout
        while self.bodies and time.monotonic() < deadline:
            time.sleep(0.05)

    def add(self, repo: StandinRepo) -> StandinRepo:
        self.repos[repo.repo_id] = repo
        return repo

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> str:  # another host name: huggingface_hub does not follow it on HEAD
        return f"http://localhost:{self.port}"

    def start(self) -> "HubStandin":
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def paths_requested(self, prefix: str = "") -> list[str]:
        return [p for _m, p, _q, _h in self.requests if p.startswith(prefix)]


def _iso(ts: str) -> str:
    return ts


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandin
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ----------------------------------------------------------------------------

    def _json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _not_found(self, code: str, message: str) -> None:
        self._json({"error": message}, 404, {"X-Error-Code": code, "X-Error-Message": message})

    def _route(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        path = unquote(url.path)
        self.hub.requests.append((self.command, path, query, {k.lower(): v for k, v in self.headers.items()}))
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "models"]:
            if len(parts) == 2:
                return self._search(query)
            repo = self.hub.repos.get("/".join(parts[2:4]))
            if repo is None:
                return self._not_found("RepoNotFound", "Repository not found")
            rest = parts[4:]
            if not rest or rest[0] == "revision":
                return self._model(repo, query)
            if rest[0] == "tree":
                return self._tree(repo, rest[1] if len(rest) > 1 else "main", "/".join(rest[2:]))
        if parts[:1] == ["store"] and len(parts) >= 4:
            repo = self.hub.repos.get("/".join(parts[1:3]))
            f = repo.file("/".join(parts[3:])) if repo else None
            if f is None:
                return self._not_found("EntryNotFound", "no such object")
            return self._bytes(f)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self.hub.repos.get("/".join(parts[:2]))
            if repo is None:
                return self._not_found("RepoNotFound", "Repository not found")
            if parts[3] not in ("main", repo.sha):
                return self._not_found("RevisionNotFound", "Invalid rev id")
            f = repo.file("/".join(parts[4:]))
            if f is None:
                return self._not_found("EntryNotFound", "Entry not found")
            if repo.gated and not self.headers.get("Authorization", "").startswith("Bearer hf_"):
                message = f"Access to model {repo.repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
                return self._json({"error": message}, 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": message})
            return self._resolve(repo, f)
        self._not_found("NotFound", f"no route {path}")

    do_GET = _route
    do_HEAD = _route

    # -- the API -----------------------------------------------------------------------------

    def _expanded(self, repo: StandinRepo, expand: list[str]) -> dict[str, Any]:
        full = {"downloads": repo.downloads, "likes": repo.likes, "lastModified": repo.last_modified,
                "gated": repo.gated, "sha": repo.sha, "tags": ["gguf"],
                "siblings": [{"rfilename": f.path} for f in repo.files]}
        if repo.gguf is not None:
            full["gguf"] = repo.gguf
        out = {"_id": repo.sha[:24], "id": repo.repo_id}
        keys = expand or ["downloads", "likes", "lastModified", "gated", "sha", "tags", "siblings", "gguf"]
        out.update({k: full[k] for k in keys if k in full})
        return out

    def _search(self, query: dict[str, list[str]]) -> None:
        text = (query.get("search") or [""])[0].lower()
        filters = query.get("filter") or []
        hits = [r for r in self.hub.repos.values()
                if text in r.repo_id.lower() and ("gguf" not in filters or any(f.path.endswith(".gguf") for f in r.files))]
        sort = (query.get("sort") or ["downloads"])[0]
        key = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
               "lastModified": lambda r: r.last_modified}.get(sort, lambda r: r.downloads)
        hits.sort(key=key, reverse=True)
        limit = int((query.get("limit") or ["1000"])[0])
        self._json([self._expanded(r, query.get("expand") or []) for r in hits[:limit]])

    def _model(self, repo: StandinRepo, query: dict[str, list[str]]) -> None:
        self._json(self._expanded(repo, query.get("expand") or []))

    def _tree(self, repo: StandinRepo, rev: str, under: str) -> None:
        if rev not in ("main", repo.sha):
            return self._not_found("RevisionNotFound", "Invalid rev id")
        out: list[dict[str, Any]] = []
        folders: set[str] = set()
        for f in repo.files:
            if under and not f.path.startswith(under + "/"):
                continue
            for i in range(1, f.path.count("/") + 1):
                folders.add("/".join(f.path.split("/")[:i]))
            entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            out.append(entry)
        out += [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                for d in sorted(folders)]
        self._json(out)

    def _resolve(self, repo: StandinRepo, f: StandinFile) -> None:
        headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{f.git_oid}"', "Accept-Ranges": "bytes"}
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size),
                            "Location": f"{self.hub.store}/store/{repo.repo_id}/{f.path}?sig=standin"})
            self.send_response(302)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._bytes(f, headers)

    def _bytes(self, f: StandinFile, extra: dict[str, str] | None = None) -> None:
        size = f.size
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else 0
            end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{f.sha256}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        self.hub.bodies += 1
        try:
            self._body(f, start, end, size)
        finally:
            self.hub.bodies -= 1

    def _body(self, f: StandinFile, start: int, end: int, size: int) -> None:
        cut = self.hub.cut_once.pop(f.path, None)
        stop_at = int(size * cut) if cut is not None else None
        pace = self.hub.slow.get(f.path, 0.0)
        pos = start
        with f.source.open("rb") as src:
            src.seek(start)
            while pos <= end:
                n = min(_CHUNK, end - pos + 1)
                if stop_at is not None and pos + n > stop_at:
                    n = max(stop_at - pos, 0)
                chunk = src.read(n)
                if f.path in self.hub.corrupt:
                    chunk = bytes(b ^ 0x5A for b in chunk)
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    break
                self.hub.served[f.path] = self.hub.served.get(f.path, 0) + len(chunk)
                pos += len(chunk)
                if stop_at is not None and pos >= stop_at:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the connection drops mid-body
                    return
                if pace:
                    time.sleep(pace * len(chunk) / (1 << 20))


def gguf_facts(path: Path) -> dict[str, Any]:
    """The Hub's `gguf` field for a file, as the Hub computes it from the header."""
    from turbospark_app.model.gguf.header import read_header

    h = read_header(path)
    arch = h.value("general.architecture")
    return {"total": int(sum(t.n_elements for t in h.tensors)), "architecture": arch,
            "context_length": int(h.value(f"{arch}.context_length", 0)),
            "bos_token": "<s>", "eos_token": "</s>"}


def now_iso(offset_days: int = 0) -> str:
    ts = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp() - offset_days * 86400
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def standard_hub(folder: Path, default_model: Path) -> HubStandin:
    """The stand-in with the repos the catalog tests use:

    HuggingFaceTB/SmolLM2-135M-Instruct-GGUF  the default model (Q4_1), the Hub's gguf metadata
    turbospark-test/tiny-llama-GGUF           tiny models written here (Q8_0, Q4_K_M, and a split
                                              F16 in a folder), NO gguf metadata: the header is read
    turbospark-test/tiny-vision-GGUF          a tiny model + mmproj-F16.gguf
    turbospark-test/brand-new-arch-GGUF       an architecture llama.cpp does not run
    turbospark-test/gated-GGUF                a gated repo: its files need a token (401 GatedRepo)
    """
    from tiny_gguf import write_tiny_gguf

    folder.mkdir(parents=True, exist_ok=True)
    tiny, tiny2, proj, alien = (folder / n for n in ("tiny-q8.gguf", "tiny-other.gguf", "proj.gguf", "alien.gguf"))
    write_tiny_gguf(tiny, seed=1)
    write_tiny_gguf(tiny2, seed=2)
    write_tiny_gguf(proj, seed=3)
    write_tiny_gguf(alien, arch="brand-new-arch")
    hub = HubStandin()
    hub.add(StandinRepo("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
                        [StandinFile("smollm2-135m-instruct-q4_1.gguf", default_model),
                         StandinFile("README.md", _text(folder / "README.md", "# SmolLM2\n"), lfs=False)],
                        downloads=52000, likes=40, last_modified=now_iso(90), gguf=gguf_facts(default_model)))
    hub.add(StandinRepo("turbospark-test/tiny-llama-GGUF",
                        [StandinFile("tiny-llama-Q8_0.gguf", tiny),
                         StandinFile("tiny-llama-Q4_K_M.gguf", tiny2),
                         # a split model in a folder (the second shard's bytes only need to arrive)
                         StandinFile("F16/tiny-llama-F16-00002-of-00002.gguf", _blob(folder / "shard2", 2_500_000)),
                         StandinFile("F16/tiny-llama-F16-00001-of-00002.gguf", tiny2)],
                        downloads=12, likes=1, last_modified=now_iso(1)))
    hub.add(StandinRepo("turbospark-test/tiny-vision-GGUF",
                        [StandinFile("tiny-vision-Q8_0.gguf", tiny), StandinFile("mmproj-F16.gguf", proj)],
                        downloads=300, likes=3, last_modified=now_iso(10), gguf=gguf_facts(tiny)))
    hub.add(StandinRepo("turbospark-test/brand-new-arch-GGUF", [StandinFile("alien-Q8_0.gguf", alien)],
                        downloads=5, last_modified=now_iso(5)))
    hub.add(StandinRepo("turbospark-test/gated-GGUF", [StandinFile("gated-Q8_0.gguf", tiny2)],
                        downloads=2, last_modified=now_iso(20), gguf=gguf_facts(tiny2), gated="manual"))
    return hub


def _blob(path: Path, size: int) -> Path:
    path.write_bytes(bytes(range(256)) * (size // 256))
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


if __name__ == "__main__":  # a stand-in for manual runs and the screenshot tool: FOLDER DEFAULT_MODEL
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    hub = standard_hub(Path(sys.argv[1]), Path(sys.argv[2]))
    hub.slow["smollm2-135m-instruct-q4_1.gguf"] = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    hub.start()
    print(hub.endpoint, flush=True)
    threading.Event().wait()
