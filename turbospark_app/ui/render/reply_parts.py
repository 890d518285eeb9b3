"""A reply's reasoning and tool calls in the transcript: the reasoning block collapsed above the
answer ("Thought for 3.2 s · 214 tokens", click to open: href ts:think:<message id>) and a card
per tool call (the function's name, its arguments pretty-printed).

The reply's text is split with the family's own markers (`chat.formats`, from the loaded model's
chat template); the stored text stays whole, so the next prompt gets what the template makes of
it (most templates drop old reasoning) and Copy copies what the model wrote."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtGui import QColor, QFont, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFrameFormat

from ...chat.formats import ToolFormat, detect_format, detect_reasoning, forced_call_format, ReplyParser
from ...service.events import TurnStats
from ..formatting import seconds_label

TOOL_HUE = QColor(38, 139, 210)


def split_reply(text: str, template_source: str | None) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(reasoning, answer, ((name, arguments JSON), ...)) of a reply's whole text."""
    markers = detect_reasoning(template_source)
    # Before the model is known (a restored conversation shown while it loads): the most
    # common format, Hermes' <tool_call>.
    fmt: ToolFormat | None = detect_format(template_source or "<tool_call>")
    parser = ReplyParser(fmt, (markers.open, markers.close))
    parser.feed(text)
    parser.finish()
    r = parser.reply
    return r.reasoning, r.content, tuple((c.name, c.arguments) for c in r.tool_calls)


def reasoning_label(stats: dict[str, Any] | None) -> str:
    """ "Thought for 3.2 s · 214 tokens" (what the figures know of it)."""
    s = TurnStats.from_json(stats or {})
    parts = []
    if s.reasoning_seconds:
        parts.append(f"Thought for {seconds_label(s.reasoning_seconds)}")
    if s.reasoning_tokens:
        parts.append(f"{s.reasoning_tokens} tokens")
    return " · ".join(parts) or "Thought"


def apply_split(entry: Any, template_source: str | None, stats: dict[str, Any] | None) -> None:
    """Fill an assistant entry's reasoning, answer and tool calls from its text."""
    entry.reasoning, entry.answer, entry.tool_calls = split_reply(entry.text, template_source)
    entry.reasoning_label = reasoning_label(stats) if entry.reasoning else ""


def apply_parts(entry: Any, parts: Any, template_source: str | None) -> None:
    """An agent reply (its stored parts before the text): each step's answer text, each call
    with its result on its card, then the final answer (already split into `entry`)."""
    from ...conversations.parts import TEXT, TOOL_CALL, TOOL_RESULT

    parts = [p for p in parts or () if p.kind in (TEXT, TOOL_CALL, TOOL_RESULT)]  # (sources: apart)
    if not parts:
        return
    results = {p.call_id: p for p in parts if p.kind == TOOL_RESULT}
    answers, calls, shown = [], [], []
    for p in parts:
        if p.kind == TEXT:
            _, answer, found = split_reply(p.text, template_source)
            if not found:  # a forced call: bare JSON, not the template family's markup
                forced = ReplyParser(forced_call_format())
                forced.feed(p.text)
                forced.finish()
                answer = forced.reply.content if forced.reply.tool_calls else answer
            if answer.strip():
                answers.append(answer.strip())
        elif p.kind == TOOL_CALL:
            calls.append((p.name or "?", p.arguments or "{}"))
            r = results.get(p.call_id)
            if r is None:
                shown.append("(no result)")
            else:
                mark = "✗" if r.meta.get("is_error") else "✓"
                shown.append(f"{mark} {seconds_label(float(r.meta.get('seconds') or 0))}\n{r.text}")
    entry.answer = "\n\n".join([*answers, (entry.answer if entry.answer is not None else entry.text)])
    entry.tool_calls = (*calls, *entry.tool_calls)
    entry.tool_results = (*shown, *("" for _ in entry.tool_calls[len(calls):]))


def insert_reasoning(view: Any, cursor: QTextCursor, entry: Any) -> None:
    """The collapsed line (or, opened, the reasoning in a quiet frame), then a new block."""
    fmt = view.small_format()  # noqa: SLF001 (the transcript's own formats)
    link = QTextCharFormat(fmt)
    link.setAnchor(True)
    link.setAnchorHref(f"ts:think:{entry.message_id}")
    link.setForeground(view.palette().color(QPalette.ColorRole.Link))
    arrow = "▾" if entry.reasoning_open else "▸"
    cursor.insertText(f"{arrow} {entry.reasoning_label}", link)
    if entry.reasoning_open:
        frame = QTextFrameFormat()
        frame.setPadding(6)
        frame.setBorder(0)
        frame.setBackground(view._tint(0.06, view.palette().color(QPalette.ColorRole.Text)))  # noqa: SLF001
        cursor.insertFrame(frame)
        quiet = QTextCharFormat(view.plain_format())  # noqa: SLF001
        quiet.setForeground(view.palette().color(QPalette.ColorRole.PlaceholderText))
        for i, line in enumerate(entry.reasoning.rstrip("\n").split("\n")):
            if i:
                cursor.insertBlock(QTextBlockFormat(), quiet)
            cursor.insertText(line, quiet)
        cursor.movePosition(QTextCursor.MoveOperation.End)
    else:
        cursor.insertBlock(view._body_block_format(), view.plain_format())  # noqa: SLF001


def insert_tool_cards(view: Any, cursor: QTextCursor, entry: Any) -> None:
    """One framed card per call: "⚙ name" in bold, then its arguments (and, for an agent
    reply, its result: "✓ 0.12 s" and the text the model read)."""
    results = getattr(entry, "tool_results", ()) or ()
    for i, (name, arguments) in enumerate(entry.tool_calls):
        frame = QTextFrameFormat()
        frame.setPadding(8)
        frame.setTopMargin(4)
        frame.setBorder(1)
        frame.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        frame.setBorderBrush(view._tint(0.5, TOOL_HUE))  # noqa: SLF001
        frame.setBackground(view._tint(0.08, TOOL_HUE))  # noqa: SLF001
        cursor.insertFrame(frame)
        bold = QTextCharFormat(view.plain_format())  # noqa: SLF001
        bold.setFontWeight(QFont.Weight.Bold)
        cursor.insertText(f"⚙ {name}", bold)
        try:
            pretty = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
        except json.JSONDecodeError:
            pretty = arguments
        mono = QTextCharFormat(view.plain_format())  # noqa: SLF001
        mono.setFontFamilies(["monospace"])
        mono.setFontFixedPitch(True)
        for line in pretty.split("\n"):
            cursor.insertBlock(QTextBlockFormat(), mono)
            cursor.insertText(line, mono)
        result = results[i] if i < len(results) else ""
        if result:
            head, _, body = result.partition("\n")
            cursor.insertBlock(QTextBlockFormat(), bold)
            cursor.insertText(f"→ {head}", bold)
            for line in (body if len(body) <= 2000 else body[:2000] + " …").split("\n"):
                cursor.insertBlock(QTextBlockFormat(), mono)
                cursor.insertText(line, mono)
        cursor.movePosition(QTextCursor.MoveOperation.End)
