"""MCP servers the tests write with the SDK's own server class (`mcp.server.MCPServer`, mcp 2.x:
the older `FastMCP` import raises there), run over stdio with this Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SERVER_SOURCE = '''
import json, os, sys, time
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mcp = MCPServer("calc")

@mcp.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return json.dumps({"sum": a + b, "arrived": time.time()})

@mcp.tool()
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b

@mcp.tool()
def wait(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "woke"

@mcp.tool()
def die() -> str:
    """Exit the server mid-call."""
    print("calc: dying on purpose", file=sys.stderr, flush=True)
    os._exit(3)

@mcp.tool()
def big() -> str:
    """One megabyte of text."""
    return "x" * (1 << 20)

@mcp.tool()
def fail(why: str) -> str:
    """Raise an error."""
    raise ToolError("failing as asked: " + why)

@mcp.tool()
def environment() -> str:
    """The environment's variable names."""
    return json.dumps(sorted(os.environ))

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":  # Streamable HTTP on 127.0.0.1:<port>
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
'''


def write_server(folder: Path) -> Path:
    path = folder / "calc_server.py"
    path.write_text(SERVER_SOURCE, "utf-8")
    return path


def calc_config(folder: Path, **extra: object) -> str:
    """An mcp.json text with the calc server (and `extra` entries)."""
    servers = {"calc": {"command": sys.executable, "args": [str(write_server(folder))],
                        "env": {"CALC_TOKEN": "t0k"}}, **extra}
    return json.dumps({"mcpServers": servers}, indent=2)
