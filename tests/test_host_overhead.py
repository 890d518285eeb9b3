"""Host overhead per decode step as its own figure: the gauge (gaps between decode steps'
llama_decode calls, by streams per step), its flow engine -> worker -> QA panel on a real model,
and the one-pass greedy choice (argmax and the logits' checks together) choosing exactly what
the two passes chose, errors included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from real_window import real_window, tiny_chat  # noqa: F401 (fixture)
from turbospark_app.engine.config import Shaping
from turbospark_app.engine.errors import SelectionError
from turbospark_app.engine.host_gauge import MAX_GAP_S, HostGauge
from turbospark_app.engine.selection import checked_logits, make_sampler
from turbospark_app.ui.qa.engine import host_overhead_text


def test_the_gauge_counts_gaps_between_decode_steps_only() -> None:
    g = HostGauge()
    g.observe(1, 0.000, 0.010)  # first step: no gap yet
    g.observe(1, 0.0102, 0.020)  # 200 us after it
    g.observe(1, 0.0204, 0.030)  # 400 us
    g.observe(0, 0.031, 0.060)  # a prompt chunk: the next gap does not count
    g.observe(4, 0.0601, 0.070)
    g.observe(4, 0.0709, 0.080)  # 900 us for 4 streams
    g.observe(4, 0.080 + MAX_GAP_S + 0.01, 0.2)  # a wait (pacing, the next turn), not work
    d = g.describe()
    assert set(d) == {"1", "4"}
    assert d["1"]["steps"] == 2 and d["1"]["step_us"] == pytest.approx(300, abs=0.2)
    assert d["1"]["decode_ms"] == pytest.approx(9.7, abs=0.01)
    assert d["4"]["steps"] == 1 and d["4"]["step_us"] == pytest.approx(900, abs=0.2)
    assert d["4"]["per_stream_us"] == pytest.approx(225, abs=0.2)
    assert d["4"]["share"] == pytest.approx(0.0009 / (0.0009 + 0.0091), abs=1e-4)
    assert host_overhead_text({"model": {"host_overhead": d}}) == (
        "1 stream: 300 µs a step (3% of it) · 4 streams: 900 µs, 225 µs a stream (9%)")
    g.clear()
    assert g.describe() == {} and host_overhead_text({}) == "no decode step yet"


def _two_pass(x: np.ndarray) -> int | str:
    try:
        return int(np.argmax(checked_logits(x)))
    except SelectionError as e:
        return str(e)


def _one_pass(x: np.ndarray) -> int | str:
    try:
        return make_sampler(Shaping())(x, [1, 2])
    except SelectionError as e:
        return str(e)


special = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0, 3.4e38])


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 64), elements=st.one_of(
    st.floats(-1e6, 1e6, width=32), special)), st.sampled_from([np.float32, np.float64, np.float16]))
def test_one_pass_greedy_chooses_what_two_passes_chose(x: np.ndarray, dtype) -> None:
    with np.errstate(over="ignore"):  # (3.4e38 past float16: inf, as the model's would be)
        x = x.astype(dtype)
    assert _one_pass(x) == _two_pass(x)


def test_greedy_with_a_bias_or_a_penalty_still_takes_the_full_path() -> None:
    x = np.zeros(10, np.float32)
    x[3], x[5] = 1.0, 0.5
    assert make_sampler(Shaping(logit_bias=((7, 5.0),)))(x, []) == 7
    assert make_sampler(Shaping(repetition_penalty=4.0))(x, [3]) == 5
    with pytest.raises(SelectionError, match="non-empty vector"):
        make_sampler(Shaping())(np.zeros((2, 2), np.float32), [])


def test_the_figure_flows_from_the_engine_to_the_qa_panel(ui, qtbot, tiny_chat) -> None:  # noqa: F811
    from ui_fakes import send, wait_idle

    w = real_window(ui, tiny_chat)
    assert w.bridge.backend_state == "ready", w.bridge.backend_error
    pane = w.area.current_pane()
    send(qtbot, pane, "count to twenty")
    wait_idle(qtbot, pane, timeout=60000)
    assert pane.messages[-1].stats["new_tokens"] >= 4
    w.bridge.engine._refresh_snapshot(force=True)  # (the engine re-reads it twice a second)
    figures = w.bridge.system_info()["model"]["host_overhead"]
    assert figures["1"]["steps"] >= 2 and figures["1"]["step_us"] > 0
    w.qa_panel.poll()
    assert w.qa_panel.host_label.text().startswith("1 stream: ")
