"""mcp.json, PATH resolution and a stdio server's environment (`turbospark_app.tools`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from mcp_servers import calc_config
from turbospark_app.tools.approval import Approvals
from turbospark_app.tools.config import ConfigError, parse_config, read_config, save_config, set_switch
from turbospark_app.tools.hub import ToolHub, model_name
from turbospark_app.tools.results import cap_text
from turbospark_app.tools.server import stdio_launch
from turbospark_app.tools.shell_path import CommandNotFound, resolve_command, search_path

CLAUDE_BLOCK = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}}
  }
}"""


def test_the_peers_block_parses_as_it_is() -> None:
    fs, remote = parse_config(CLAUDE_BLOCK)
    assert (fs.name, fs.command, fs.args, fs.transport) == (
        "filesystem", "npx", ("-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"), "stdio")
    assert (remote.url, remote.headers, remote.transport) == (
        "https://example.com/mcp", (("Authorization", "Bearer x"),), "http")
    assert parse_config("") == ()


@pytest.mark.parametrize("text, line, words", [
    ('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}', 3, "not valid JSON"),
    ('{\n "mcpServers": {\n  "a": {"args": []}\n }\n}', 3, "needs either"),
    ('{\n "mcpServers": {\n  "ok": {"command": "x"},\n  "b": {"command": "x", "env": {"K": 1}}\n }\n}', 4, "env"),
    ('{\n "mcpServers": {\n  "a__b": {"command": "x"}\n }\n}', 3, "'__'"),
    ('[1, 2]', 1, "mcpServers"),
])
def test_a_bad_file_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert e.value.line == line and words in str(e.value) and str(e.value).startswith(f"line {line}:")


def test_save_refuses_a_bad_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    save_config(path, CLAUDE_BLOCK)
    with pytest.raises(ConfigError):
        save_config(path, '{"mcpServers": {"x": {}}}')
    assert path.read_text("utf-8") == CLAUDE_BLOCK and len(read_config(path)) == 2


def test_switches_turn_servers_and_tools_off_and_on() -> None:
    text = set_switch(CLAUDE_BLOCK, "filesystem", disabled=True)
    text = set_switch(text, "remote", tool="delete", tool_on=False)
    fs, remote = parse_config(text)
    assert fs.disabled and remote.disabled_tools == {"delete"}
    fs, remote = parse_config(set_switch(set_switch(text, "filesystem", disabled=False), "remote",
                                         tool="delete", tool_on=True))
    assert not fs.disabled and not remote.disabled_tools


def test_a_missing_command_says_which_path_was_searched(tmp_path: Path) -> None:
    with pytest.raises(CommandNotFound) as e:
        resolve_command("surely-not-a-command-40", f"{tmp_path}:/nonexistent")
    assert str(e.value) == f"'surely-not-a-command-40' not found in PATH={tmp_path}:/nonexistent"


def test_the_login_shell_path_is_searched_after_the_apps(tmp_path: Path, monkeypatch) -> None:
    tool = tmp_path / "only-in-login-shell"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = search_path(login_path=f"/usr/bin:{tmp_path}")
    assert path == f"/usr/bin:/bin:{tmp_path}"
    assert resolve_command("only-in-login-shell", path) == str(tool)


@pytest.mark.skipif(sys.platform == "win32", reason="env -i is POSIX")
def test_a_server_gets_only_its_env_path_and_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_OF_THE_APP", "must-not-leak")
    entries = parse_config(calc_config(tmp_path))
    command, args, env = stdio_launch(entries[0], path=os.environ["PATH"])
    assert command == "/usr/bin/env" and args[0] == "-i"
    assert set(env) == {"PATH", "HOME", "CALC_TOKEN"}

    async def main() -> str:
        hub = ToolHub(entries, log_dir=tmp_path)
        try:
            offered, problems = await hub.offer()
            assert problems == []
            tool = hub.find(model_name("calc", "environment"))
            return (await hub.call(tool, {})).text
        finally:
            await hub.stop_all()

    names = set(json.loads(asyncio.run(main())))
    assert "SECRET_OF_THE_APP" not in names and {"PATH", "HOME", "CALC_TOKEN"} <= names
    assert names - {"PATH", "HOME", "CALC_TOKEN"} <= {"PWD", "SHLVL", "_", "LC_CTYPE"}  # the shell's own


def test_long_names_are_openai_safe() -> None:
    assert model_name("fs", "read.file") == "fs__read_file"
    long = model_name("server", "t" * 100)
    assert len(long) == 64 and long == model_name("server", "t" * 100) != model_name("server", "t" * 101)


def test_a_result_past_the_cap_is_cut_with_a_note() -> None:
    text, cut = cap_text("y" * 20000, 8000)
    assert cut and text.startswith("y" * 8000) and "8000 of 20000 characters" in text
    assert cap_text("short", 8000) == ("short", False)


def test_always_allow_is_remembered_revoked_and_suspended_for_document_text(tmp_path: Path) -> None:
    path = tmp_path / "tool-approvals.json"
    a = Approvals(path)
    a.remember("python calc.py", "add")
    assert Approvals(path).allowed("python calc.py", "add")
    assert not Approvals(path).allowed("python calc.py", "add", untrusted_text=True)
    assert not Approvals(path).allowed("python other.py", "add")
    a.revoke("python calc.py")
    assert not Approvals(path).allowed("python calc.py", "add")


def test_a_streamable_http_server_with_headers(tmp_path: Path) -> None:
    import socket
    import subprocess
    import time

    from mcp_servers import write_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(write_server(tmp_path)), "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        entries = parse_config(json.dumps({"mcpServers": {"web": {
            "url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer t"}}}}))

        async def main() -> str:
            hub = ToolHub(entries, log_dir=tmp_path)
            try:
                offered, problems = await hub.offer()
                assert problems == [] and "web__add" in {t.model_name for t in offered}
                return (await hub.call(hub.find("web__add"), {"a": 20, "b": 22})).text
            finally:
                await hub.stop_all()

        assert json.loads(asyncio.run(main()))["sum"] == 42
    finally:
        proc.terminate()
        proc.wait(10)
