"""The API server: one aiohttp application over the engine thread.

`ApiServer.start()` runs it on the CURRENT asyncio loop (`web.AppRunner(app,
handler_cancellation=True)` + `web.TCPSite`): the app's qasync loop in the window, the loop of
`asyncio.run()` in `turbospark serve`. handler_cancellation makes aiohttp cancel a handler
the moment its connection is lost, which is what lets a disconnect stop the engine mid-prefill.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import time
from typing import Any

from aiohttp import web

from .config import ServerConfig, is_loopback
from .embeddings import EmbedderFactory, EmbeddingsRoute
from .jobs import Engine, JobBoard
from .responder import Timing
from .routes import Routes
from .security import security_middleware


STOP_GRACE_SECONDS = 2.0  # open requests get this long to finish after their jobs are cancelled
LAG_PROBE_SECONDS = 0.1  # how often the event loop's lateness is sampled (the GUI's, in the app)
LAG_SAMPLES = 600  # the last minute


class ApiServer:
    """Start/stop the OpenAI-compatible API on the running loop."""

    def __init__(self, engine: Engine, config: ServerConfig,
                 embedder: EmbedderFactory | None = None) -> None:
        """`embedder`: opens the embedding model /v1/embeddings runs (default: the documents'
        embedder, opened on the first request)."""
        config.check()
        self.embeddings = EmbeddingsRoute(embedder)
        self.engine = engine
        self.config = config
        self.timing = Timing(config.ping_interval, config.stall_timeout)
        self.stopping = False
        self.started_at = int(time.time())
        self.port: int | None = None
        self.board: JobBoard | None = None  # type: ignore[assignment]
        self._runner: web.AppRunner | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self.loop_lag: collections.deque[float] = collections.deque(maxlen=LAG_SAMPLES)

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}"

    def build_app(self) -> web.Application:
        """The aiohttp application (routes + safe-default middleware)."""
        app = web.Application(client_max_size=self.config.max_body_bytes,
                              middlewares=[security_middleware(self.config)])
        Routes(self).add_to(app)
        self.embeddings.add_to(app)
        return app

    async def start(self) -> None:
        """Bind and serve (OSError when the port is taken)."""
        if self._runner is not None:
            return
        self.stopping = False
        self.board = JobBoard(self.engine, asyncio.get_running_loop())
        # access_log=None: nothing about requests is logged, prompts least of all.
        runner = web.AppRunner(self.build_app(), handler_cancellation=True, access_log=None,
                               shutdown_timeout=STOP_GRACE_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.config.host, self.config.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        server = site._server  # the asyncio Server: the real port when 0 was asked
        sockets = getattr(server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else self.config.port
        self._runner = runner
        self._lag_task = asyncio.get_running_loop().create_task(self._probe_lag())

    async def _probe_lag(self) -> None:
        """Sample how late the loop wakes up: if HTTP work stalled the loop (the GUI's, in the
        app), it would show here (status route: loop_lag_ms)."""
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            self.loop_lag.append(max(0.0, loop.time() - t0 - LAG_PROBE_SECONDS))

    def halt(self) -> None:
        """The synchronous part of stopping: every job cancelled (streams end with their finish
        chunk, queued jobs never start), the lag probe ended. `stop()` then closes the sockets."""
        self.stopping = True
        if self._lag_task is not None:
            self._lag_task.cancel()
            self._lag_task = None
        if self.board is not None:
            for job in list(self.board.live.values()):
                self.board.cancel(job, "server_stopped")

    async def stop(self) -> None:
        """Stop serving: open requests are cancelled (their jobs too)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.halt()
        await runner.cleanup()

    def describe(self) -> dict[str, Any]:
        """The server part of the status document."""
        c = self.config
        lag = sorted(self.loop_lag)
        lag_ms = None if not lag else {
            "p50": round(statistics.median(lag) * 1000, 2),
            "p99": round(lag[min(len(lag) - 1, int(0.99 * len(lag)))] * 1000, 2),
            "max": round(lag[-1] * 1000, 2), "samples": len(lag)}
        return {"url": self.url if self.port else None, "loopback_only": is_loopback(c.host),
                "loop_lag_ms": lag_ms, "api_key_required": bool(c.api_key), "allowed_origins": list(c.allowed_origins),
                "max_queue": c.max_queue, "prefill_chunk": c.prefill_chunk,
                "ping_interval_s": c.ping_interval, "stall_timeout_s": c.stall_timeout}
