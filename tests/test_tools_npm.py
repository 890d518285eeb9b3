"""The reference server people install from npm, `@modelcontextprotocol/server-filesystem`,
started through `npx` (installed by this test with npm into a cache folder: the npm registry is
one of the registries `make test` may use)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from turbospark_app.tools.config import parse_config
from turbospark_app.tools.hub import ToolHub

PACKAGE = "@modelcontextprotocol/server-filesystem"


@pytest.fixture(scope="module")
def npm_prefix() -> Path:
    """A folder with the server installed (kept between runs: `TURBOSPARK_TEST_NPM_DIR`, else
    ~/.cache/turbospark-tests/npm)."""
    if shutil.which("npm") is None or shutil.which("npx") is None:
        pytest.skip("Node's npm / npx are not installed (Debian: apt-get install nodejs npm)")
    prefix = Path(os.environ.get("TURBOSPARK_TEST_NPM_DIR") or Path.home() / ".cache/turbospark-tests/npm")
    prefix.mkdir(parents=True, exist_ok=True)
    if not (prefix / "node_modules/.bin/mcp-server-filesystem").exists():
        proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), PACKAGE],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return prefix


def config(prefix: Path, root: Path) -> str:
    # As a README gives it, plus the folder npx finds the installed package in.
    return json.dumps({"mcpServers": {"files": {"command": "npx", "args": [PACKAGE, str(root)],
                                                "cwd": str(prefix)}}})


def test_npx_filesystem_reads_inside_its_root_and_refuses_outside(npm_prefix: Path, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "note.txt").write_text("hello from the notes\n", "utf-8")

    async def main() -> tuple[str, object]:
        hub = ToolHub(parse_config(config(npm_prefix, root)), log_dir=tmp_path)
        try:
            offered, problems = await hub.offer()
            assert problems == []
            assert {"files__read_text_file", "files__list_directory"} <= {t.model_name for t in offered}
            inside = await hub.call(hub.find("files__read_text_file"), {"path": str(root / "note.txt")})
            outside = await hub.call(hub.find("files__read_text_file"), {"path": "/etc/hostname"})
            return inside.text, outside
        finally:
            await hub.stop_all()

    inside, outside = asyncio.run(main())
    assert inside.strip() == "hello from the notes"
    assert outside.is_error and "outside allowed directories" in outside.text


def test_a_forced_call_on_the_default_model_through_npx(default_model_path, npm_prefix: Path, tmp_path: Path) -> None:
    from turbospark_app.chat.api import ChatMessage, TurnSettings
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.engine import GenerationConfig
    from turbospark_app.tools.approval import ALLOW_ONCE, Approvals
    from turbospark_app.tools.runner import LoopThread, run_agent_turn

    root = tmp_path / "notes"
    root.mkdir()
    (root / "todo.txt").write_text("buy milk\n", "utf-8")
    hub = ToolHub(parse_config(config(npm_prefix, root)), log_dir=tmp_path)
    loop = LoopThread()
    asked: list[str] = []

    async def allow(p):  # noqa: ANN001, ANN202
        asked.append(p.call.name)
        return ALLOW_ONCE

    try:
        backend = load_backend(default_model_path, session_slots=2)
        result = run_agent_turn(backend, [ChatMessage("user", f"What files are in {root}?")],
                                TurnSettings(GenerationConfig(max_new_tokens=40)), hub, loop, allow,
                                Approvals(), lambda: False, choice="files__list_directory", step_limit=1)
    finally:
        loop.close(hub)
    assert asked == ["files__list_directory"]
    res = next(p for p in result.parts if p.kind == "tool_result")
    # The model chose the path: the root's listing names todo.txt; a path it made up is the
    # server's error (outside the root, or not there), which the model then reads.
    assert "todo.txt" in res.text or (res.meta["is_error"] and ("Access denied" in res.text or "ENOENT" in res.text))
    assert len(result.steps) == 2  # model -> approval -> server -> result -> the model went on
