"""`mcp.json`: the MCP servers the user configured, in the shape Claude Desktop, Cursor, LM
Studio and Jan share, so a server README's block can be pasted as it is:

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {}},
                    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "..."}}}}

Extras TurboSpark reads: `"disabled": true` (Cursor's / Claude's off switch) and
`"disabledTools": [names]` (per-tool off switches). Anything else in an entry is kept, unread.
`parse_config(text)` names the line of every problem (`ConfigError.line`), so the servers
dialog can refuse a bad file and keep the old one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_FILENAME = "mcp.json"
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")


class ConfigError(ValueError):
    """`mcp.json` is not usable; `line` (1-based) is where, when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


@dataclass(frozen=True)
class ServerEntry:
    """One configured server: a command (stdio) or a URL (Streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    disabled: bool = False
    disabled_tools: frozenset[str] = field(default_factory=frozenset)

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def identity(self) -> str:
        """What an "always allow" is tied to: the command line or URL (a renamed entry that
        runs something else asks again)."""
        return " ".join([self.command or "", *self.args]) if self.command else str(self.url)


def config_path() -> Path:
    """`<config folder>/mcp.json` (TURBOSPARK_CONFIG_DIR overrides the folder)."""
    from ..host.folders import config_dir

    return config_dir() / CONFIG_FILENAME


def _line_of(text: str, key: str) -> int | None:
    """The line where `"key":` first appears (for messages about an entry)."""
    found = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return text.count("\n", 0, found.start()) + 1 if found else None


def _strings(value: Any, what: str, line: int | None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of strings", line)
    return tuple(value)


def _mapping(value: Any, what: str, line: int | None) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{what} must be an object of strings", line)
    return tuple(sorted(value.items()))


def parse_config(text: str) -> tuple[ServerEntry, ...]:
    """The servers of an `mcp.json` text; ConfigError naming the line of what is wrong.
    An empty text is no servers."""
    if not text.strip():
        return ()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON: {e.msg} (column {e.colno})", e.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("mcpServers", {}), dict):
        raise ConfigError('the file must be an object with "mcpServers": {name: {...}}', 1)
    out = []
    for name, spec in doc.get("mcpServers", {}).items():
        line = _line_of(text, name)
        if not _SERVER_NAME.match(name):
            raise ConfigError(f"server name {name!r} must be 1-48 letters, digits, '_', '-' or '.'", line)
        if "__" in name:
            raise ConfigError(f"server name {name!r} cannot contain '__' (it separates server and tool)", line)
        if not isinstance(spec, dict):
            raise ConfigError(f"server {name!r} must be an object", line)
        command, url = spec.get("command"), spec.get("url") or spec.get("serverUrl")
        if (command is None) == (url is None):
            raise ConfigError(f"server {name!r} needs either \"command\" (a program) or \"url\"", line)
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise ConfigError(f"server {name!r}: \"command\" must be a non-empty string", line)
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
            raise ConfigError(f"server {name!r}: \"url\" must be an http:// or https:// address", line)
        cwd = spec.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"server {name!r}: \"cwd\" must be a folder path", line)
        disabled = spec.get("disabled", False)
        if not isinstance(disabled, bool):
            raise ConfigError(f"server {name!r}: \"disabled\" must be true or false", line)
        out.append(ServerEntry(
            name, command, _strings(spec.get("args", []), f"server {name!r}: \"args\"", line),
            _mapping(spec.get("env", {}), f"server {name!r}: \"env\"", line), cwd, url,
            _mapping(spec.get("headers", {}), f"server {name!r}: \"headers\"", line), disabled,
            frozenset(_strings(spec.get("disabledTools", []), f"server {name!r}: \"disabledTools\"", line)),
        ))
    return tuple(out)


def read_config(path: Path) -> tuple[ServerEntry, ...]:
    """The servers in `path` (none when it does not exist); ConfigError when unreadable."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    try:
        return parse_config(text)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}", e.line) from None


def save_config(path: Path, text: str) -> tuple[ServerEntry, ...]:
    """Check `text` and write it to `path` atomically; ConfigError (the old file untouched)."""
    entries = parse_config(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, "utf-8")
    tmp.replace(path)
    return entries


def set_switch(text: str, server: str, *, disabled: bool | None = None,
               tool: str | None = None, tool_on: bool | None = None) -> str:
    """`text` with a server's on/off switch or one tool's switch changed (re-serialized)."""
    doc = json.loads(text) if text.strip() else {"mcpServers": {}}
    spec = doc.setdefault("mcpServers", {}).get(server)
    if not isinstance(spec, dict):
        raise ConfigError(f"no server named {server!r}")
    if disabled is not None:
        if disabled:
            spec["disabled"] = True
        else:
            spec.pop("disabled", None)
    if tool is not None and tool_on is not None:
        off = [t for t in spec.get("disabledTools", []) if t != tool]
        if not tool_on:
            off.append(tool)
        if off:
            spec["disabledTools"] = sorted(off)
        else:
            spec.pop("disabledTools", None)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
