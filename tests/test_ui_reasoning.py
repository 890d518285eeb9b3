"""The window shows a reply's reasoning collapsed above the answer ("Thought for … · N tokens",
click to open) and its tool calls as cards; the figures under it count reasoning and answer
tokens apart. The reply runs through the engine's step loop (scripted producer) with the Qwen3
family's real template as the model's."""

from __future__ import annotations

import json

from PySide6.QtCore import QUrl

from family_gguf import template_source
from ui_fakes import EngineLoopBackend, send, wait_idle

REPLY = ('<think>\nThe user asks for weather.\n</think>\n\nChecking now.\n<tool_call>\n'
         '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


class QwenLoop(EngineLoopBackend):
    def model_info(self):
        return {**super().model_info(), "chat_template": template_source("qwen3")}


def test_reasoning_collapsed_above_the_answer_and_a_tool_card(ui, qtbot) -> None:
    w = ui.window(QwenLoop(replies=(REPLY,)))
    pane = w.area.current_pane()
    send(qtbot, pane, "Weather in Paris?")
    wait_idle(qtbot, pane)
    t = pane.transcript
    entry = t.entries[-1]
    assert entry.reasoning == "The user asks for weather.\n"
    assert entry.answer.strip() == "Checking now."
    assert [(n, json.loads(a)) for n, a in entry.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert entry.reasoning_label.startswith("Thought for ") and "tokens" in entry.reasoning_label
    text = t.toPlainText()
    assert "▸ Thought for" in text and "⚙ get_weather" in text and '"city": "Paris"' in text
    assert "The user asks for weather." not in text  # collapsed
    assert "<tool_call>" not in text and "<think>" not in text
    assert "reasoning " in entry.footer and " · answer " in entry.footer
    # Click: the reasoning opens above the answer, and closes again.
    t._anchor_clicked(QUrl(f"ts:think:{entry.message_id}"))
    text = t.toPlainText()
    assert "▾ Thought for" in text
    assert text.index("The user asks for weather.") < text.index("Checking now.")
    t._anchor_clicked(QUrl(f"ts:think:{entry.message_id}"))
    assert "The user asks for weather." not in t.toPlainText()


def test_the_split_and_its_figures_survive_a_restart(ui, qtbot) -> None:
    w = ui.window(QwenLoop(replies=(REPLY,)))
    pane = w.area.current_pane()
    send(qtbot, pane, "Weather in Paris?")
    wait_idle(qtbot, pane)
    label = pane.transcript.entries[-1].reasoning_label
    ui.close(w)
    again = ui.window(QwenLoop(replies=(REPLY,)))
    entry = again.area.current_pane().transcript.entries[-1]
    assert entry.reasoning_label == label and entry.tool_calls
