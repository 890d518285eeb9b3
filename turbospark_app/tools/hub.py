"""Every configured server and its tools as the model sees them.

A tool is offered to the model as `server__tool` (OpenAI function names are
`[A-Za-z0-9_-]{1,64}`, MCP's are wider; the server prefix also keeps two servers' tools of the
same name apart). Servers start when a conversation first needs their tools, together; one
that fails is reported and the others' tools are still offered.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .config import ServerEntry
from .results import DEFAULT_CAP, ToolOutcome, error_outcome, outcome_of
from .server import McpServer, ServerFailed, ToolInfo

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_name(server: str, tool: str) -> str:
    """`server__tool`, made OpenAI-safe; a hash suffix when it would pass 64 characters."""
    name = _UNSAFE.sub("_", f"{server}__{tool}")
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


@dataclass(frozen=True)
class OfferedTool:
    """A tool offered to the model: its name there, where it runs, its schema."""

    model_name: str
    server: str
    tool: str
    info: ToolInfo

    def openai(self) -> dict[str, Any]:
        """The OpenAI tool object the chat template's `tools` variable gets."""
        fn: dict[str, Any] = {"name": self.model_name,
                              "parameters": self.info.schema or {"type": "object", "properties": {}}}
        if self.info.description:
            fn["description"] = self.info.description
        return {"type": "function", "function": fn}


class ToolHub:
    """The configured servers (see the module docstring). Use from the event loop's thread."""

    def __init__(self, entries: Iterable[ServerEntry], *, log_dir: Path | None = None,
                 on_change: Callable[[McpServer], None] | None = None,
                 transports: dict[str, Any] | None = None, result_cap: int = DEFAULT_CAP) -> None:
        """`transports`: server name -> what to connect to instead (tests: in-process servers)."""
        self.result_cap = result_cap
        self.on_change = on_change
        self._log_dir = log_dir
        self._transports = transports or {}
        self.servers: dict[str, McpServer] = {}
        self._offered: dict[str, OfferedTool] = {}
        self.configure(entries)

    def configure(self, entries: Iterable[ServerEntry]) -> list[McpServer]:
        """Take a new configuration; returns the servers whose entry changed or went (to stop)."""
        new = {e.name: e for e in entries}
        gone = [s for name, s in self.servers.items() if name not in new or new[name] != s.entry]
        for server in gone:
            del self.servers[server.name]
        for name, entry in new.items():
            if name not in self.servers:
                self.servers[name] = McpServer(entry, log_dir=self._log_dir, on_change=self.on_change,
                                               transport=self._transports.get(name))
        return gone

    def enabled(self, names: Iterable[str] | None = None) -> list[McpServer]:
        """The servers switched on (of `names`, when given)."""
        wanted = None if names is None else set(names)
        return [s for s in self.servers.values()
                if not s.entry.disabled and (wanted is None or s.name in wanted)]

    async def offer(self, names: Iterable[str] | None = None) -> tuple[list[OfferedTool], list[str]]:
        """(the tools to offer, one message per server that failed) — starting the servers
        that are not running, all at once."""
        servers = self.enabled(names)
        results = await asyncio.gather(*(s.ensure_started() for s in servers), return_exceptions=True)
        offered, problems = [], []
        for server, result in zip(servers, results):
            if isinstance(result, BaseException):
                problems.append(f"MCP server {server.name} failed: {result}")
                continue
            for info in result:
                if info.name in server.entry.disabled_tools:
                    continue
                tool = OfferedTool(model_name(server.name, info.name), server.name, info.name, info)
                offered.append(tool)
                self._offered[tool.model_name] = tool
        return offered, problems

    def find(self, name: str) -> OfferedTool | None:
        """The offered tool the model named (None: no such tool, or switched off since)."""
        tool = self._offered.get(name)
        if tool is None:
            return None
        server = self.servers.get(tool.server)
        if server is None or server.entry.disabled or tool.tool in server.entry.disabled_tools:
            return None
        return tool

    def identity(self, tool: OfferedTool) -> str:
        return self.servers[tool.server].entry.identity

    async def call(self, tool: OfferedTool, arguments: dict[str, Any], *,
                   timeout: float | None = None, sent: Callable[[], None] | None = None) -> ToolOutcome:
        """Run one call; any failure is an error outcome the model reads (a cancellation is
        not: it propagates). `sent`: called right before the request goes out (measurement)."""
        start = time.perf_counter()
        server = self.servers.get(tool.server)
        if server is None:
            return error_outcome(f"the MCP server {tool.server} is no longer configured")
        try:
            if sent is not None:
                sent()
            result = await server.call(tool.tool, arguments, timeout=timeout)
        except ServerFailed as e:
            return error_outcome(str(e), time.perf_counter() - start)
        return outcome_of(result, time.perf_counter() - start, self.result_cap)

    async def stop_all(self) -> None:
        """Stop every server (the app quits: no orphans)."""
        await asyncio.gather(*(s.stop() for s in self.servers.values()), return_exceptions=True)


def parse_arguments(text: str) -> dict[str, Any]:
    """A call's arguments JSON as an object; ValueError saying what is wrong."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"the arguments are not valid JSON: {e.msg}") from None
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value
