"""What bench_peer.py and check_peer.py share: one OpenAI-compatible server at a time.

A `Server` is TurboSpark's `turbospark serve` or llama.cpp's `llama-server`, started on a free
127.0.0.1 port and stopped again (never both at once: on 2 cores the idle one's spinning workers
would be measured too), its RSS with its children, requests streamed through the official
`openai` client and timed as that client sees each chunk arrive, prompts of a given token
length, and the machine line every report starts with.

The harness must not care which engine runs inside `turbospark serve`: it reads only the
OpenAI wire (plus the `timings` object both servers add), and offers our server a thread or
context flag only where `serve --help` lists one.
"""

from __future__ import annotations

import datetime
import functools
import http.client
import json
import os
import platform
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

OURS, THEIRS = "TurboSpark", "llama-server"


# --- the two servers' command lines ------------------------------------------------------


@dataclass
class ServerSpec:
    """How to start one server: its argv and environment, and what could not be matched."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    port: int = 0

    def describe(self) -> str:
        """The command line as a user would type it (environment first)."""
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A measured child's environment: a user's, so Python's bytecode is kept (with
    PYTHONDONTWRITEBYTECODE set, as on some CI machines and here, every Python child compiled
    its imports again and each start paid for it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra or {})
    return env


def busy_note() -> str | None:
    """A warning when other work shares the CPUs (the 1-minute load average over a quarter of
    the cores): llama.cpp's spinning thread barriers lose several times their speed then. Read it
    BEFORE measuring: afterwards the average holds the benchmark's own load."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 0.25 * cores:
        return (f"load average {load:.2f} on {cores} CPUs at the start: other work shared the cores, "
                "the figures may not be a measurement (run again on a quiet machine)")
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def turbospark_command(arg: str | None) -> list[str]:
    """`--turbospark CMD` split as a shell would; default: the `turbospark` beside sys.executable
    (the venv's script; sys.executable is not resolved, a venv's python is a symlink)."""
    if arg:
        return shlex.split(arg)
    return [str(Path(sys.executable).with_name("turbospark"))]


@functools.lru_cache(maxsize=None)
def help_flags(argv: tuple[str, ...]) -> frozenset[str]:
    """The flags a command's --help lists (empty when it cannot run)."""
    try:
        out = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", out.stdout + out.stderr))


def _first(flags: frozenset[str], *names: str) -> str | None:
    return next((n for n in names if n in flags), None)


def ours_engine_args(cmd: list[str], sub: str, threads: int, ctx: int) -> tuple[list[str], dict[str, str], list[str]]:
    """(flags, env, notes) that give `turbospark SUB` these threads and this context.

    TURBOSPARK_THREADS is always set (a `turbospark` without a thread flag reads it); a
    thread or context flag is passed only when the subcommand lists one."""
    flags = help_flags((*cmd, sub))
    args: list[str] = []
    notes: list[str] = []
    if t := _first(flags, "--threads", "-t"):
        args += [t, str(threads)]
    if c := _first(flags, "--ctx-size", "--ctx", "--context", "--n-ctx", "-c"):
        args += [c, str(ctx)]
    else:
        notes.append(f"`turbospark {sub}` has no context flag: it runs at the model's own context")
    return args, {"TURBOSPARK_THREADS": str(threads)}, notes


def turbospark_spec(cmd: list[str], model: Path, threads: int, ctx: int, slots: int | None = None) -> ServerSpec:
    """`turbospark serve` on a free loopback port."""
    port = free_port()
    extra, env, notes = ours_engine_args(cmd, "serve", threads, ctx)
    argv = [*cmd, "serve", "--model", str(model), "--host", "127.0.0.1", "--port", str(port), *extra]
    if slots is not None:
        argv += ["--session-slots", str(slots)]
    return ServerSpec(OURS, argv, env, notes, port)


