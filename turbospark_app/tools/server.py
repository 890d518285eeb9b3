"""One MCP server: a long-lived asyncio task on the app's loop owns the SDK's client.

The SDK's client must be entered and left in the same task (anyio cancel scopes), so a
supervisor task does `async with Client(...)`, lists the tools, and then only waits to be told
to stop; calls are made from the callers' own tasks on the open session (the SDK allows it).
A cancelled call (Stop) sends MCP's cancellation notification (the SDK does when the awaiting
task is cancelled); a server that ignores it is not killed, its late answer is dropped.
A server that dies is marked failed, its stderr tail kept for the message, and started again
on the next call. Its stderr goes to `<cache>/logs/mcp-<name>.log`, never to the console;
arguments and results are never logged.

A stdio server's environment is exactly its entry's `env` + PATH (the app's and the login
shell's) + HOME: on POSIX the command runs under `env -i` (the SDK would otherwise add LOGNAME,
SHELL, TERM, USER).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .config import ServerEntry
from .shell_path import resolve_command, search_path

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 20.0
STOP_TIMEOUT = 6.0  # the SDK's own shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL

STOPPED, STARTING, READY, FAILED = "stopped", "starting", "ready", "failed"


class ServerFailed(RuntimeError):
    """The server could not be started or died; the message says why (its stderr tail)."""


@dataclass(frozen=True)
class ToolInfo:
    """A tool as the server lists it."""

    name: str
    description: str
    schema: dict[str, Any]
    read_only: bool = False


@dataclass
class _Running:
    task: asyncio.Task[None]
    ready: asyncio.Future[list[ToolInfo]]
    stop: asyncio.Event
    client: Any = None
    started: float = field(default_factory=time.monotonic)


def logs_dir() -> Path:
    from ..host.folders import cache_subdir

    return cache_subdir("logs")


def stdio_launch(entry: ServerEntry, path: str | None = None) -> tuple[str, list[str], dict[str, str]]:
    """(command, args, env) that run the entry with only its env + PATH + HOME (see the module
    docstring); CommandNotFound naming the PATH searched."""
    path = search_path() if path is None else path
    program = resolve_command(entry.command or "", path)
    env = {"PATH": path, "HOME": os.environ.get("HOME", str(Path.home())), **dict(entry.env)}
    if sys.platform == "win32":
        return program, list(entry.args), env
    pairs = [f"{k}={v}" for k, v in env.items()]
    return "/usr/bin/env", ["-i", *pairs, program, *entry.args], env


def _tail(path: Path, since: int, lines: int = 6) -> str:
    try:
        with path.open("rb") as f:
            f.seek(since)
            text = f.read()[-4000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class McpServer:
    """One configured server (see the module docstring). Use from the event loop's thread."""

    def __init__(self, entry: ServerEntry, *, log_dir: Path | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 on_change: Callable[["McpServer"], None] | None = None,
                 transport: Any = None) -> None:
        """`transport`: what the SDK's Client connects to instead of the entry's command / URL
        (tests pass an in-process `MCPServer`)."""
        self.entry = entry
        self.state = STOPPED
        self.detail = ""
        self.tools: list[ToolInfo] = []
        self.connect_timeout = connect_timeout
        self.on_change = on_change
        self._transport = transport
        self._log_dir = log_dir
        self._running: _Running | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def log_path(self) -> Path:
        return (self._log_dir or logs_dir()) / f"mcp-{self.name}.log"

    def _set(self, state: str, detail: str = "") -> None:
        self.state, self.detail = state, detail
        if self.on_change is not None:
            self.on_change(self)

    async def ensure_started(self) -> list[ToolInfo]:
        """Start the server if it is not running and wait until it lists its tools;
        ServerFailed (why) when it cannot."""
        running = self._running
        if running is None or running.task.done():
            running = self._start()
        return await asyncio.shield(running.ready)

    def _start(self) -> _Running:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[ToolInfo]] = loop.create_future()
        stop = asyncio.Event()
        running = _Running(None, ready, stop)  # type: ignore[arg-type]
        running.task = loop.create_task(self._supervise(running), name=f"mcp:{self.name}")
        self._running = running
        self._set(STARTING)
        return running

    async def _supervise(self, running: _Running) -> None:
        """The task that enters and leaves the SDK's client (the same task, as it must)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        errlog = self.log_path.open("a", encoding="utf-8", errors="replace")
        since = errlog.tell()
        errlog.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n")
        errlog.flush()
        try:
            try:
                from mcp import Client
            except ImportError as e:  # a build without the SDK (or one of its dependencies)
                raise RuntimeError(f"the MCP client (the `mcp` package) cannot be loaded here: {e}") from None
            async with asyncio.timeout(self.connect_timeout):
                transport = self._transport_for(errlog)
                client = Client(transport, client_info=_client_info())
                await client.__aenter__()
            try:
                async with asyncio.timeout(self.connect_timeout):
                    listed = await client.list_tools()
                running.client = client
                self.tools = [ToolInfo(t.name, t.description or "", dict(t.input_schema or {}),
                                       bool(t.annotations and t.annotations.read_only_hint))
                              for t in listed.tools]
                if not running.ready.done():
                    running.ready.set_result(self.tools)
                self._set(READY, f"{len(self.tools)} tools")
                await running.stop.wait()
            finally:
                running.client = None
                await client.__aexit__(None, None, None)
            if self._running is running:
                self._set(STOPPED)
        except asyncio.CancelledError:
            self._fail(running, "stopped while starting", since)
            raise
        except TimeoutError:
            self._fail(running, f"did not answer within {self.connect_timeout:.0f} s", since)
        except BaseException as e:  # noqa: BLE001 (the SDK raises groups, OSError, MCPError...)
            self._fail(running, _reason(e), since)
        finally:
            errlog.close()

    def _fail(self, running: _Running, why: str, since: int) -> None:
        tail = _tail(self.log_path, since)
        message = why + (f"\n{tail}" if tail and tail not in why else "")
        if not running.ready.done():
            running.ready.set_exception(ServerFailed(message))
            running.ready.exception()  # retrieved: a failure nobody awaited is not an error
        if self._running is running:
            self._set(FAILED, message)
        log.info("MCP server %s failed: %s", self.name, why)

    def _transport_for(self, errlog: Any) -> Any:
        if self._transport is not None:
            return self._transport
        if self.entry.url:  # Streamable HTTP, with the entry's headers
            if not self.entry.headers:
                return self.entry.url
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            return streamable_http_client(self.entry.url,
                                          http_client=create_mcp_http_client(headers=dict(self.entry.headers)))
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        command, args, env = stdio_launch(self.entry)
        params = StdioServerParameters(command=command, args=args, env=env, cwd=self.entry.cwd)
        return stdio_client(params, errlog=errlog)

    async def call(self, tool: str, arguments: dict[str, Any], *, timeout: float | None = None) -> Any:
        """Call a tool (starting the server first when needed); returns the SDK's
        CallToolResult. Cancelling the awaiting task cancels the request (MCP's notification).
        ServerFailed when the server is down or dies during the call."""
        await self.ensure_started()
        running = self._running
        client = running.client if running else None
        if client is None:
            raise ServerFailed(self.detail or "the server is not running")
        try:
            if timeout is None:
                return await client.call_tool(tool, arguments)
            async with asyncio.timeout(timeout):
                return await client.call_tool(tool, arguments)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            raise ServerFailed(f"{tool} did not answer within {timeout:.0f} s") from None
        except Exception as e:  # noqa: BLE001 (the connection closed, a transport error)
            why = _reason(e)
            if running is self._running and running is not None:
                running.stop.set()  # the session is gone: the next call starts a new one
                self._running = None
                self._set(FAILED, f"exited during a call: {why}")
            raise ServerFailed(f"the server {self.name} failed during the call: {why}") from None

    async def stop(self) -> None:
        """Stop the server (waits for the SDK's shutdown, at most STOP_TIMEOUT)."""
        running, self._running = self._running, None
        if running is None:
            return
        running.stop.set()
        if not running.ready.done():
            running.task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(running.task), STOP_TIMEOUT)
        except (asyncio.CancelledError, TimeoutError, Exception):  # noqa: BLE001
            running.task.cancel()
            # "stopped" only once the task has unwound (the SDK reaps the process as it does):
            # a loop closed under a task still cleaning up leaves its pipes' watchers dangling.
            await asyncio.wait({running.task}, timeout=STOP_TIMEOUT)
        self._set(STOPPED)


def _client_info() -> Any:
    from mcp import Implementation

    from .. import __version__

    return Implementation(name="TurboSpark", version=__version__)


def _reason(e: BaseException) -> str:
    """The innermost useful message of an exception (the SDK wraps them in groups)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = str(e) or type(e).__name__
    return text if isinstance(e, (OSError, RuntimeError, ValueError)) else f"{type(e).__name__}: {text}"
