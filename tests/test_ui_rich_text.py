"""A reply as the transcript draws it: code coloured with a Copy link, math as images (source
when it does not render), tables, links opened only on click, the HTML export."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication, QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QFileDialog
from pygments.token import Keyword, Name
from ui_fakes import EngineLoopBackend, send, wait_idle

from turbospark_app.ui.render import live_reply
from turbospark_app.ui.render.code_blocks import code_block_id, mix
from turbospark_app.ui.render.highlight import token_format
from turbospark_app.ui.render.html_export import conversation_html
from turbospark_app.ui.theme import palette_is_dark
from turbospark_app.ui.pane.transcript import Entry, Transcript

CODE = "def area(r: float) -> float:\n    return 3.14159 * r ** 2   \n\n\tprint(area(2))"
REPLY = f"```python\n{CODE}\n```\nThen run:\n\n```bash\nls -l | wc -l\n```\n"


def rendered(qtbot, text: str) -> Transcript:
    view = Transcript()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    view.begin_reply()
    view.append_delta(text)
    view.end_reply(text, "new 9 tok")
    view.finish_colours()
    return view


def char_format_at(view: Transcript, needle: str, offset: int = 0):  # type: ignore[no-untyped-def]
    found = view.document().find(needle)
    assert not found.isNull(), needle
    c = QTextCursor(view.document())
    c.setPosition(found.selectionStart() + offset + 1)
    return c.charFormat()


def test_code_is_coloured_by_token_type(qtbot) -> None:
    view = rendered(qtbot, REPLY)
    dark = palette_is_dark(view.palette())
    keyword = token_format(Keyword, dark).foreground().color()
    assert char_format_at(view, "def area").foreground().color() == keyword
    assert char_format_at(view, "return").foreground().color() == keyword
    func = token_format(Name.Function, dark).foreground().color()
    assert char_format_at(view, "area(r").foreground().color() == func != keyword
    assert char_format_at(view, "ls -l").fontFixedPitch()
    header = view.document().find("Python").block()
    assert code_block_id(header) == 0 and "Copy" in header.text()
    assert "Bash" in view.document().find("Bash").block().text()


def test_a_reply_that_opens_with_a_fence_has_its_first_line_in_the_box(qtbot) -> None:
    """The glitch: the first code line took the body paragraph's format (drawn outside the
    block's box, left out of Copy Code Block)."""
    view = rendered(qtbot, "```python\nfirst = 1\nsecond = 2\n```\n# A heading\n> a quote")
    first = view.document().find("first = 1")
    background = first.block().blockFormat().background()
    assert code_block_id(first.block()) == 0 and background.style() != Qt.BrushStyle.NoBrush
    assert background == view.document().find("second = 2").block().blockFormat().background()
    assert view.code_block_at(first.selectionStart()) == "first = 1\nsecond = 2"
    assert view.document().find("A heading").block().blockFormat().headingLevel() == 1
    assert quote_bar(view, "a quote") == 3


def quote_bar(view: Transcript, needle: str) -> float:
    """The width of the bar left of the quote holding `needle` (0: not in a quote)."""
    table = QTextCursor(view.document().find(needle)).currentTable()
    if table is None or (table.rows(), table.columns()) != (1, 1):
        return 0
    return table.cellAt(0, 0).format().toTableCellFormat().leftBorder()


def click_text(qtbot, view: Transcript, needle: str) -> None:
    found = view.document().find(needle)
    c = QTextCursor(view.document())
    c.setPosition(found.selectionStart() + 1)
    view.setTextCursor(c)
    view.ensureCursorVisible()
    rect = view.cursorRect(c)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_copy_link_puts_the_exact_code_on_the_clipboard(qtbot) -> None:
    view = rendered(qtbot, REPLY)
    QGuiApplication.clipboard().setText("before")
    click_text(qtbot, view, "Copy")
    assert QGuiApplication.clipboard().text() == CODE  # trailing spaces, tab, blank line kept
    block = view.document().find("ls -l").block()
    assert view.code_block_at(block.position()) == "ls -l | wc -l"