def llama_server_spec(path: str, model: Path, threads: int, ctx: int, parallel: int | None = None) -> ServerSpec:
    """`llama-server` on a free loopback port. With `parallel`, N slots with continuous batching
    over ONE unified KV buffer of `ctx` cells: with -np N alone each slot would get ctx/N cells
    and a 1,500-token prompt would not fit a 4096 context's 1024-cell slot."""
    port = free_port()
    argv = [path, "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "--no-webui"]
    if parallel is not None:
        argv += ["--parallel", str(parallel), "--cont-batching", "--kv-unified"]
    return ServerSpec(THEIRS, argv, {}, [], port)


# --- one running server ------------------------------------------------------------------


class Server:
    """A started server: `with Server(spec, log) as s:` waits until /health answers 200 and
    stops it (SIGTERM to its own process group, then SIGKILL) on the way out."""

    def __init__(self, spec: ServerSpec, log_path: Path, timeout: float = 900.0) -> None:
        self.spec, self.log_path, self.timeout = spec, log_path, timeout
        self.proc: subprocess.Popen | None = None
        self.ready_s = float("nan")
        self._model: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def __enter__(self) -> "Server":
        log = open(self.log_path, "ab")
        env = child_env(self.spec.env)
        t0 = time.perf_counter()
        # its own session: stop() signals this server's group only, by its id
        self.proc = subprocess.Popen(self.spec.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited ({self.proc.returncode}) before it was ready:\n"
                                   f"{self.log_tail()}\ncommand: {self.spec.describe()}")
            if self._get("/health")[0] == 200:
                break
            if time.perf_counter() - t0 > self.timeout:
                self.stop()
                raise RuntimeError(f"{self.spec.name} not ready after {self.timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.ready_s = time.perf_counter() - t0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM, 30 s to leave, then SIGKILL (its process group: any children too)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _get(self, path: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.spec.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            try:
                return resp.status, json.loads(body)
            except ValueError:
                return resp.status, None
        except OSError:
            return 0, None
        finally:
            conn.close()

    def rss_mib(self) -> float:
        """RSS of the server process summed with its children's, MiB."""
        import psutil

        p = psutil.Process(self.proc.pid)
        total = 0
        for q in [p, *p.children(recursive=True)]:
            try:
                total += q.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def n_ctx(self) -> int | None:
        """The context the server runs at: ours on /status, llama-server on /props."""
        status, doc = self._get("/status")
        if status == 200 and isinstance(doc, dict) and doc.get("n_ctx"):
            return int(doc["n_ctx"])
        status, doc = self._get("/props")
        if status == 200 and isinstance(doc, dict):
            n = (doc.get("default_generation_settings") or {}).get("n_ctx")
            return int(n) if n else None
        return None

    def client(self) -> Any:
        """A fresh official `openai` client on this server (no retries: a failure is a finding)."""
        import openai

        return openai.OpenAI(base_url=self.base_url + "/v1", api_key="none", max_retries=0, timeout=1800)

    @property
    def model(self) -> str:
        """The served model's id, as /v1/models lists it (ours refuses any other)."""
        if self._model is None:
            self._model = self.client().models.list().data[0].id
        return self._model

    def extra(self, **theirs: Any) -> dict[str, Any]:
        """llama-server's own request fields (ignore_eos, cache_prompt, ...) for it; {} for ours,
        which gets the plain OpenAI request."""
        return dict(theirs) if self.spec.name == THEIRS else {}


# --- streamed requests, timed as the client sees them -----------------------------------


@dataclass
class Stream:
    """One streamed reply: when it was sent, when each chunk with text arrived, and what the
    server said at the end (usage, timings, finish_reason)."""

    sent: float
    times: list[float] = field(default_factory=list)
    text: str = ""
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finish: str | None = None

    @property
    def tokens(self) -> int:
        """Tokens generated: the server's usage count, else the chunks with text."""
        n = (self.usage or {}).get("completion_tokens")
        return int(n) if n else len(self.times)

    @property
    def prompt_tokens(self) -> int:
        return int((self.usage or {}).get("prompt_tokens") or 0)

    @property
    def cached_tokens(self) -> int:
        return int(((self.usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0)

    @property
    def ttft(self) -> float:
        """Seconds from sending the request to the first chunk with text."""
        return self.times[0] - self.sent if self.times else float("nan")

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the first-to-last chunk span."""
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        return (self.tokens - 1) / span if span > 0 else float("nan")

    def max_gap(self, after: float = 0.0) -> float:
        """The longest wait between two consecutive chunks, counting those arriving after `after`."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:]) if b >= after]
        return max(gaps) if gaps else float("nan")


def _dump(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    return obj if isinstance(obj, dict) else obj.model_dump()


def stream(server: Server, *, prompt: str | None = None, messages: list[dict] | None = None,
           max_tokens: int, extra: dict[str, Any] | None = None,
           on_chunk: Callable[[Stream], None] | None = None, client: Any = None) -> Stream:
    """A greedy streamed completion (`prompt`: /v1/completions) or chat (`messages`), with
    include_usage; `on_chunk` is called after each chunk with text."""
    client = client or server.client()
    common = dict(model=server.model, max_tokens=max_tokens, temperature=0, stream=True,
                  stream_options={"include_usage": True}, extra_body=extra or None)
    out = Stream(sent=time.perf_counter())
    if messages is not None:
        chunks = client.chat.completions.create(messages=messages, **common)
    else:
        chunks = client.completions.create(prompt=prompt, **common)
    for chunk in chunks:
        now = time.perf_counter()
        for choice in chunk.choices or ():
            piece = getattr(choice, "text", None) if messages is None else choice.delta.content
            if piece:
                out.times.append(now)
                out.text += piece
                if on_chunk is not None:
                    on_chunk(out)
            if choice.finish_reason:
                out.finish = choice.finish_reason
        if chunk.usage is not None:
            out.usage = _dump(chunk.usage)
        timings = (chunk.model_extra or {}).get("timings")
        if timings:
            out.timings = timings
    return out


def complete(server: Server, *, messages: list[dict] | None = None, prompt: str | None = None,
             max_tokens: int, extra: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A greedy non-streamed chat or completion; the whole response body as a dict (timings kept)."""
    client = server.client()
    common = dict(model=server.model, max_tokens=max_tokens, temperature=0, extra_body=extra or None, **kw)
    if messages is not None:
        resp = client.chat.completions.create(messages=messages, **common)
    else:
        resp = client.completions.create(prompt=prompt, **common)
    return resp.model_dump()


def reread_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, of them evaluated again) of one response: llama.cpp's `timings.prompt_n`
    (both servers send it), else usage's prompt_tokens less cached_tokens."""
    usage = body.get("usage") or {}
    total = int(usage.get("prompt_tokens") or 0)
    timings = body.get("timings") or {}
    if "prompt_n" in timings:
        return total, int(timings["prompt_n"])
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return total, total - cached


# --- prompts ----------------------------------------------------------------------------

_WORDS = ("time year people way day man thing woman life child world school state family student "
          "group country problem hand part place case week company system program question work "
          "government number night point home water room mother area money story fact month lot "
          "right study book eye job word business issue side kind head house service friend father "
          "power hour game line end member law car city community name president team minute idea "
          "kid body information back parent face others level office door health person art war "
          "history party result change morning reason research girl guy moment air teacher force "
          "education river garden window market letter bridge island mountain engine signal harbor "
          "lantern meadow copper violet thunder orchard canyon ribbon marble falcon compass").split()


class TokenCounter:
    """Counts a raw prompt's tokens with the model's own tokenizer (llama-cpp-python, vocab only,
    BOS included as both servers add it); without llama_cpp, about 4 characters a token."""

    def __init__(self, model: Path) -> None:
        saved = os.dup(2)
        try:
            from llama_cpp import Llama

            # its C side warns on stderr even with verbose=False (a vocab-only context)
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 2)
                self._llm = Llama(model_path=str(model), vocab_only=True, verbose=False)
        except Exception:  # noqa: BLE001 - any failure: estimate instead
            self._llm = None
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    def __call__(self, text: str) -> int:
        if self._llm is None:
            return 1 + len(text) // 4
        return len(self._llm.tokenize(text.encode(), add_bos=True, special=False))


def filler(count: TokenCounter, n_tokens: int, seed: int) -> str:
    """A prompt of about `n_tokens` tokens of seeded words, opening with a seed-unique line so
    that no two seeds share a prefix beyond BOS (no prefix cache helps either server)."""
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(2 * n_tokens + 64)]
    head = f"Record {seed * 2654435761 % 2**32:08x}. Read the notes below, then sum them up.\n"

    def text(k: int) -> str:
        body = " ".join(w.capitalize() + "." if i % 11 == 10 else w for i, w in enumerate(words[:k]))
        return head + body + "\nSummary:"

    lo, hi = 0, len(words)
    while lo < hi:  # the fewest words reaching n_tokens
        mid = (lo + hi) // 2
        if count(text(mid)) < n_tokens:
            lo = mid + 1
        else:
            hi = mid
    return text(lo)


def counting_prompt(start: int) -> str:
    """A raw prompt that a model continues for hundreds of tokens without ending: counting."""
    return f"Numbers from {start} to 100000, one per line:\n{start}\n{start + 1}\n{start + 2}\n"


# --- the machine ------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                              text=True, timeout=5).stdout.strip() or platform.machine()
    except OSError:
        return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_line(llama_server: str | None = None) -> str:
    """CPU model, cores, RAM, OS, Python, llama-cpp-python (and llama-server's build), the date
    and the load average: the header of every report."""
    import psutil

    phys, logical = psutil.cpu_count(logical=False), psutil.cpu_count()
    parts = [_cpu_model(), f"{phys or '?'} cores / {logical} threads",
             f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM", platform.platform(terse=True),
             f"Python {platform.python_version()}", f"llama-cpp-python {_version('llama-cpp-python')}"]
    if llama_server:
        try:
            out = subprocess.run([llama_server, "--version"], capture_output=True, text=True, timeout=30)
            m = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", out.stdout + out.stderr)
            if m:
                parts.append(f"llama-server {m.group(1)} (commit {m.group(3)})")
        except OSError:
            pass
    parts.append(datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"))
    parts.append(f"load avg {os.getloadavg()[0]:.2f}")
    return ", ".join(parts)


def run_threads(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run the callables at once (one thread each) and return their results in order; the
    first exception is raised after all have ended."""
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
