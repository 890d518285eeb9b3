"""The API server: one aiohttp application over the engine thread.

`ApiServer.start()` runs it on the CURRENT asyncio loop (`web.AppRunner(app,
handler_cancellation=True)` + `web.TCPSite`): the app's qasync loop in the window, the loop of
`asyncio.run()` in `turbospark serve`. handler_cancellation makes aiohttp cancel a handler
the moment its connection is lost, which is what lets a disconnect stop the engine mid-prefill.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from .config import ServerConfig, is_loopback
from .jobs import Engine, JobBoard
from .responder import Timing
from .routes import Routes
from .security import security_middleware


STOP_GRACE_SECONDS = 2.0  # open requests get this long to finish after their jobs are cancelled


class ApiServer:
    """Start/stop the OpenAI-compatible API on the running loop."""

    def __init__(self, engine: Engine, config: ServerConfig) -> None:
        config.check()
        self.engine = engine
        self.config = config
        self.timing = Timing(config.ping_interval, config.stall_timeout)
        self.stopping = False
        self.started_at = int(time.time())
        self.port: int | None = None
        self.board: JobBoard | None = None  # type: ignore[assignment]
        self._runner: web.AppRunner | None = None

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

    async def stop(self) -> None:
        """Stop serving: open requests are cancelled (their jobs too)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.stopping = True
        if self.board is not None:  # streams end with their finish chunk, queued jobs never start
            for job in list(self.board.live.values()):
                self.board.cancel(job, "server_stopped")
        await runner.cleanup()

    def describe(self) -> dict[str, Any]:
        """The server part of the status document."""
        c = self.config
        return {"url": self.url if self.port else None, "loopback_only": is_loopback(c.host),
                "api_key_required": bool(c.api_key), "allowed_origins": list(c.allowed_origins),
                "max_queue": c.max_queue, "prefill_chunk": c.prefill_chunk,
                "ping_interval_s": c.ping_interval, "stall_timeout_s": c.stall_timeout}
