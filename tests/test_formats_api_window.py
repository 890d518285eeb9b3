"""Every family's tool-call format and reasoning split, end to end: a scripted producer spells the
reply in the family's tokens (llama.cpp's tokenizer of a tiny family GGUF, the family's real
template) under the engine's step loop and the real engine thread; the official `openai` client
reads it from the API, streamed and not, and the window shows it (tool cards, reasoning
collapsed, figures). The replies are test_reply_formats.CASES (the engine-level check)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from api_harness import openai_client
from family_backend import FamilyLoopBackend
from test_reply_formats import CASES, TOOLS
from turbospark_app.chat.formats import special_text
from turbospark_app.server import ApiServer, ServerConfig
from turbospark_app.service.engine_thread import EngineThread
from ui_fakes import send, wait_idle

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


class _Served:
    """An engine thread over one FamilyLoopBackend and an API server over it, on a loop thread."""

    def __init__(self, backend: FamilyLoopBackend) -> None:
        self.backend = backend
        self.engine = EngineThread(lambda: backend, lambda e: None, max_active=2)
        self.engine.start()
        deadline = time.monotonic() + 30
        while self.engine.state != "ready":
            assert self.engine.state != "failed" and time.monotonic() < deadline
            time.sleep(0.01)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ApiServer(self.engine, ServerConfig(port=0))
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        self.client = openai_client(self.server)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        assert self.engine.shutdown(10)


def _stream(client, **kw):
    """(content, reasoning_content, tool calls as accumulated by index, finish_reason, chunks)."""
    content, reasoning, calls, finish, n = "", "", {}, None, 0
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        n += 1
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for tc in delta.tool_calls or []:  # accumulated as OpenAI's own clients do
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": "", "pieces": 0})
            assert entry["pieces"] == 0 or tc.id is None  # the id comes once, with the name
            entry["pieces"] += 1
            entry["id"] = tc.id or entry["id"]
            if tc.function is not None:
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, n


# DeepSeek R1's template renders no `tools` list (the API refuses to offer it tools): its reply
# over the API is reasoning and an answer.
API_CASES = {**CASES, "deepseek_r1": ("Weather needed.\n</think>\n\nIt is sunny in Paris.",
                                      "It is sunny in Paris.", "Weather needed.\n", [])}


@pytest.fixture
def served(tmp_path, request):
    family = request.param
    served = _Served(FamilyLoopBackend(tmp_path, family, (API_CASES[family][0],), chunk_size=64))
    yield family, served
    served.close()


@pytest.mark.parametrize("served", sorted(API_CASES), indirect=True)
def test_each_format_through_the_api_streamed_and_not(served) -> None:
    family, s = served
    _, answer, reasoning, calls = API_CASES[family]
    tools = TOOLS if calls else None
    kw = dict(model=family, messages=QUESTION, max_tokens=400, temperature=0, **({"tools": tools} if tools else {}))
    if family == "deepseek_r1":  # its generation prompt opens the reasoning block when thinking is on
        kw["extra_body"] = {"chat_template_kwargs": {"enable_thinking": True}}
    r = s.client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == ("tool_calls" if calls else "stop")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []] == [
        ("get_weather", c) for c in calls]
    assert len({c.id for c in msg.tool_calls or []}) == len(calls)
    assert all(c.type == "function" for c in msg.tool_calls or [])
    assert (msg.content or "").strip() == answer
    assert ((msg.model_extra or {}).get("reasoning_content") or "") == reasoning
    for marker in ("<tool_call>", "[TOOL_CALLS]", "<think>", "</think>", "tool▁call"):
        assert marker not in (msg.content or "")
    # The request rendered the tools through the family's own template.
    prompt_text = s.backend.tokenizer.decode(s.backend.prompt_ids[-1])
    assert ("get_weather" in prompt_text) == bool(tools)

    content, streamed_reasoning, streamed_calls, finish, chunks = _stream(s.client, **kw)
    assert finish == ("tool_calls" if calls else "stop") and chunks > 2
    assert content.strip() == answer and streamed_reasoning == reasoning
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed_calls] == [("get_weather", c) for c in calls]
    assert all(c["id"] for c in streamed_calls)
    assert all(c["pieces"] > 2 for c in streamed_calls)  # the arguments streamed as written


@pytest.mark.parametrize("family", sorted(CASES))
def test_each_format_in_the_window(ui, qtbot, tmp_path, family) -> None:
    _, answer, reasoning, calls = CASES[family]
    w = ui.window(FamilyLoopBackend(tmp_path, family, (CASES[family][0],), chunk_size=64))
    pane = w.area.current_pane()
    if reasoning and pane.thinking is False:  # DeepSeek R1's template reasons when asked to
        pane.think_toggle.click()
        assert pane.thinking is True
    send(qtbot, pane, "What is the weather in Paris?")
    wait_idle(qtbot, pane)
    entry = pane.transcript.entries[-1]
    assert [(n, json.loads(a)) for n, a in entry.tool_calls] == [("get_weather", c) for c in calls]
    assert entry.answer.strip() == answer
    assert entry.reasoning == reasoning
    text = pane.transcript.toPlainText()
    assert text.count("⚙ get_weather") == len(calls)
    for marker in ("<tool_call>", "[TOOL_CALLS]", "<think>", "tool▁call", "<|tool_call"):
        assert marker not in text
    if reasoning:
        assert "▸ Thought for" in text and reasoning.strip() not in text  # collapsed
        assert "reasoning " in entry.footer and " · answer " in entry.footer


def _spelled(tok, ids) -> str:
    """Prompt ids as text, control tokens by name."""
    return "".join(special_text(tok, t) or tok.token_bytes(t).decode("utf-8", "replace") for t in ids)


def test_the_think_toggle_sets_the_templates_switch_and_is_remembered(ui, qtbot, tmp_path) -> None:
    backend = FamilyLoopBackend(tmp_path, "qwen3", ("<think>\nHm.\n</think>\n\nSunny.", "Sunny."))
    w = ui.window(backend)
    pane = w.area.current_pane()
    toggle = pane.think_toggle
    assert toggle.isVisibleTo(pane) and toggle.isChecked()  # Qwen3 reasons unless told not to
    send(qtbot, pane, "Weather?")
    wait_idle(qtbot, pane)
    first = _spelled(backend.tokenizer, backend.prompt_ids[-1])
    assert first.rstrip().endswith("<|im_start|>assistant")  # the template's own default
    toggle.click()  # off: the template closes the reasoning block itself
    assert not toggle.isChecked() and pane.thinking is False
    send(qtbot, pane, "And tomorrow?")
    wait_idle(qtbot, pane)
    second = _spelled(backend.tokenizer, backend.prompt_ids[-1])
    assert second.endswith("<think>\n\n</think>\n\n")
    entry = pane.transcript.entries[-1]
    assert entry.answer.strip() == "Sunny." and not entry.reasoning
    from turbospark_app.ui.prefs.generation import DEFAULTS

    pane.apply_settings({k: v for k, v in DEFAULTS.items() if k != "thinking"}, None)  # the dialog's OK
    assert pane.thinking is False and not toggle.isChecked()
    ui.close(w)
    again = ui.window(FamilyLoopBackend(tmp_path, "qwen3", ("Sunny.",)))  # a restart
    pane = again.area.current_pane()
    assert pane.think_toggle.isVisibleTo(pane) and not pane.think_toggle.isChecked()


def test_no_think_toggle_without_a_switch_or_in_raw_completion(ui, qtbot, tmp_path) -> None:
    from ui_fakes import EngineLoopBackend

    w = ui.window(EngineLoopBackend())  # ChatML: no switch
    pane = w.area.current_pane()
    assert not pane.think_toggle.isVisibleTo(pane) and pane.thinking is None
    ui.close(w)
    w = ui.window(FamilyLoopBackend(tmp_path, "qwen3", ("x",)))
    pane = w.area.current_pane()
    assert pane.think_toggle.isVisibleTo(pane)
    pane.raw_toggle.click()  # raw completion: no template, so no switch either
    assert not pane.think_toggle.isVisibleTo(pane)
    pane.raw_toggle.click()
    assert pane.think_toggle.isVisibleTo(pane)
