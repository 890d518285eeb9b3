"""`turbospark serve`: the API without the window, under `asyncio.run()`.

The model loads on the engine thread while the server already answers (503 + Retry-After
until it is ready). Ctrl+C / SIGTERM stop it: open requests are cancelled, then the engine.
A model that cannot be loaded stops it too (exit status 1, the reason on one line): unlike the
window, a headless server has no way to load another one, and would only answer 503.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, Callable

from ..server.config import DEFAULT_PORT, ServerConfig
from .arg_types import float_in, int_at_least, int_in
from .progress import StderrProgress


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The serve flags (besides the shared --model / --session-slots / --kv-budget-mb)."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; any "
                   "other needs an API key)")
    p.add_argument("--port", type=int_in(0, 65535), default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = any free)")
    p.add_argument("--api-key", default=None, help="require this key (Bearer or X-Api-Key); "
                   "also TURBOSPARK_API_KEY")
    p.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="enable CORS for this browser origin (repeatable; off by default)")
    p.add_argument("--max-queue", type=int_at_least(0), default=ServerConfig.max_queue, metavar="N",
                   help="requests allowed to wait for the engine; more get 503 + Retry-After")
    p.add_argument("--prefill-chunk", type=int_at_least(1), default=ServerConfig.prefill_chunk, metavar="N",
                   help="prompt tokens per engine step (smaller = faster disconnect in prefill)")
    p.add_argument("--stall-timeout", type=float_in(0.0, low_open=True), default=ServerConfig.stall_timeout, metavar="S",
                   help="drop a streaming client that reads nothing for S seconds")
    p.add_argument("--max-stream-gap-ms", type=float_in(0.0, low_open=True), default=None, metavar="MS",
                   help="the longest pause a streaming reply gets while another request's prompt "
                   "goes in beside it (default 250; also TURBOSPARK_MAX_STREAM_GAP_MS): that "
                   "prompt's chunks ride the replies' passes, sized to fit; larger = its first "
                   "token sooner")
    p.add_argument("--allow-image-urls", action="store_true",
                   help="fetch http(s) image URLs in requests (off: images must be data: URLs; a "
                   "server that fetches what it is handed can be pointed at your network)")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """ServerConfig from the flags (ValueError when unsafe)."""
    config = ServerConfig(
        host=args.host, port=args.port,
        api_key=args.api_key or os.environ.get("TURBOSPARK_API_KEY") or None,
        allowed_origins=tuple(args.allowed_origin), max_queue=args.max_queue,
        prefill_chunk=args.prefill_chunk, stall_timeout=args.stall_timeout,
        allow_image_urls=bool(getattr(args, "allow_image_urls", False)),
    )
    config.check()
    return config


def stream_gap_of(args: argparse.Namespace, environ: Any = None) -> float | None:
    """--max-stream-gap-ms, else $TURBOSPARK_MAX_STREAM_GAP_MS, else None (the default 250 ms);
    ValueError naming the variable for a bad value."""
    flag = getattr(args, "max_stream_gap_ms", None)
    if flag is not None:
        return float(flag)
    from ..engine.chunk_budget import stream_gap_from_env

    return stream_gap_from_env(environ)


def backend_factory(model: str | None, session_slots: int, max_kv_bytes: int | None,
                    speculation: str = "off", threads: int | None = None, gpu_layers: int = -1,
                    max_context: int | None = None, cache_ram_mb: float | None = None,
                    cache_types: Any = None, mmproj: str | None = "auto",
                    max_stream_gap_ms: float | None = None) -> Callable[[], Any]:
    """Loads the GGUF (the --model flag, TURBOSPARK_MODEL, else the default) on the engine thread,
    with `speculation` ("lookup" | "off": every request's decode), llama.cpp's `threads` (None =
    the performance cores), `gpu_layers` (-1 = all, where there is a GPU) and `max_context`
    (KV cells; None = the model's context up to 4096); `cache_ram_mb`: RAM for the states of
    conversations whose slot was taken (None = 1024 MB); `cache_types`: the KV cache's
    (`model.choice.kv_cache.KVCacheTypes`; None = f16); `mmproj`: the vision projector ("auto":
    a matching mmproj*.gguf beside the model; "off"); `max_stream_gap_ms`: the longest pause of
    a streaming reply while another prompt goes in (None = 250 ms)."""

    def load() -> Any:
        from ..chat.backend import load_backend, state_cache_bytes
        from ..model.choice.kv_cache import KVCacheTypes
        from ..model.fetch import resolve_model_path

        path = resolve_model_path(model)
        if not path.exists():
            raise FileNotFoundError(f"no model file at {path} (run `turbospark model fetch`)")
        from ..engine.chunk_budget import target_gap_for

        backend = load_backend(path, session_slots=session_slots, max_kv_bytes=max_kv_bytes,
                               speculation=speculation, threads=threads, gpu_layers=gpu_layers,
                               max_context=max_context, state_cache_bytes=state_cache_bytes(cache_ram_mb),
                               cache_types=cache_types or KVCacheTypes(), mmproj=mmproj)
        if max_stream_gap_ms is not None:
            backend.chunk_budget.target_gap_seconds = target_gap_for(max_stream_gap_ms)
        return backend

    return load


class LoadOutcome:
    """Whether the model failed to load, handed from the engine thread to the server's loop:
    `fail` may come before the loop runs (a missing file fails at once) or while it serves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failure: str | None = None
        self._wake: Callable[[], None] | None = None

    def fail(self, message: str) -> None:
        with self._lock:
            self.failure = message
            wake = self._wake
        if wake is not None:
            wake()

    def on_failure(self, wake: Callable[[], None]) -> None:
        """Call `wake` (thread-safe) once the load fails; at once if it already has."""
        with self._lock:
            self._wake = wake
            failed = self.failure is not None
        if failed:
            wake()


def _report(event: Any, progress: Callable[[str, float], None] | None = None,
            outcome: LoadOutcome | None = None) -> None:
    """Backend load events to stderr (engine thread), a long load's steps through `progress`
    (the same printer as `chat`'s); a failed load also goes to `outcome`. Requests are never
    logged."""
    from ..model.choice.common import engine_label
    from ..service.events import BackendFailed, BackendProgress, BackendReady

    if isinstance(event, BackendProgress):
        if progress is not None:
            progress(event.phase, event.fraction)
    elif isinstance(event, BackendReady):
        print(f"turbospark: model ready: {event.model_info.get('file_name')} "
              f"({engine_label(event.model_info) or 'llama.cpp'}, {event.load_seconds:.1f} s, "
              f"context {event.max_context})", file=sys.stderr, flush=True)
        if event.model_info.get("vision_label"):
            print(f"turbospark: vision: {event.model_info['vision_label']}", file=sys.stderr, flush=True)
    elif isinstance(event, BackendFailed):
        print(f"turbospark: the model could not be loaded: {event.message}", file=sys.stderr, flush=True)
        if outcome is not None:
            outcome.fail(event.message)


async def serve(engine: Any, config: ServerConfig, ready: Callable[[str], None] | None = None,
                outcome: LoadOutcome | None = None) -> None:
    """Serve until SIGINT / SIGTERM, or until `outcome` says the model failed to load."""
    from ..server.app import ApiServer

    server = ApiServer(engine, config)
    await server.start()
    print(f"turbospark: OpenAI-compatible API on {server.url}/v1", file=sys.stderr, flush=True)
    if ready is not None:
        ready(server.url)
    import asyncio  # (here: every command builds serve's parser, and asyncio is ~25 ms of imports)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if outcome is not None:
        def wake() -> None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has closed: the server stopped first (Ctrl+C)
                pass

        outcome.on_failure(wake)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        await stop.wait()
    finally:
        await server.stop()


def serve_command(args: argparse.Namespace) -> int:
    """`turbospark serve`. Returns the exit code."""
    from ..chat.backend import kv_budget_bytes
    from ..model.choice.kv_cache import cache_types_of
    from ..model.choice.speculation import choose_speculation
    from ..model.choice.threads import choose_threads
    from ..model.legacy import report_once
    from ..service.engine_thread import EngineThread

    try:
        config = config_from_args(args)
        speculation = choose_speculation(getattr(args, "speculation", None)).mode  # flag > env > off
        threads = choose_threads(getattr(args, "threads", None)).count  # flag > env > cores
        cache_types = cache_types_of(args)  # flag > env > f16
        stream_gap = stream_gap_of(args)  # flag > env > 250 ms
    except ValueError as e:  # (LoadChoiceError too: a bad TURBOSPARK_THREADS / _SPECULATION)
        print(f"turbospark: {e}", file=sys.stderr)
        return 2
    leftover = report_once()
    if leftover:
        print(f"turbospark: {leftover}", file=sys.stderr)
    gpu_layers = -1 if getattr(args, "gpu_layers", None) is None else args.gpu_layers
    slots = getattr(args, "session_slots", None) or 4
    outcome = LoadOutcome()
    closing = threading.Event()  # once set, a load still under way finishes unsaid
    progress = StderrProgress()

    def report(event: Any) -> None:
        if not closing.is_set():
            _report(event, progress, outcome)

    factory = backend_factory(getattr(args, "model", None), slots,
                              kv_budget_bytes(getattr(args, "kv_budget_mb", None)), speculation,
                              threads, gpu_layers, getattr(args, "ctx_size", None),
                              getattr(args, "cache_ram", None), cache_types,
                              getattr(args, "mmproj", None) or "auto", stream_gap)
    engine = EngineThread(factory, report, max_active=slots)
    engine.start()
    try:
        import asyncio

        asyncio.run(serve(engine, config, outcome=outcome))
    except OSError as e:
        closing.set()  # no "model ready" after "cannot listen": the process is leaving
        progress.silence()  # nor a load-progress line that a timer would say later
        print(f"turbospark: cannot listen on {config.host}:{config.port}: {e}", file=sys.stderr)
        return 1
    finally:
        closing.set()
        progress.silence()
        engine.shutdown()
    if outcome.failure is not None:
        print("turbospark: stopped: no model to serve", file=sys.stderr)
        return 1
    return 0
