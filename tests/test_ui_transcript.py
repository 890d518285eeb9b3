"""The transcript: O(delta) streaming appends, one Markdown render at the end, palette re-render."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontDatabase, QPalette, QTextCursor

from turbospark_app.ui.pane.transcript import Entry, Transcript

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def history(tokens: int) -> list[Entry]:
    """Finished messages totalling about `tokens` word-tokens."""
    entries: list[Entry] = []
    n = 0
    while n < tokens:
        words = [WORDS[(n + i) % len(WORDS)] for i in range(100)]
        n += 100
        text = " ".join(words[:50]) + "\n\n" + " ".join(words[50:])
        entries.append(Entry("user", "question " + str(n)))
        entries.append(Entry("assistant", text, footer="prompt 1 tok · new 100 tok"))
    return entries


class ChangeLog:
    """Records QTextDocument.contentsChange(position, removed, added)."""

    def __init__(self, view: Transcript) -> None:
        self.changes: list[tuple[int, int, int]] = []
        view.document().contentsChange.connect(lambda p, r, a: self.changes.append((p, r, a)))


def deltas(n: int) -> list[str]:
    out = []
    for i in range(n):
        word = WORDS[i % len(WORDS)]
        out.append("\n\n" if i % 97 == 96 else " " + word)
    return out


def test_streaming_appends_touch_only_the_delta(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_entries(history(5000))  # a 5,000-token transcript above the reply
    before = view.document().toPlainText()
    view.begin_reply()
    reply_start = view.document().characterCount() - 1
    log = ChangeLog(view)
    stream = deltas(5000)  # ...and a 5,000-token reply
    for i in range(0, len(stream), 7):
        batch = stream[i:i + 7]
        end = view.document().characterCount() - 1
        n = len(log.changes)
        for d in batch:
            view.append_delta(d)
        assert log.changes[n:] == []  # written at the event-loop turn, all at once
        view.flush_stream()
        added = sum(len(d) for d in batch)
        if "\n\n" in batch:  # a paragraph settled: drawn in place of its plain text
            assert all(p >= reply_start for p, _, _ in log.changes[n:])
        else:  # one change: at the end, nothing removed, the deltas added
            assert log.changes[n:] == [(end, 0, added)]
    assert view.streamed_text() == "".join(stream)
    assert view.document().toPlainText().startswith(before)
    assert view.document().toPlainText().endswith(stream[-1])


def test_end_reply_renders_markdown_in_place_once(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.set_entries([Entry("user", "show me code")])
    prefix = view.document().toPlainText()
    view.begin_reply()
    text = "Here is **bold** and `inline`.\n\n```python\nprint('hi')\n```\n\nDone."
    for piece in text.split(" "):
        view.append_delta(piece + " ")
    log = ChangeLog(view)
    view.end_reply(text, "prompt 12 tok · new 9 tok", stopped=False)
    plain = view.document().toPlainText()
    assert plain.startswith(prefix)  # the history was not touched
    assert "**" not in plain and "```" not in plain and "print('hi')" in plain
    assert "prompt 12 tok" in plain
    body_start = min(p for p, _, _ in log.changes)
    assert body_start >= len(prefix)
    # The bold run is bold; the code block and inline code get the system's fixed font. What
    # is asserted is what the code decides (family + monospace hint), not QFontInfo's
    # fixedPitch() heuristic, which says False for e.g. Noto Sans Mono.
    doc = view.document()
    bold = doc.find("bold")
    assert bold.charFormat().fontWeight() > 500
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    code = doc.find("print('hi')")
    inline = doc.find("inline")
    for cursor in (code, inline):
        c = QTextCursor(cursor)
        c.setPosition(cursor.selectionStart() + 1)
        fmt = c.charFormat()
        assert fmt.fontFamilies() == [mono]
        assert fmt.fontStyleHint() == QFont.StyleHint.Monospace
    assert view.entries[-1].text == text and not view.is_streaming


def test_a_reply_keeps_its_line_breaks(qtbot) -> None:
    """A poem's lines stay lines (Markdown alone would join them with spaces); code keeps its text."""
    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    text = "Waves fold on the shore\nsalt wind\n\n```\nx = 1\ny = 2\n```"
    view.end_reply(text, "new 9 tok", stopped=False)
    plain = view.document().toPlainText()
    assert "shore salt" not in plain
    assert "Waves fold on the shore" in plain and "salt wind" in plain
    assert "x = 1\ny = 2" in plain and "x = 1  " not in plain
    assert view.entries[-1].text == text  # Copy gives the reply as generated


def test_a_stopped_empty_reply_says_so(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    view.end_reply("", "stopped in 3 ms (during prefill)", stopped=True)
    plain = view.document().toPlainText()
    assert "stopped before any text" in plain and "■ stopped" in plain


def test_truncate_removes_exactly_the_failed_turn(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.set_entries([Entry("user", "one"), Entry("assistant", "reply one")])
    kept = view.document().toPlainText()
    mark = view.mark()
    view.append_message("user", "two")
    view.begin_reply()
    view.append_delta("partial")
    view.truncate(mark)
    assert view.document().toPlainText() == kept
    assert [e.text for e in view.entries] == ["one", "reply one"] and not view.is_streaming
    view.append_error("The model failed")
    assert "The model failed" in view.document().toPlainText()


def test_palette_change_rerenders_and_keeps_streaming(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.set_entries([Entry("user", "hi"), Entry("assistant", "**hello**", footer="stats")])
    view.begin_reply()
    view.append_delta("streaming so far")
    text_before = view.document().toPlainText()
    pal = view.palette()
    pal.setColor(QPalette.ColorRole.Base, pal.color(QPalette.ColorRole.Text))
    pal.setColor(QPalette.ColorRole.Text, pal.color(QPalette.ColorRole.Window))
    view.setPalette(pal)
    assert view.document().toPlainText() == text_before
    assert view.is_streaming and view.streamed_text() == "streaming so far"
    view.append_delta(" and more")
    view.end_reply("streaming so far and more", "")
    assert view.document().toPlainText().endswith("streaming so far and more")


def test_a_view_closed_while_a_reply_streams_leaves_no_timer_behind(qtbot) -> None:
    """The streaming reply's timers (the next turn's write, a chunk's retry) die with their
    view: none fires on a deleted transcript (pytest-qt fails a test on an error in a slot)."""
    view = Transcript()
    view.begin_reply()
    view.append_delta("Para.\n\nmore\n")  # a write is scheduled for the next turn...
    view._live._retry(0.05)  # noqa: SLF001 (...and a settle retry)
    view.deleteLater()
    qtbot.wait(200)
