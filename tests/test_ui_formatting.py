"""The words and numbers the UI shows: stats lines, model names, readings, sizes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turbospark_app.service import TurnStats
from turbospark_app.ui.formatting import (
    bytes_label,
    nested,
    reading_label,
    slot_outcome,
    stats_line,
    with_line_breaks,
)
from turbospark_app.ui.status_bar import model_label


def stats(**kw) -> TurnStats:
    base = dict(prompt_tokens=430, reused_prefix_tokens=412, new_tokens=57, stop_reason="end_of_turn",
                started=True, queued_seconds=0.0, time_to_first_token=0.31, prefill_seconds=0.02,
                decode_seconds=2.4, prefill_tokens_per_sec=900.0, decode_tokens_per_sec=23.75,
                stop_latency=None, slot_evicted=False)
    base.update(kw)
    return TurnStats(**base)


def test_stats_line_for_a_finished_reply() -> None:
    assert stats_line(stats()) == (
        "prompt 430 tok · reused 412 · new 57 tok · TTFT 310 ms · decode 23.8 tok/s · end of turn"
    )


def test_stats_line_for_stopped_replies() -> None:
    assert stats_line(stats(stop_reason="cancelled", stop_latency=0.0123)).endswith("stopped in 12 ms")
    line = stats_line(stats(stop_reason="cancelled", stop_latency=0.004, new_tokens=0,
                            time_to_first_token=None, decode_tokens_per_sec=0.0))
    assert "TTFT –" in line and "decode – tok/s" in line and line.endswith("stopped in 4 ms (during prefill)")
    queued = stats_line(stats(started=False, stop_reason="cancelled", stop_latency=0.001))
    assert queued == "stopped while queued after 1 ms · the model was not run"
    assert "evicted another conversation's KV" in stats_line(stats(slot_evicted=True))


def test_a_cut_off_reply_says_token_limit_once() -> None:
    """The "token limit" badge opens the footer: the stats line does not repeat it."""
    from turbospark_app.conversations.store import StoredMessage
    from turbospark_app.ui.pane.message_actions import reply_footer

    def reply(reason: str) -> StoredMessage:
        return StoredMessage(1, "c", "assistant", "text", None, stats(stop_reason=reason).to_json(), reason, 0.0)

    line, badge = reply_footer(reply("max_tokens"))
    assert badge == "token limit" and "token limit" not in line
    assert line == "prompt 430 tok · reused 412 · new 57 tok · TTFT 310 ms · decode 23.8 tok/s"
    line, badge = reply_footer(reply("end_of_turn"))
    assert badge == "" and line.endswith(" · end of turn")


def test_stats_round_trip_through_json() -> None:
    s = stats(stop_reason="cancelled", stop_latency=0.02)
    assert TurnStats.from_json({**s.to_json(), "model_id": "x"}) == s
    assert TurnStats.from_json({}).prompt_tokens == 0


def test_slot_outcome_prefers_the_backends_word() -> None:
    assert slot_outcome(stats(), {"slot_outcome": "evicted"}) == "evicted"
    assert slot_outcome(stats(), None) == "hit"
    assert slot_outcome(stats(reused_prefix_tokens=0), None) == "miss"
    assert slot_outcome(stats(slot_evicted=True), {}) == "evicted"


def test_readings_are_honest() -> None:
    assert reading_label({"label": "serious (simulated)"}) == "serious (simulated)"
    assert reading_label({"level": None, "available": False}) == "unavailable"
    assert reading_label({"level": "fair", "simulated": True}) == "fair (simulated)"
    assert reading_label(None) == "unavailable"


def test_model_label() -> None:
    info = {"name": "Smollm2 135M 8k Lc100K Mix1 Ep2", "file_name": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "quantization": "Q4_1"}
    assert model_label(info) == "SmolLM2-135M-Instruct · Q4_1"
    assert model_label({"name": "tiny"}) == "tiny"
    assert model_label({"path": "/m/other-q8_0.gguf", "quantization": "Q8_0"}) == "other · Q8_0"


def test_sizes_and_nested_keys() -> None:
    assert bytes_label(312 * 2**20) == "312 MB" and bytes_label(3 * 2**30) == "3.0 GB"
    assert bytes_label(None) == "–"
    info = {"process": {"rss_bytes": 5}, "flat.key": 7}
    assert nested(info, "process.rss_bytes") == 5 and nested(info, "flat.key") == 7
    assert nested(info, "process.missing", "d") == "d"


def test_line_breaks_inside_paragraphs_become_hard_breaks() -> None:
    poem = "Waves fold on the shore\nsalt wind\n\nthe gulls\ncry"
    assert with_line_breaks(poem) == "Waves fold on the shore  \nsalt wind\n\nthe gulls  \ncry"
    code = "Run:\n```sh\nmake test\nmake run\n```\n~~~\na\nb\n~~~\nend"
    assert with_line_breaks(code) == code  # a line before a fence and fenced lines stay
    assert with_line_breaks("kept  \nalso kept\\\nx") == "kept  \nalso kept\\\nx"
    assert with_line_breaks("") == "" and with_line_breaks("one line") == "one line"


_LINES = st.sampled_from(["", "text", "more words", "```", "```py", "~~~", "  indented", "    code", "\tcode",
                          "- item", "# Title"])


@given(st.lists(_LINES, min_size=1, max_size=24))
def test_line_breaks_only_add_trailing_spaces_outside_fences(lines: list[str]) -> None:
    text = "\n".join(lines)
    out = with_line_breaks(text).split("\n")
    assert len(out) == len(lines)
    fence = None
    for before, after in zip(lines, out):
        stripped = before.lstrip()
        if fence is not None or stripped.startswith(("```", "~~~")):
            assert after == before  # fences and what they hold are untouched
            if fence is None:
                fence = stripped[:3]
            elif stripped.startswith(fence):
                fence = None
            continue
        assert after in (before, before + "  ")
        if not before.strip() or before.startswith(("    ", "\t")):
            assert after == before  # a blank line still ends the paragraph; code keeps its bytes


def test_a_short_prefill_says_tokens_and_time_not_a_rate() -> None:
    """A Regenerate or a continued conversation feeds a token or two: "76.9 tok/s" would read as
    a slow prefill, so the status bar says what it fed and how long it took."""
    from turbospark_app.ui.formatting import prefill_label

    assert prefill_label(stats(prompt_tokens=40, reused_prefix_tokens=39, prefill_seconds=0.013)) == \
        "prefill 1 tok in 13 ms"
    assert prefill_label(stats(prompt_tokens=430, reused_prefix_tokens=0, prefill_seconds=0.5,
                               prefill_tokens_per_sec=860.0)) == "prefill 860.0 tok/s"
    assert prefill_label(stats(prompt_tokens=12, reused_prefix_tokens=0, source="remote",
                               prefill_tokens_per_sec=50.0)) == "prefill 50.0 tok/s"
