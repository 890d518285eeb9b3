"""TokenSink: UTF-8 detokenization, stop strings across tokens, stop tokens, budget, cancel."""

from __future__ import annotations

from typing import Sequence

import pytest
from fakes import ByteTokenizer, PieceTokenizer, ScriptedProducer
from hypothesis import given, settings
from hypothesis import strategies as st

from turbospark_app.engine import (
    GenerationConfig,
    StopReason,
    TailProgress,
    TokenProgress,
    TokenSink,
    run_raw_completion,
)
from turbospark_app.engine.token_sink import StopMatcher


def sink_for(tok: object, *, budget: int = 100, stops: Sequence[str] = (), history: Sequence[int] = ()) -> TokenSink:
    config = GenerationConfig(max_new_tokens=budget, stop_strings=tuple(stops))
    return TokenSink(tok, config, history)  # type: ignore[arg-type]


def feed(sink: TokenSink, ids: Sequence[int]) -> tuple[list[object], StopReason | None]:
    events: list[object] = []
    for i in ids:
        step = sink.commit(i)
        events.extend(step.events)
        if step.stop is not None:
            return events, step.stop
    return events, None


def text_of(events: Sequence[object]) -> str:
    return "".join(e.delta if isinstance(e, TokenProgress) else e.text for e in events)  # type: ignore[attr-defined]


def first_stop_cut(text: str, stops: Sequence[str]) -> str:
    """The text a stream may show: up to the stop string that COMPLETES first (ties: longer)."""
    found = [(text.find(s) + len(s), -len(s)) for s in stops if s and s in text]
    if not found:
        return text
    end, neg = min(found)
    return text[: end + neg]


# -- UTF-8 ------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["é", "日本語", "😀 ok", "aé😀b"])
def test_a_character_split_across_byte_tokens_is_emitted_whole(text: str) -> None:
    tok = ByteTokenizer()
    events, _ = feed(sink_for(tok), tok.encode(text))
    deltas = [e.delta for e in events if isinstance(e, TokenProgress)]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_the_delta_is_empty_until_the_characters_last_byte() -> None:
    tok = ByteTokenizer()
    events, _ = feed(sink_for(tok), tok.encode("😀!"))
    assert [e.delta for e in events] == ["", "", "", "😀", "!"]  # type: ignore[attr-defined]


def test_invalid_bytes_become_replacement_characters_instead_of_blocking() -> None:
    events, _ = feed(sink_for(ByteTokenizer()), [0xFF, ord("a")])
    assert text_of(events) == "\ufffda"


def test_unfinished_character_is_dropped_not_shown_broken_at_the_end() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("a") + list("é".encode())[:1]
    events, reason = feed(sink_for(tok, budget=2), ids)
    assert reason is StopReason.MAX_TOKENS
    assert text_of(events) == "a"


# -- stop strings -----------------------------------------------------------------------
def test_stop_string_split_over_tokens_is_matched_and_never_emitted() -> None:
    tok = PieceTokenizer([b"ab", b"E", b"N", b"Dxy"])
    events, reason = feed(sink_for(tok, stops=["END"]), [0, 1, 2, 3])
    assert reason is StopReason.STOP_STRING
    assert [e.delta for e in events] == ["ab", "", "", ""]  # type: ignore[attr-defined]
    assert not any(isinstance(e, TailProgress) for e in events)


def test_text_before_the_stop_string_in_the_same_token_is_emitted() -> None:
    tok = PieceTokenizer([b"hello ENDworld"])
    events, reason = feed(sink_for(tok, stops=["END"]), [0])
    assert reason is StopReason.STOP_STRING
    assert text_of(events) == "hello "


def test_a_partial_match_that_fails_is_released() -> None:
    tok = PieceTokenizer([b"xE", b"N", b"x"])
    events, reason = feed(sink_for(tok, stops=["END"]), [0, 1, 2])
    assert reason is None
    assert [e.delta for e in events] == ["x", "", "ENx"]  # type: ignore[attr-defined]


def test_the_stop_string_that_completes_first_wins() -> None:
    tok = PieceTokenizer([b"abcd"])
    events, _ = feed(sink_for(tok, stops=["abcd", "bc"]), [0])
    assert text_of(events) == "a"  # same as when fed char by char


def test_empty_stop_strings_are_ignored() -> None:
    tok = ByteTokenizer()
    events, reason = feed(sink_for(tok, budget=3, stops=["", "zz"]), tok.encode("abc"))
    assert reason is StopReason.MAX_TOKENS and text_of(events) == "abc"


def test_stop_matcher_withholds_only_a_possible_start() -> None:
    m = StopMatcher(["<end>"])
    assert m.push("hi <e") == ("hi ", False) and m.withheld == "<e"
    assert m.push("x") == ("<ex", False) and m.withheld == ""


# -- tail flushing ----------------------------------------------------------------------
def test_withheld_tail_is_flushed_on_max_tokens() -> None:
    tok = PieceTokenizer([b"ok <", b"en"])
    events, reason = feed(sink_for(tok, budget=2, stops=["<end>"]), [0, 1])
    assert reason is StopReason.MAX_TOKENS
    assert events == [TokenProgress(0, 0, "ok "), TokenProgress(1, 1, ""), TailProgress("<en")]


def test_withheld_tail_is_flushed_when_the_loop_cancels() -> None:
    tok = PieceTokenizer([b"ok <"])
    sink = sink_for(tok, stops=["<end>"])
    assert sink.commit(0) == (((TokenProgress(0, 0, "ok "),)), None)
    assert sink.finish(StopReason.CANCELLED) == (TailProgress("<"),)
    assert sink.stopped is StopReason.CANCELLED


