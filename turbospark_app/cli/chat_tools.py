"""`turbospark chat --mcp-config FILE`: the agent loop headless (`tools.runner`).

Each call is shown on stderr and asked (`Allow add({"a": 2, "b": 3})? [y]es / [n]o /
[a]lways`), or allowed by `--allow-tools NAME,...|all` for scripts; without a terminal to ask
on, a call that is not allowed is denied (and the model told so). Results are shown on stderr
too (the reply on stdout stays the model's text)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any, Callable, Sequence, TextIO

from ..tools.agent import ALLOW_ONCE, ALWAYS, DENY, PendingCall
from ..tools.approval import Approvals
from ..tools.config import ConfigError, read_config
from ..tools.hub import ToolHub
from ..tools.runner import LoopThread


class CliTools:
    """The hub, its loop thread and the approval of calls for one `turbospark chat`."""

    def __init__(self, args: argparse.Namespace, *, stdin: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        """ConfigError when the file cannot be used (said before the model loads)."""
        entries = read_config(args.mcp_config)
        if not args.mcp_config.exists():
            raise ConfigError(f"{args.mcp_config} does not exist")
        self.hub = ToolHub(entries)
        self.allow = {n.strip() for n in (args.allow_tools or "").split(",") if n.strip()}
        self.choice = args.tool_choice
        self.step_limit = args.max_tool_steps
        self.approvals = Approvals()
        # A document's text is in this turn's prompt (chat --attach): --allow-tools is suspended,
        # as "always allow" is, and every call asks (text the user did not write may steer it).
        self.untrusted = False
        self.loop = LoopThread()
        self._stdin = stdin
        self._err = err or sys.stderr
        self._ask_lock = threading.Lock()

    def _allowed(self, p: PendingCall) -> bool:
        tool = p.tool
        return "all" in self.allow or p.call.name in self.allow or (tool is not None and tool.tool in self.allow)

    async def ask(self, p: PendingCall) -> str:
        """The approval of one call: --allow-tools (not with a document in the prompt), else a
        question on stderr."""
        if self._allowed(p):
            if not self.untrusted:
                print(f"[tool] {p.label()} (allowed by --allow-tools)", file=self._err)
                return ALLOW_ONCE
            print(f"[tool] {p.label()}: asked although --allow-tools allows it: an attached "
                  "document's text is in the prompt", file=self._err)
        return await asyncio.get_running_loop().run_in_executor(None, self._ask_blocking, p)

    def _ask_blocking(self, p: PendingCall) -> str:
        stdin = self._stdin if self._stdin is not None else sys.stdin
        with self._ask_lock:  # parallel calls are asked one after another
            if stdin is None or not getattr(stdin, "isatty", lambda: False)() and self._stdin is None:
                print(f"[tool] {p.label()} denied: no terminal to ask on",
                      file=self._err)
                return DENY
            print(f"Allow {p.label()}? [y]es / [n]o / [a]lways ", end="", file=self._err, flush=True)
            answer = (stdin.readline() or "").strip().lower()
        return {"y": ALLOW_ONCE, "yes": ALLOW_ONCE, "a": ALWAYS, "always": ALWAYS}.get(answer, DENY)

    def show(self, p: PendingCall) -> None:
        """A call's result on stderr, once it has one."""
        if p.outcome is None:
            return
        o = p.outcome
        head = "error" if o.is_error else "result"
        text = o.text if len(o.text) <= 400 else o.text[:400] + " …"
        print(f"[tool {head}] {p.call.name} ({o.seconds * 1000:.0f} ms): {text}", file=self._err)

    def close(self) -> None:
        self.loop.close(self.hub)


def agent_turn(conv: Any, tools: CliTools, user_text: str, out: TextIO,
               cancel: Callable[[], bool], *, untrusted_text: bool = False,
               images: Sequence[Any] = ()) -> Any:
    """One user message through the loop: the reply streams to `out`; returns the last step's
    RawDecodeResult (the summary line's figures). `untrusted_text`: an attached document is in
    `user_text` (every call asks); `images` go with the message. Raises EngineError /
    StructuredError."""
    from ..chat.api import ChatMessage
    from ..tools.runner import run_agent_turn

    pending = [*conv.messages, ChatMessage("user", user_text, images=tuple(images))]
    tools.untrusted = untrusted_text

    def delta(text: str) -> None:
        out.write(text)
        out.flush()

    def calls(batch: list[PendingCall]) -> None:
        out.write("\n")

    result = run_agent_turn(conv.backend, pending, conv.settings, tools.hub, tools.loop, tools.ask,
                            tools.approvals, cancel, choice=tools.choice, step_limit=tools.step_limit,
                            session_id=conv.session_id, on_delta=delta, on_calls=calls, on_update=tools.show,
                            untrusted_text=untrusted_text)
    if result.note:
        print(f"\nturbospark: {result.note}", file=sys.stderr)
    conv.messages = [*result.messages, ChatMessage("assistant", result.text, result.token_ids)]
    conv.last_agent = result
    return result.steps[-1].result
