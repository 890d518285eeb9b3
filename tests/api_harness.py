"""A real API server over the real default model, on its own asyncio loop thread, plus the
raw-socket and status-route helpers the server tests share (not imported by the app)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from turbospark_app.server import ApiServer, ServerConfig
from turbospark_app.cli.serve_command import backend_factory
from turbospark_app.service.engine_thread import EngineThread


@dataclass
class ApiHarness:
    engine: EngineThread
    loop: asyncio.AbstractEventLoop
    servers: list[ApiServer] = field(default_factory=list)

    def start(self, **config: Any) -> ApiServer:
        """One more server over the same engine (port 0 = a free one)."""
        server = ApiServer(self.engine, ServerConfig(port=0, **config))
        asyncio.run_coroutine_threadsafe(server.start(), self.loop).result(10)
        self.servers.append(server)
        return server

    def stop(self, server: ApiServer) -> None:
        asyncio.run_coroutine_threadsafe(server.stop(), self.loop).result(10)

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the server loop (board records are the loop's)."""
        async def call() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)


@pytest.fixture(scope="module")
def api(default_model_path):
    """An ApiHarness; `api.servers[0]` is a default server (loopback, no key), on llama.cpp."""
    engine = EngineThread(backend_factory(str(default_model_path), 4, None),
                          lambda e: None, max_active=2)
    engine.start()
    deadline = time.monotonic() + 120
    while engine.state != "ready":
        assert engine.state != "failed" and time.monotonic() < deadline, "model did not load"
        time.sleep(0.05)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="api-test-loop", daemon=True)
    thread.start()
    harness = ApiHarness(engine, loop)
    harness.start(stall_timeout=2.0)
    yield harness
    for server in harness.servers:
        harness.stop(server)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert engine.shutdown(10)


def run_fresh(main: Callable[[], Any]) -> Any:
    """`asyncio.run(main())` on a thread of its own: a Qt test's qasync loop may still be
    registered as running on this one."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = asyncio.run(main())
        except BaseException as e:  # re-raised on the test's thread
            out["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def openai_client(server: ApiServer, api_key: str = "unused", **kw: Any):
    """The official `openai` client, no retries (a retried 5xx would hide a bug)."""
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0, timeout=120, **kw)


# -- raw HTTP ---------------------------------------------------------------------------------


def raw_request(server: ApiServer, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None, rcvbuf: int | None = None) -> socket.socket:
    """Open a socket and send one HTTP/1.1 request; the caller reads (or not) and closes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", server.port))
    head = {"Host": f"127.0.0.1:{server.port}", "Content-Length": str(len(body)),
            "Connection": "close"}
    if body:
        head["Content-Type"] = "application/json"
    head.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
    sock.sendall("\r\n".join(lines).encode() + body)
    return sock


def post_json(server: ApiServer, path: str, payload: dict[str, Any], **kw: Any) -> socket.socket:
    return raw_request(server, "POST", path, json.dumps(payload).encode(), **kw)


def read_until(sock: socket.socket, marker: bytes, timeout: float = 60.0) -> bytes:
    """Read until `marker` has arrived; returns everything read."""
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    return data


def read_all(sock: socket.socket, timeout: float = 120.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while part := sock.recv(65536):
        data += part
    sock.close()
    return data


def http(server: ApiServer, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One whole request: (status, headers lower-cased, body)."""
    raw = read_all(raw_request(server, method, path, body, headers))
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if hdrs.get("transfer-encoding") == "chunked":
        rest = _unchunk(rest)
    return status, hdrs, rest


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


def sse_events(body: bytes) -> list[bytes]:
    """The SSE events of a stream body (comments included), without the trailing blank line."""
    return [e for e in body.split(b"\n\n") if e]


# -- the status route -------------------------------------------------------------------------


def status(server: ApiServer) -> dict[str, Any]:
    code, _, body = http(server, "GET", "/status")
    assert code == 200, body
    return json.loads(body)


def last_job_number(server: ApiServer) -> int:
    doc = status(server)
    rows = doc["active"] + doc["queued"] + doc["recent"]
    return max((r["job"] for r in rows), default=0)


def wait_job(server: ApiServer, pred: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
    """Poll /status until a job row satisfies `pred`; return it."""
    deadline = time.monotonic() + timeout
    while True:
        doc = status(server)
        for row in doc["active"] + doc["queued"] + doc["recent"]:
            if pred(row):
                return row
        assert time.monotonic() < deadline, f"no such job; status: {json.dumps(doc)[:2000]}"
        time.sleep(0.05)


def long_prompt(n_words: int = 1700) -> str:
    """About 2,000 tokens of text that does not repeat."""
    words = [f"item{i} of the list is {i * 7919 % 1000}" for i in range(n_words // 6)]
    return "Summarize this list: " + ", ".join(words)
