"""The reply splitter: fences, math and money (pure, property-tested)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from turbospark_app.ui.render.markup import settled_chunks, split_chunks, split_fences, split_math, split_quotes

_ATOMS = st.sampled_from([
    "$", "$$", "\\(", "\\)", "\\[", "\\]", "\\$", "`", "``", "x", "a b", " ", "\n", "\n\n", "5", "10",
    "\\frac{1}{2}", "^2", "```", "```py\n", "~~~\n", "\n```\n", "price", "-", "> ", "\n>", "   >",
])


@settings(deadline=None)  # a loaded 2-core machine: no wall-clock limit per example
@given(st.lists(_ATOMS, max_size=40).map("".join))
def test_math_pieces_lose_and_double_nothing(text: str) -> None:
    pieces = split_math(text)
    assert "".join(p.raw for p in pieces) == text
    assert all(p.raw for p in pieces)
    for p in pieces:
        if p.kind == "math":
            assert p.body.strip() and p.body.strip() in p.raw
            assert p.raw.startswith(("$", "\\(", "\\[")) and p.raw.endswith(("$", "\\)", "\\]"))
            assert "\n\n" not in p.raw  # never across a paragraph break
        else:
            assert p.kind == "text"


def _dedent(line: str, n: int) -> str:
    """`line` without up to `n` leading spaces."""
    k = 0
    while k < n and line[k:k + 1] == " ":
        k += 1
    return line[k:]


@settings(deadline=None)
@given(st.lists(_ATOMS, max_size=40).map("".join))
@example(" ```py\n```py\n $")  # an indented fence: its content loses that indent (found by hypothesis)
def test_fence_pieces_lose_and_double_nothing(text: str) -> None:
    pieces = split_fences(text)
    assert "".join(p.raw for p in pieces) == text
    for p in pieces:
        if p.kind == "code":
            assert p.raw.lstrip(" ")[:3] in ("```", "~~~")
            # CommonMark: a fence indented N spaces takes up to N off each line of its content.
            indent = len(p.raw) - len(p.raw.lstrip(" "))
            content = "".join(_dedent(line, indent) for line in p.raw.splitlines(keepends=True)[1:])
            assert p.body in content or not p.body.strip()


@settings(deadline=None)
@given(st.lists(_ATOMS, max_size=40).map("".join))
def test_quote_pieces_lose_and_double_nothing(text: str) -> None:
    pieces = split_quotes(text)
    assert "".join(p.raw for p in pieces) == text
    assert all(a.kind != b.kind for a, b in zip(pieces, pieces[1:]))  # runs are maximal
    for p in pieces:
        if p.kind == "quote":
            assert all(line.lstrip(" ").startswith(">") for line in p.raw.splitlines())
            assert len(p.body) < len(p.raw)


@given(st.lists(st.tuples(st.sampled_from(["$", "US$", "$$"]), st.integers(0, 9999),
                          st.sampled_from([" ", ", ", " and ", "-", "/", " or ", ".\n"])), max_size=8))
def test_amounts_of_money_are_never_math(amounts: list[tuple[str, int, str]]) -> None:
    text = "".join(f"{sign}{n}{sep}" for sign, n, sep in amounts if sign != "$$")
    assert [p for p in split_math(text) if p.kind == "math"] == []


def test_the_forms_models_write() -> None:
    cases = {
        "Euler: $e^{i\\pi}+1=0$.": [("e^{i\\pi}+1=0", False)],
        "inline \\(a^2+b^2\\) here": [("a^2+b^2", False)],
        "display \\[\\int f\\]": [("\\int f", True)],
        "$$\n\\sum_k k\n$$": [("\\sum_k k", True)],
        "costs $5 and $10": [],
        "from $5-$10": [],
        "escaped \\$x$ stays": [],
        "code `$x$` stays": [],
        "``a ` $y$ b`` stays, $z$ not": [("z", False)],
        "$ x$ and $x $": [],
        "$a$ and $b$": [("a", False), ("b", False)],
        "two lines $a\nb$": [],
    }
    for text, want in cases.items():
        got = [(p.body, p.display) for p in split_math(text) if p.kind == "math"]
        assert got == want, text


def test_fences_with_language_indent_and_no_end() -> None:
    pieces = split_fences("Intro\n  ```Python {.x}\n  a = 1\n    b\n  ```\nmid\n~~~\nopen to the end\n")
    kinds = [(p.kind, p.lang, p.body) for p in pieces]
    assert kinds == [("text", "", ""), ("code", "Python", "a = 1\n  b"), ("text", "", ""),
                     ("code", "", "open to the end")]


_BLOCKS = st.sampled_from([
    "Para one.", "1. item", "- item", "   continued", "\n", "\n\n", "# Head", "| a | b |", "|---|---|",
    "```py\nx = 1\n```\n", "~~~\ncode\n", "```", "> quote", "$$\nx^2\n$$", "    indented", "2) two", "text",
])


@settings(deadline=None)
@given(st.lists(_BLOCKS, max_size=30).map("\n".join))
def test_chunks_lose_and_double_nothing(text: str) -> None:
    chunks = split_chunks(text)
    assert "".join(c.raw for c in chunks) == text
    assert all(c.raw for c in chunks)
    assert [c.raw for c in chunks if c.kind == "code"] == [p.raw for p in split_fences(text) if p.kind == "code"]


@settings(deadline=None)
@given(st.lists(_BLOCKS, max_size=30).map("\n".join), st.integers(min_value=0, max_value=400))
def test_settled_chunks_are_the_finished_replys(text: str, cut: int) -> None:
    """What is settled while a reply streams is never changed by what comes after: the
    finished reply's chunks begin with the same chunks."""
    settled = settled_chunks(text[:cut])
    final = split_chunks(text)
    assert [c.raw for c in settled] == [c.raw for c in final[:len(settled)]]
    assert [(c.kind, c.lang, c.body) for c in settled] == [(c.kind, c.lang, c.body) for c in final[:len(settled)]]


def test_chunks_keep_a_list_whole_and_cut_before_a_new_block() -> None:
    text = "Intro\n\n- a\n\n- b\n  more\n\nAfter the list.\n\n```py\nx\n```\nTail"
    assert [c.raw for c in split_chunks(text)] == [
        "Intro\n\n", "- a\n\n- b\n  more\n\n", "After the list.\n\n", "```py\nx\n```\n", "Tail"]
    # Settled: a chunk once the next one's first line is complete; a fence once it closes.
    assert [c.raw for c in settled_chunks("Intro\n\n- a")] == []
    assert [c.raw for c in settled_chunks("Intro\n\n- a\n")] == ["Intro\n\n"]
    assert [c.raw for c in settled_chunks("Intro\n\n```py\nx\n```")] == ["Intro\n\n"]
    assert [c.raw for c in settled_chunks("Intro\n\n```py\nx\n```\n")] == ["Intro\n\n", "```py\nx\n```\n"]
