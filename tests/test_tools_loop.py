"""The agent loop end to end: model -> tool calls -> approval -> a real stdio MCP server (written
with the SDK's MCPServer) -> `tool` messages through the template -> the model continues on its
KV prefix. A scripted producer (the qwen3 family's real tokenizer and template) drives the
multi-step cases; the real default model a forced call."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from family_backend import FamilyLoopBackend
from mcp_servers import calc_config
from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.conversations.parts import TEXT, TOOL_CALL, TOOL_RESULT
from turbospark_app.engine import GenerationConfig, StopReason
from turbospark_app.tools.agent import ALLOW_ONCE, DENIED, DENY, STOPPED
from turbospark_app.tools.approval import Approvals
from turbospark_app.tools.config import parse_config
from turbospark_app.tools.hub import ToolHub
from turbospark_app.tools.runner import LoopThread, run_agent_turn
from turbospark_app.tools.server import READY


def call(name: str, **args: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


@pytest.fixture
def tools(tmp_path: Path):
    hub = ToolHub(parse_config(calc_config(tmp_path, broken={"command": "surely-not-a-command-40"})),
                  log_dir=tmp_path / "logs")
    loop = LoopThread()
    yield hub, loop
    loop.close(hub)


def settings(n: int = 400) -> TurnSettings:
    return TurnSettings(GenerationConfig(max_new_tokens=n))


def asked(log: list[str], answer: str = ALLOW_ONCE):
    async def ask(p):  # noqa: ANN001
        log.append(p.label())
        return answer
    return ask


def test_two_calls_then_an_answer_through_the_qwen3_template(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (
        call("calc__add", a=2, b=3) + "\n" + call("calc__mul", a=4, b=5),  # parallel calls
        call("calc__mul", a=5, b=20),
        "The answer is 100."))
    questions: list[str] = []
    result = run_agent_turn(backend, [ChatMessage("user", "(2+3)*20?")], settings(), hub, loop,
                            asked(questions), Approvals(), lambda: False, session_id="s")
    assert result.text == "The answer is 100." and result.reason is StopReason.END_OF_TURN
    assert questions == ['calc__add({"a": 2, "b": 3})', 'calc__mul({"a": 4, "b": 5})',
                         'calc__mul({"a": 5, "b": 20})']
    kinds = [p.kind for p in result.parts]
    assert kinds == [TEXT, TOOL_CALL, TOOL_CALL, TOOL_RESULT, TOOL_RESULT, TEXT, TOOL_CALL, TOOL_RESULT]
    results = [p for p in result.parts if p.kind == TOOL_RESULT]
    assert json.loads(results[0].text)["sum"] == 5 and results[1].text == "20" and results[2].text == "100"
    assert "MCP server broken failed" in result.note and "not found in PATH=" in result.note
    # Every step's prompt starts with the previous step's prompt + the ids it generated: the
    # KV prefix holds; the results went through the template as `tool` messages.
    p1, p2, p3 = backend.prompt_ids
    g1 = result.parts[0].token_ids
    assert p2[: len(p1) + len(g1)] == (*p1, *g1)
    tail = backend.tokenizer.decode(list(p2[len(p1) + len(g1):]))
    assert "<tool_response>" in tail and '"sum": 5' in tail and "20" in tail
    assert p3[: len(p2)] == p2
    assert "calc__add" in backend.tokenizer.decode(list(p1))  # the tools went through the template


def test_deny_sends_the_refusal_back_and_the_model_goes_on(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__add", a=1, b=1), "I may not."))
    result = run_agent_turn(backend, [ChatMessage("user", "1+1?")], settings(), hub, loop,
                            asked([], DENY), Approvals(), lambda: False)
    res = [p for p in result.parts if p.kind == TOOL_RESULT][0]
    assert res.text == DENIED and res.meta["is_error"] and result.text == "I may not."
    assert [p.meta["approval"] for p in result.parts if p.kind == TOOL_CALL] == ["deny"]


def test_errors_a_megabyte_and_a_dying_server_are_results_and_the_loop_goes_on(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (
        call("calc__fail", why="asked") + "\n" + call("calc__big") + "\n" + call("calc__nope"),
        call("calc__die"), call("calc__add", a=1, b=2), "Done."))
    result = run_agent_turn(backend, [ChatMessage("user", "go")], settings(), hub, loop,
                            asked([]), Approvals(), lambda: False)
    fail, big, nope, die, add = [p for p in result.parts if p.kind == TOOL_RESULT]
    assert fail.meta["is_error"] and "failing as asked" in fail.text
    assert big.meta["truncated"] and len(big.text) < 9000 and "of 1048576 characters" in big.text
    assert nope.meta["is_error"] and "no tool named 'calc__nope'" in nope.text
    assert die.meta["is_error"] and "failed during the call" in die.text
    assert json.loads(add.text)["sum"] == 3  # restarted on the next call
    assert result.text == "Done."


def test_the_step_limit_ends_a_loop_that_never_settles(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__add", a=1, b=1),))
    result = run_agent_turn(backend, [ChatMessage("user", "loop")], settings(), hub, loop,
                            asked([]), Approvals(), lambda: False, step_limit=3)
    assert len(result.steps) == 4 and "after 3 tool steps" in result.note
    assert sum(p.kind == TOOL_RESULT for p in result.parts) == 3


def test_always_allow_asks_once(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__add", a=1, b=1), call("calc__add", a=2, b=2), "4"))
    questions: list[str] = []
    result = run_agent_turn(backend, [ChatMessage("user", "x")], settings(), hub, loop,
                            asked(questions, "always"), Approvals(), lambda: False)
    assert len(questions) == 1
    assert [p.meta["approval"] for p in result.parts if p.kind == TOOL_CALL] == ["always", "auto"]


def test_stop_during_a_30s_tool_ends_the_loop_at_once_and_the_server_stays(tmp_path: Path, tools) -> None:
    hub, loop = tools
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__wait", seconds=30), "never"))
    stop = threading.Event()
    stopped_at: list[float] = []

    def press_stop() -> None:
        time.sleep(0.5)  # the request is at the server, which sleeps
        stopped_at.append(time.perf_counter())
        stop.set()

    result = run_agent_turn(backend, [ChatMessage("user", "wait")], settings(), hub, loop, asked([]),
                            Approvals(), stop.is_set, sent=lambda: threading.Thread(target=press_stop).start())
    ended = time.perf_counter() - stopped_at[0]
    assert result.reason is StopReason.CANCELLED and ended < 0.5, ended
    res = [p for p in result.parts if p.kind == TOOL_RESULT][0]
    assert res.text == STOPPED and res.meta["is_error"]
    assert hub.servers["calc"].state == READY  # not killed: its late answer is dropped
    tool = hub.find("calc__add")
    assert json.loads(loop.run(hub.call(tool, {"a": 3, "b": 4})).text)["sum"] == 7


def test_a_forced_call_on_the_default_model_reads_again_only_the_result(default_model_path, tmp_path: Path,
                                                                       tools) -> None:
    from turbospark_app.chat.backend import load_backend

    hub, loop = tools
    backend = load_backend(default_model_path, session_slots=2)
    result = run_agent_turn(backend, [ChatMessage("user", "What is 2 plus 3?")], settings(48), hub, loop,
                            asked([]), Approvals(), lambda: False, choice="calc__add")
    call_part = next(p for p in result.parts if p.kind == TOOL_CALL)
    assert call_part.name == "calc__add" and set(json.loads(call_part.arguments)) == {"a", "b"}
    res = next(p for p in result.parts if p.kind == TOOL_RESULT)
    assert not res.meta["is_error"] and "sum" in json.loads(res.text)
    first, second = result.steps[0].result, result.steps[1].result
    # The KV holds the first prompt and every generated token but the last (the complete
    # grammar ended the step before feeding it): the rest is the result and the template's text.
    assert second.reused_prefix_tokens == first.prompt_tokens + first.new_tokens - 1
    reread = second.prompt_tokens - second.reused_prefix_tokens
    result_tokens = len(backend.tokenizer.encode(res.text))
    assert reread <= result_tokens + 20, (reread, result_tokens)
    assert result.reason in (StopReason.END_OF_TURN, StopReason.EOS, StopReason.MAX_TOKENS)
