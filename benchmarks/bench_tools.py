"""Tools: how soon a call reaches a warm stdio MCP server, and what the next step reads again.

    python benchmarks/bench_tools.py [--model GGUF] [--runs 5]

The default model (or --model) makes a forced call (`tool_choice` the `add` tool: constrained
JSON) to a stdio server written with the SDK's MCPServer; the server answers with the wall
time the request reached it. Per run:
  token->server   the model's last call token -> the request at the server (ms): the
                  end-of-turn token's decode, the parse, the approval (allowed), the loop hop,
                  the SDK's JSON-RPC over the pipe
  end->server     the step's end (its run returned) -> the request at the server (ms)
  re-read         step 2's prompt tokens minus the KV prefix it reused, against the result's
                  own tokens: what the template adds around a tool result
The server is started (warm) before the first run. Prints each run, then the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

SERVER = '''
import json, time
from mcp.server.mcpserver import MCPServer
mcp = MCPServer("calc")

@mcp.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return json.dumps({"sum": a + b, "arrived": time.time()})

if __name__ == "__main__":
    mcp.run()
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from turbospark_app.chat.api import ChatMessage, TurnSettings
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.engine import GenerationConfig
    from turbospark_app.model.fetch import default_model_path
    from turbospark_app.tools.approval import ALLOW_ONCE, Approvals
    from turbospark_app.tools.config import parse_config
    from turbospark_app.tools.hub import ToolHub
    from turbospark_app.tools.runner import LoopThread, run_agent_turn

    folder = Path(tempfile.mkdtemp(prefix="bench-tools-"))
    (folder / "calc.py").write_text(SERVER, "utf-8")
    hub = ToolHub(parse_config(json.dumps({"mcpServers": {"calc": {
        "command": sys.executable, "args": [str(folder / "calc.py")]}}})), log_dir=folder)
    loop = LoopThread()
    loop.run(hub.offer())  # warm

    async def allow(_call):  # noqa: ANN001, ANN202
        return ALLOW_ONCE

    backend = load_backend(args.model or default_model_path(), session_slots=2)
    rows = []
    try:
        for run in range(args.runs):
            result = run_agent_turn(
                backend, [ChatMessage("user", f"What is {run + 2} plus {run + 3}?")],
                TurnSettings(GenerationConfig(max_new_tokens=24)), hub, loop, allow, Approvals(),
                lambda: False, choice="calc__add", session_id=f"bench-{run}", step_limit=1)
            first = result.steps[0]
            res = next(p for p in result.parts if p.kind == "tool_result")
            arrived = json.loads(res.text)["arrived"]
            second = result.steps[1].result
            reread = second.prompt_tokens - second.reused_prefix_tokens
            own = len(backend.tokenizer.encode(res.text))
            row = ((arrived - first.last_token_at) * 1000, (arrived - first.ended_at) * 1000, reread, own)
            rows.append(row)
            print(f"run {run + 1}: token->server {row[0]:.1f} ms | end->server {row[1]:.1f} ms | "
                  f"re-read {reread} tok (result {own} tok, step 2 prompt {second.prompt_tokens}, "
                  f"reused {second.reused_prefix_tokens})")
    finally:
        loop.close(hub)
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"median: token->server {med[0]:.1f} ms | end->server {med[1]:.1f} ms | "
          f"re-read {med[2]:.0f} tok for a {med[3]:.0f}-token result (+{med[2] - med[3]:.0f} template)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