def test_streaming_colours_only_the_changed_lines(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    for piece in ["Intro\n```py", "thon\nx = 1", "\ny = ", "2\n", "z"]:
        view.append_delta(piece)
        qtbot.wait(1)  # the colours follow once per event-loop turn
    colours = view._colours  # noqa: SLF001
    # Lexed once each, when complete: "x = 1" and "y = 2"; never the prose, the fences, the
    # line still being written, or a finished line again.
    assert colours.lexed_lines == 2
    block = view.document().find("x = 1").block()
    formats = block.layout().formats()
    assert formats and formats[0].format.fontFixedPitch() and len(formats) > 2  # coloured runs
    assert not view.document().find("Intro").block().layout().formats()
    assert code_block_id(block) is None  # (the block is still being written: plain text)


def test_a_code_block_is_drawn_with_its_copy_button_when_its_fence_closes(qtbot) -> None:
    """While the reply streams: the paragraph before a block once the block begins, the block
    (header, colours, Copy) once its fence closes; only the chunk being written stays plain."""
    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    for piece in ["Some **intro**\n", "```py", "thon\nx = 1\n", "y = 2\n", "```\n", "after ", "that"]:
        view.append_delta(piece)
        qtbot.wait(1)
    doc = view.document()
    qtbot.waitUntil(lambda: code_block_id(doc.find("x = 1").block()) is not None, timeout=10000)
    assert view.is_streaming and "**" not in doc.toPlainText()  # the intro is drawn as Markdown
    assert char_format_at(view, "intro").fontWeight() > 500
    assert "Copy" in doc.find("Python").block().text() and "```" not in doc.toPlainText()
    assert doc.toPlainText().endswith("after that")  # the chunk being written: plain
    assert view._rich.codes == ["x = 1\ny = 2"]  # noqa: SLF001 (what its Copy link gives)
    text = view.streamed_text()
    view.end_reply(text, "new 9 tok")
    assert doc.toPlainText().count("x = 1") == 1 and view._rich.codes == ["x = 1\ny = 2"]  # noqa: SLF001


def test_math_is_drawn_and_copies_as_latex(qtbot) -> None:
    text = "Euler: $e^{i\\pi} + 1 = 0$ and\n\n$$\n\\int_0^1 x\\,dx = \\frac{1}{2}\n$$\n\nand \\(a^2\\)."
    view = rendered(qtbot, text)
    plain = view.document().toPlainText()
    assert "\\pi" not in plain and "\\frac" not in plain and plain.count("\ufffc") == 3
    view.selectAll()
    copied = view.createMimeDataFromSelection().text()
    assert "$e^{i\\pi} + 1 = 0$" in copied and "$$\\int_0^1 x\\,dx = \\frac{1}{2}$$" in copied
    assert "$a^2$" in copied
    display = view.document().find("\ufffc", view.document().find("and").selectionEnd())
    assert display.block().blockFormat().alignment() & Qt.AlignmentFlag.AlignHCenter


def test_a_math_fence_is_a_display_formula(qtbot) -> None:
    view = rendered(qtbot, "Area:\n\n```math\nA = \\pi r^2\n```\n")
    assert view.document().toPlainText().count("\ufffc") == 1 and "\\pi" not in view.document().toPlainText()
    view.selectAll()
    assert "$$A = \\pi r^2$$" in view.createMimeDataFromSelection().text()


def test_a_formula_that_fails_shows_its_source(qtbot) -> None:
    view = rendered(qtbot, "Broken: $\\frac{1{$ here.")
    plain = view.document().toPlainText()
    assert "$\\frac{1{$" in plain and "\ufffc" not in plain


def test_dollar_amounts_stay_text(qtbot) -> None:
    text = "It costs $5 and $10, or $5-$10 a month; US$3 too."
    view = rendered(qtbot, text)
    plain = view.document().toPlainText()
    assert "\ufffc" not in plain and "$5 and $10, or $5-$10" in plain


def test_tables_lists_and_quotes(qtbot) -> None:
    view = rendered(qtbot, "| Name | Score |\n|---|---:|\n| ada | 3 |\n| bob | 12 |\n\n- one\n- two\n\n"
                           "> said *this*\n> ```python\n> x = 1\n> ```\nafter")
    table = QTextCursor(view.document().find("ada")).currentTable()
    assert table is not None and (table.rows(), table.columns()) == (3, 2)
    assert table.format().border() == 1 and table.format().cellPadding() == 5  # ruled as GitHub (not Qt's 4)
    header = table.cellAt(0, 0).format().background().color()
    assert header == mix(view.palette(), 0.06) != table.cellAt(1, 0).format().background().color()
    assert view.document().find("one").block().textList() is not None
    quote = view.document().find("said")
    assert quote.charFormat().foreground().color() == view.palette().color(view.palette().ColorRole.PlaceholderText)
    assert quote_bar(view, "said") == 3 and quote_bar(view, "after") == 0
    assert code_block_id(view.document().find("x = 1").block()) is not None  # code inside the quote
    assert quote_bar(view, "x = 1") == 3


class UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url.toString())