@pytest.mark.parametrize(("special", "reason"), [("END_OF_TURN", StopReason.END_OF_TURN), ("EOS", StopReason.EOS)])
def test_withheld_tail_is_flushed_on_a_stop_token(special: str, reason: StopReason) -> None:
    tok = PieceTokenizer([b"ok <"])
    events, got = feed(sink_for(tok, stops=["<end>"]), [0, getattr(tok, special)])
    assert got is reason
    assert events == [TokenProgress(0, 0, "ok "), TailProgress("<")]


def test_finish_flushes_the_tail_and_no_tail_event_when_nothing_is_withheld() -> None:
    tok = PieceTokenizer([b"ok <", b"fine"])
    sink = sink_for(tok, stops=["<end>"])
    sink.commit(0)
    assert sink.finish(StopReason.CANCELLED) == (TailProgress("<"),)
    other = sink_for(tok, stops=["<end>"])
    other.commit(1)
    assert other.finish(StopReason.CANCELLED) == ()


# -- stop tokens, budget, cancel --------------------------------------------------------
@pytest.mark.parametrize(("special", "reason"), [("END_OF_TURN", StopReason.END_OF_TURN), ("EOS", StopReason.EOS)])
def test_stop_tokens_stop_and_are_never_emitted_nor_in_history(special: str, reason: StopReason) -> None:
    tok = ByteTokenizer()
    sink = sink_for(tok, history=[1, 2])
    events, got = feed(sink, [ord("a"), getattr(tok, special)])
    assert got is reason
    assert events == [TokenProgress(0, ord("a"), "a")]
    assert sink.history == [1, 2, ord("a")]
    assert sink.generated == 2  # counted, as the reference's new_tokens


def test_budget_spent_stops_with_max_tokens_after_emitting_the_last_token() -> None:
    tok = ByteTokenizer()
    sink = sink_for(tok, budget=3)
    events, reason = feed(sink, tok.encode("abcdef"))
    assert reason is StopReason.MAX_TOKENS
    assert [e.index for e in events] == [0, 1, 2]  # type: ignore[attr-defined]
    assert sink.history == tok.encode("abc")


def test_commit_after_the_run_stopped_is_a_bug() -> None:
    tok = ByteTokenizer()
    sink = sink_for(tok, budget=1)
    sink.commit(ord("a"))
    with pytest.raises(RuntimeError):
        sink.commit(ord("b"))


# -- the property -----------------------------------------------------------------------
ALPHABET = "abEND <>é日😀\n"
texts = st.text(alphabet=ALPHABET, max_size=30)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), max_size=3)


@settings(max_examples=300, deadline=None)
@given(text=texts, stops=stop_lists, data=st.data())
def test_deltas_plus_tail_equal_the_text_up_to_the_first_stop_string(text: str, stops: list[str], data: st.DataObject) -> None:
    raw = text.encode("utf-8")
    if text and data.draw(st.booleans()):  # often make a stop string that really occurs
        a = data.draw(st.integers(0, len(text) - 1))
        stops = [*stops, text[a : a + data.draw(st.integers(1, 4))]]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=len(raw)))
    tok, ids = PieceTokenizer.split(raw, cuts)
    events, reason = feed(sink_for(tok, budget=max(len(ids), 1), stops=stops), ids)
    assert text_of(events) == first_stop_cut(text, stops)
    assert all("\ufffd" not in text_of([e]) for e in events)
    expected_stop = first_stop_cut(text, stops) != text or any(s in text for s in stops)
    if ids:
        assert reason is (StopReason.STOP_STRING if expected_stop else StopReason.MAX_TOKENS)


@settings(max_examples=150, deadline=None)
@given(text=texts, stops=stop_lists, data=st.data())
def test_the_same_property_holds_through_the_whole_loop_with_any_budget(
    text: str, stops: list[str], data: st.DataObject
) -> None:
    raw = text.encode("utf-8")
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=len(raw)))
    tok, ids = PieceTokenizer.split(raw, cuts)
    budget = data.draw(st.integers(1, max(len(ids), 1) + 1))
    # The reply, then an end-of-turn in case the budget outlasts it.
    producer = ScriptedProducer.for_reply(tok.vocab_size, 1, [*ids, tok.END_OF_TURN])
    events: list[object] = []
    config = GenerationConfig(max_new_tokens=budget, stop_strings=tuple(stops))
    result = run_raw_completion(producer, tok, [0], config, 1 + budget, tok.vocab_size, events.append)
    shown = raw[: sum(len(tok.pieces[i]) for i in ids[:budget])].decode("utf-8", errors="ignore")
    body = [e for e in events if isinstance(e, (TokenProgress, TailProgress))]
    assert text_of(body) == first_stop_cut(shown, stops)
    assert len(result.kv_backed_token_ids) == result.kv_position


def test_a_tool_call_token_is_text_and_the_natural_end_after_it_is_tool_calls() -> None:
    tok = ByteTokenizer()
    sink = sink_for(tok, history=[])
    events, got = feed(sink, [ord("a"), tok.TOOL_CALL, ord("b")])
    assert got is None and sink.history == [ord("a"), tok.TOOL_CALL, ord("b")]
    _, got = feed(sink, [tok.END_OF_TURN])
    assert got is StopReason.TOOL_CALLS