def test_links_open_in_the_browser_only_on_click(qtbot) -> None:
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("https", catcher, "open")
    try:
        view = rendered(qtbot, "See [the docs](https://example.org/docs) for more.")
        qtbot.wait(50)
        assert catcher.urls == []  # drawing a link opens nothing
        click_text(qtbot, view, "the docs")
        assert catcher.urls == ["https://example.org/docs"]
    finally:
        QDesktopServices.unsetUrlHandler("https")


def test_html_export_shows_what_the_window_shows(qtbot) -> None:
    view = Transcript()
    qtbot.addWidget(view)
    html = conversation_html("Areas", [Entry("user", "area?"), Entry("assistant", REPLY + "\n$$r^2$$\n")],
                             view.palette())
    dark = palette_is_dark(view.palette())
    assert "<title>Areas</title>" in html and "area?" in html
    assert f"color:{token_format(Keyword, dark).foreground().color().name()}" in html
    assert "data:image/svg+xml;base64," in html and "ts:" not in html and ">Copy<" not in html


def test_exports_from_the_conversation_menu_keep_sources(ui, qtbot, tmp_path: Path, monkeypatch) -> None:
    reply = "```python\nx = 1\n```\n\n$$\\sqrt{2}$$"
    w = ui.window(EngineLoopBackend(replies=(reply,)))
    pane = w.area.current_pane()
    send(qtbot, pane, "show")
    wait_idle(qtbot, pane)
    from PySide6.QtGui import QAction

    target = tmp_path / "out.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    w.findChild(QAction, "actionExportMarkdown").trigger()
    assert reply in target.read_text()  # fences and math source as written
    target = tmp_path / "out.html"
    w.findChild(QAction, "actionExportHtml").trigger()
    html = target.read_text()
    assert "x = 1" in re.sub(r"<[^>]+>", "", html) and "data:image/svg+xml;base64," in html


def test_colours_follow_the_dark_palette(qtbot) -> None:
    from turbospark_app.ui.theme import dark_palette

    view = Transcript()
    qtbot.addWidget(view)
    view.setPalette(dark_palette(view.palette()))
    view.set_entries([Entry("assistant", REPLY)])
    assert palette_is_dark(view.palette())
    keyword = token_format(Keyword, True).foreground().color()
    assert keyword != token_format(Keyword, False).foreground().color()
    assert char_format_at(view, "def area").foreground().color() == keyword


def test_a_big_block_is_drawn_at_once_and_coloured_in_slices(qtbot) -> None:
    from turbospark_app.ui.render.code_blocks import SYNC_CHARS
    from turbospark_app.ui.render.highlight import TOKENS

    body = "\n".join(f"def f{i}(x):\n    return x + {i}  # line {i}" for i in range(400))
    assert len(body) > SYNC_CHARS
    view = Transcript()
    qtbot.addWidget(view)
    view.show()
    view.begin_reply()
    view.end_reply(f"```python\n{body}\n```", "")
    queue = view._rich.colours  # noqa: SLF001
    assert queue.jobs and view.code_block_at(view.document().find("def f399").selectionStart()) == body
    plain = char_format_at(view, "def f399").foreground().color()
    keyword = token_format(Keyword, palette_is_dark(view.palette())).foreground().color()
    assert plain != keyword  # drawn before it is coloured
    qtbot.waitUntil(lambda: not queue.jobs, timeout=20000)
    assert queue.slices > 1  # the colouring took several event-loop turns, not one
    assert char_format_at(view, "def f399").foreground().color() == keyword
    assert TOKENS.has("python", body)  # drawn again, it is coloured from the cache


def test_a_streaming_replys_formulas_are_made_ahead_on_a_worker(qtbot) -> None:
    from turbospark_app.ui.render.math import MATH

    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    formula = "\\oint_{\\partial S} \\omega_{43} = \\int_S d\\omega_{43}"
    before_ahead, before_here = MATH.prefetched, MATH.renders
    for piece in ["Stokes: $$", formula, "$$\n\n", "More text, still streaming"]:
        view.append_delta(piece)
        qtbot.wait(1)
    qtbot.waitUntil(lambda: MATH.prefetched > before_ahead, timeout=10000)
    view.end_reply(view.streamed_text(), "")
    assert MATH.renders == before_here  # the final rendering found it made
    assert view.document().toPlainText().count("\ufffc") == 1


def test_long_code_lines_scroll_sideways_instead_of_wrapping(qtbot) -> None:
    long_line = "x = [" + ", ".join(str(i) for i in range(150)) + "]"
    view = rendered(qtbot, "Text that wraps like prose does. " * 20 + f"\n\n```python\n{long_line}\n```")
    qtbot.waitUntil(lambda: view.horizontalScrollBar().maximum() > 0)
    code = view.document().find("x = [0, 1").block()
    assert code.layout().lineCount() == 1  # one line, however long
    prose = view.document().find("Text that wraps").block()
    assert prose.layout().lineCount() > 1  # prose still wraps at the window's width


def test_a_streaming_replys_finished_code_blocks_are_lexed_ahead(qtbot) -> None:
    from turbospark_app.ui.render.highlight import TOKENS

    code = "def ahead_43(n):\n    return [i * i for i in range(n)]"
    text = f"Squares:\n```python\n{code}\n```\nand more prose"
    view = Transcript()
    qtbot.addWidget(view)
    view.begin_reply()
    before = TOKENS.prefetched
    for i in range(0, len(text), 5):
        view.append_delta(text[i:i + 5])
        qtbot.wait(1)
    qtbot.waitUntil(lambda: TOKENS.prefetched > before and TOKENS.has("python", code), timeout=10000)
    misses = TOKENS.misses
    view.end_reply(text, "")
    assert TOKENS.misses == misses  # the final rendering found the block lexed
    assert code_block_id(view.document().find("ahead_43").block()) is not None


def test_chunks_leave_no_blank_paragraph_before_a_list_or_a_table(qtbot) -> None:
    """A reply is drawn chunk by chunk: a list or a table starting a chunk sits right under the
    block before it, as in one Markdown text (no empty paragraph in the heading's font)."""
    view = rendered(qtbot, "## Steps\n\n1. one\n2. two\n\nText.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                           "```\nplain\n```\n- after code\n")
    doc = view.document()
    empties = [b.blockNumber() for b in _blocks(doc) if b.length() == 1 and b.next().isValid()]
    assert empties == [], [(_blocks(doc)[n - 1].text(), _blocks(doc)[n + 1].text()) for n in empties]
    assert doc.find("one").block().previous().text() == "Steps"
    assert QTextCursor(doc.find("Text.")).block().next().isValid()


def _blocks(doc):  # type: ignore[no-untyped-def]
    out, b = [], doc.begin()
    while b.isValid():
        out.append(b)
        b = b.next()
    return out


SAMPLE = ("Intro with $x^2$ inline.\n\n# Steps\n\n1. one\n\n2. two\n   more\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
          "```python\ndef f(x):\n    return x * 2\n```\nAfter the code.\n\n> quoted *text*\n\n$$\n\\frac{1}{2}\n$$\n\n"
          "```\nls -l\n```\n- last item\n\nThe end.")


def test_a_streamed_reply_ends_as_the_same_document_as_one_drawn_at_once(qtbot) -> None:
    """Chunks drawn while the reply streams are those of the finished reply: its end draws
    only what is left, and the document is the one a reply drawn in one go gives."""
    streamed = Transcript()
    qtbot.addWidget(streamed)
    streamed.begin_reply()
    for i in range(0, len(SAMPLE), 3):
        streamed.append_delta(SAMPLE[i:i + 3])
        streamed.flush_stream()
        qtbot.wait(0)
    qtbot.waitUntil(lambda: (streamed.flush_stream(), len(streamed._live.drawn))[1] >= 9, timeout=10000)  # noqa: SLF001
    drawn_while_streaming = len(streamed._live.drawn)  # noqa: SLF001
    streamed.end_reply(SAMPLE, "new 99 tok")
    streamed.finish_colours()
    at_once = Transcript()
    qtbot.addWidget(at_once)
    at_once.set_entries([Entry("assistant", SAMPLE, footer="new 99 tok")])
    at_once.finish_colours()
    assert streamed.document().toHtml() == at_once.document().toHtml()


def test_panes_share_one_frames_chunk_drawing(qtbot, monkeypatch) -> None:
    """Two panes streaming settle their chunks in turns: a frame's drawing time is shared, and
    a chunk left over is drawn in a later frame without waiting for another delta."""
    monkeypatch.setattr(live_reply, "SETTLE_SECONDS", 1e-6)  # one chunk spends a frame's time
    monkeypatch.setattr(live_reply, "FRAME_SECONDS", 0.5)
    monkeypatch.setattr(live_reply._Frame, "start", float("-inf"))  # noqa: SLF001
    views = []
    for _ in range(2):
        view = Transcript()
        qtbot.addWidget(view)
        view.begin_reply()
        view.append_delta("One paragraph.\n\nTwo\n")
        views.append(view)
    for view in views:
        view.flush_stream()
    assert [len(v._live.drawn) for v in views] == [1, 0]  # noqa: SLF001
    qtbot.waitUntil(lambda: len(views[1]._live.drawn) == 1, timeout=5000)  # noqa: SLF001
    assert "One paragraph." in views[1].document().toPlainText()


def test_a_reply_that_ends_other_than_it_streamed_is_drawn_as_it_ends(qtbot) -> None:
    """The chunks drawn while streaming that the finished text does not have (a remote
    server's final text, a continued reply) are taken off: the document is the final text's."""
    finals = ["Para one.\n\n```py\nx = 2\n```\nAnd more.", "Para one.", "```py\nx = 1\n```\n"]
    for final in finals:
        streamed = Transcript()
        qtbot.addWidget(streamed)
        streamed.begin_reply()
        streamed.append_delta("Para one.\n\n```py\nx = 1\n```\nPara three\n\nfour\n")
        qtbot.waitUntil(lambda: (streamed.flush_stream(), len(streamed._live.drawn))[1] == 3, timeout=10000)  # noqa: SLF001
        streamed.end_reply(final, "new 9 tok")
        at_once = Transcript()
        qtbot.addWidget(at_once)
        at_once.set_entries([Entry("assistant", final, footer="new 9 tok")])
        # (a code block taken off keeps its Copy id: the one drawn again has the next)
        ids = re.findall(r"ts:code:(\d+)", streamed.document().toHtml())
        assert [streamed._rich.codes[int(i)] for i in ids] == at_once._rich.codes[:1] * len(ids)  # noqa: SLF001
        same_ids = re.sub(r"ts:code:\d+", "ts:code:n", streamed.document().toHtml())
        assert same_ids == re.sub(r"ts:code:\d+", "ts:code:n", at_once.document().toHtml()), final
