"""The pacing / cancellation QA panel: cadence, cap and level lines, overrides, stops, counters."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine.config import GenerationConfig, RateConfig
from turbospark_app.engine.power import MemoryPressure, ThermalLevel
from turbospark_app.engine.progress import RawDecodeResult, StopReason
from turbospark_app.service import Finished, Started, Token, TurnRequest, TurnStats
from turbospark_app.ui.qa.data import QAData
from turbospark_app.ui.formatting import seconds_label
from turbospark_app.ui.qa.panel import QAPanel
from qa_fakes import StubBridge, fixed_power


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def request(cap: float | None) -> TurnRequest:
    return TurnRequest("c1", (ChatMessage("user", "hi"),),
                       TurnSettings(GenerationConfig(rate=RateConfig(max_tokens_per_sec=cap))))


def stats(**kw) -> TurnStats:
    base = dict(prompt_tokens=40, reused_prefix_tokens=30, new_tokens=7, stop_reason="cancelled",
                started=True, queued_seconds=0.0, time_to_first_token=0.1, prefill_seconds=0.01,
                decode_seconds=1.0, prefill_tokens_per_sec=1000.0, decode_tokens_per_sec=7.0,
                stop_latency=0.012, slot_evicted=False)
    base.update(kw)
    return TurnStats(**base)


def finished(rid: int, st: TurnStats, cid: str = "c1") -> Finished:
    result = RawDecodeResult(st.prompt_tokens, st.new_tokens, 0.0, 0.0, StopReason(st.stop_reason), 0)
    return Finished(rid, cid, result, (), (), "", st)


# -- the data model ------------------------------------------------------------------------------


def test_cadence_is_the_rolling_rate_of_the_followed_turn() -> None:
    d = QAData()
    d.started(1, 5.0, 0.0)
    rates = [d.token(1, 0.2 * i) for i in range(10)]
    assert rates[0] is None
    assert all(r == pytest.approx(5.0) for r in rates[1:])
    d.started(2, None, 2.0)  # a newer turn is followed; the older one is no longer plotted
    assert d.token(1, 2.1) is None and d.followed == 2


def test_the_window_widens_with_the_rate_and_turns_are_not_joined() -> None:
    d = QAData()
    d.started(1, None, 0.0)
    for i in range(100):  # 100 tok/s: the rate is taken over the last half second
        d.token(1, 0.01 * i)
    assert d.cadence[-1][1] == pytest.approx(100.0)
    d.ended(1, None, "c1", 1.0)
    d.started(2, None, 3.0)
    d.token(2, 3.1)
    d.token(2, 3.2)
    points = list(d.cadence)
    # Up from 0 at the first token, down to 0 when the turn ends, up again for the next one.
    assert points[0] == (0.0, 0.0) and points[-3] == (1.0, 0.0) and points[-2] == (3.1, 0.0)
    assert points[-1][1] == pytest.approx(10.0)


def test_cap_steps_with_the_levels_and_back() -> None:
    d = QAData()
    d.started(1, 5.0, 0.0)
    d.levels("nominal", "normal", 0.0)
    assert d.current_cap() == 5.0
    assert d.levels("serious", "normal", 1.0) is True
    assert d.current_cap() == 2.5
    d.levels("serious", "critical", 2.0)  # the more restrictive reading decides
    assert d.current_cap() == 1.25
    d.levels("nominal", "normal", 3.0)
    assert d.current_cap() == 5.0
    # The cap line is a step line: each change holds the old value up to the change time.
    assert list(d.cap) == [(0.0, 5.0), (1.0, 5.0), (1.0, 2.5), (2.0, 2.5), (2.0, 1.25), (3.0, 1.25), (3.0, 5.0)]
    assert [p[1] for p in d.thermal][-1] == 0.0 and max(p[1] for p in d.thermal) == 2.0


def test_uncapped_turn_is_capped_by_a_hot_machine() -> None:
    d = QAData()
    d.started(1, None, 0.0)
    d.levels("nominal", None, 0.0)  # memory unavailable counts as normal for pacing
    assert d.current_cap() is None  # uncapped
    assert d.cap[-1][1] == -1.0  # drawn off the axis
    d.levels("critical", None, 1.0)
    assert d.current_cap() == pytest.approx(7.5)  # 30 tok/s base x 0.25
    assert d.memory[-1][1] == -1.0  # "unavailable" is drawn off the axis, not as step 0


def test_stops_and_counters() -> None:
    d = QAData()
    d.started(1, None, 0.0)
    d.ended(1, stats(), "c1", 1.0)
    d.started(2, None, 1.0)
    d.ended(2, stats(stop_reason="end_of_turn", stop_latency=None, slot_evicted=True,
                     reused_prefix_tokens=0, prompt_tokens=50), "c1", 2.0)
    d.ended(3, stats(started=False, new_tokens=0, prompt_tokens=0, reused_prefix_tokens=0,
                     stop_latency=0.002), "c2", 3.0)
    d.ended(4, stats(new_tokens=0, stop_latency=0.030), "c1", 4.0)
    assert [s.phase for s in d.stops] == ["decode", "queued", "prefill"]
    assert d.turns == 3 and d.evictions == 1
    assert d.last_reused == (30, 40) and d.reused_total == 60 and d.prompt_total == 130
    assert d.stop_summary() == "3 stops · median 12 ms · max 30 ms"


# -- the widget ----------------------------------------------------------------------------------


@pytest.fixture
def panel(qtbot):
    clock = FakeClock()
    bridge = StubBridge(fixed_power())
    p = QAPanel(bridge, clock=clock)
    qtbot.addWidget(p)
    p.show()
    return p, bridge, clock


def test_forcing_levels_calls_the_thread_safe_setters(panel, qtbot) -> None:
    p, bridge, _clock = panel
    p.thermal_combo.setCurrentIndex(p.thermal_combo.findText("serious"))
    p.thermal_combo.activated.emit(p.thermal_combo.currentIndex())
    p.memory_combo.activated.emit(p.memory_combo.findText("warning"))
    assert bridge.forced == [("thermal", ThermalLevel.SERIOUS), ("memory", MemoryPressure.WARNING)]
    assert bridge.power.forced() == (ThermalLevel.SERIOUS, MemoryPressure.WARNING)
    assert bridge.power.thermal.probe() is ThermalLevel.SERIOUS  # what the engine paces on
    p.thermal_combo.activated.emit(p.thermal_combo.findText("real"))
    assert bridge.power.forced()[0] is None and bridge.power.thermal.probe() is ThermalLevel.NOMINAL


def test_plot_shows_cadence_cap_and_levels(panel, qtbot) -> None:
    p, bridge, clock = panel
    bridge.requests[7] = request(5.0)
    bridge.engineEvent.emit(Started(7, "c1", 40))
    for i in range(12):
        clock.t += 0.2
        bridge.engineEvent.emit(Token(7, "c1", i, 1000 + i, "x"))
    bridge.force_thermal(ThermalLevel.SERIOUS)
    p.poll()
    for i in range(12, 24):
        clock.t += 0.4
        bridge.engineEvent.emit(Token(7, "c1", i, 1000 + i, "x"))
    p.poll()
    p.flush()
    cadence = [pt.y() for pt in p.cadence_series.points()]
    caps = [pt.y() for pt in p.cap_series.points()]
    thermal = [pt.y() for pt in p.thermal_series.points()]
    assert cadence[0] == 0.0 and cadence[1] == pytest.approx(5.0) and cadence[-1] == pytest.approx(2.5)
    assert caps[0] == -1.0  # before the turn: uncapped, drawn below the axis
    assert 5.0 in caps and caps[-1] == 2.5
    assert thermal[0] == 0.0 and thermal[-1] == 2.0
    assert "2.5 tok/s" in p.cap_label.text() and "serious (simulated)" in p.cap_label.text()
    assert p.rate_axis.max() >= 5.0


def test_every_stop_is_listed_with_its_latency(panel, qtbot) -> None:
    p, bridge, clock = panel
    assert (p.reuse_label.text(), p.evictions_label.text(), p.stops_label.text()) == (
        "no turn yet", "0 in 0 turns", "no stops yet")
    bridge.engineEvent.emit(Started(1, "c1", 40))
    bridge.engineEvent.emit(finished(1, stats(stop_latency=0.0123)))
    bridge.engineEvent.emit(Started(2, "c1", 40))
    bridge.engineEvent.emit(finished(2, stats(stop_reason="max_tokens", stop_latency=None, slot_evicted=True)))
    bridge.engineEvent.emit(finished(3, stats(started=False, new_tokens=0, stop_latency=0.004)))
    table = p.stop_table
    assert table.rowCount() == 2
    assert [table.item(r, 2).text() for r in range(2)] == ["decode", "queued"]
    assert table.item(0, 4).text() == "12 ms" and table.item(1, 4).text() == "4 ms"
    assert p.evictions_label.text() == "1 in 2 turns"
    assert p.reuse_label.text().startswith("last 30/40 tok")
    assert "2 stops" in p.stops_label.text()
    p.clear()
    assert table.rowCount() == 0 and p.stops_label.text() == "no stops yet"


def test_without_app_monitors_the_overrides_are_disabled(qtbot) -> None:
    p = QAPanel(StubBridge(power=None))
    qtbot.addWidget(p)
    assert not p.thermal_combo.isEnabled() and not p.memory_combo.isEnabled()


def test_levels_forced_at_startup_are_shown(qtbot) -> None:
    power = fixed_power()
    power.force_thermal(ThermalLevel.FAIR)
    p = QAPanel(StubBridge(power))
    qtbot.addWidget(p)
    assert p.thermal_combo.currentText() == "fair" and p.memory_combo.currentText() == "real"


# -- end to end: the real engine step loop, paced on the app's monitors -----------------------------


def _rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0])


def test_forced_serious_steps_the_cadence_down_within_the_poll_and_back_up(ui, qtbot) -> None:
    from qa_fakes import PacedLoopBackend, issue6_window
    from ui_fakes import send, wait_idle

    from turbospark_app.engine.pacing import THERMAL_POLL_TOKENS

    power = fixed_power()
    w = issue6_window(ui, PacedLoopBackend(power.thermal, power.memory, replies=("x" * 600,)), power=power)
    w.findChild(type(w.open_model_action), "actionQAPanel").trigger()
    panel = w.qa_panel
    assert panel.isVisible()
    pane = w.area.current_pane()
    pane.apply_settings({"max_tokens_per_sec": 40, "max_new_tokens": 500}, None)
    arrivals: list[tuple[int, float]] = []
    w.bridge.engineEvent.connect(
        lambda e: arrivals.append((e.index, time.monotonic())) if isinstance(e, Token) else None)
    send(qtbot, pane, "go")
    qtbot.waitUntil(lambda: len(arrivals) >= 20, timeout=10000)
    panel.thermal_combo.activated.emit(panel.thermal_combo.findText("serious"))
    forced_at = len(arrivals)
    qtbot.waitUntil(lambda: len(arrivals) >= forced_at + 34, timeout=15000)
    panel.thermal_combo.activated.emit(panel.thermal_combo.findText("real"))
    released_at = len(arrivals)
    qtbot.waitUntil(lambda: len(arrivals) >= released_at + 34, timeout=15000)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)  # Stop
    wait_idle(qtbot, pane)

    times = [t for _i, t in arrivals]
    before = _rate(times[4:forced_at])
    # The engine re-reads the levels every THERMAL_POLL_TOKENS tokens: from then on, half rate.
    settle = forced_at + THERMAL_POLL_TOKENS + 2
    during = _rate(times[settle:released_at])
    after = _rate(times[released_at + THERMAL_POLL_TOKENS + 2:released_at + 34])
    assert 30 < before < 46, before
    assert 15 < during < 23, during
    assert 30 < after < 46, after

    panel.poll()
    panel.flush()
    caps = {round(p.y(), 2) for p in panel.cap_series.points()}
    assert {40.0, 20.0} <= caps
    assert 2.0 in {p.y() for p in panel.thermal_series.points()}
    assert panel.thermal_series.points()[-1].y() == 0.0  # back to the real (nominal) reading
    cadence = [p.y() for p in panel.cadence_series.points()]
    assert min(cadence) < 25 and max(cadence) > 30
    # The stop is listed with the latency the engine measured.
    assert panel.stop_table.rowCount() == 1
    assert panel.stop_table.item(0, 2).text() == "decode"
    latency = pane.messages[-1].stats["stop_latency"]
    assert latency is not None and latency < 0.5
    assert panel.stop_table.item(0, 4).text() == seconds_label(latency)
    assert panel.stop_table.item(0, 1).text() == pane.conversation.title


def test_batch_figures_from_the_engine(qtbot) -> None:
    from turbospark_app.ui.status_bar import EngineStatusBar

    bridge = StubBridge()
    panel = QAPanel(bridge)
    bar = EngineStatusBar(bridge)
    qtbot.addWidget(panel)
    qtbot.addWidget(bar)
    panel.poll()
    assert panel.batch_label.text() == "no batched step yet"
    bridge.info["engine"] = {"last_batch_size": 3, "batched_steps": 1200, "mean_batch_size": 2.5,
                             "last_batch_ms": 31.5}
    panel.poll()
    assert panel.batch_label.text() == "now 3 · 1,200 batched steps, mean 2.5 rows, last 31.5 ms"
    bar._token_times.extend([time.monotonic() - 0.5, time.monotonic()])
    bar.poll()
    assert bar.text("decode").endswith("live · batch 3")
    bridge.info["engine"]["last_batch_size"] = 1
    bar.poll()
    assert "batch" not in bar.text("decode")


def test_cadence_is_timed_when_the_engine_sent_each_token_not_when_it_arrived(qtbot) -> None:
    """Tokens reach the window in batches (ui.services.bridge): the panel and the status bar time each
    one by its `at` stamp, so a batch of 5 tokens sent 10 ms apart still plots 100 tok/s."""
    from turbospark_app.ui.status_bar import EngineStatusBar

    bridge = StubBridge()
    panel = QAPanel(bridge)
    bar = EngineStatusBar(bridge)
    qtbot.addWidget(panel)
    qtbot.addWidget(bar)
    sent = time.monotonic() - 1.0  # sent a second ago, all arriving now
    for i in range(5):
        event = Token(7, "c", i, 100 + i, f"w{i} ", at=sent + 0.01 * i)
        panel._on_event(event)
        bar._on_event(event)
    times = [r.at for r in panel.data.token_log]
    assert times == pytest.approx([sent + 0.01 * i - panel._t0 for i in range(5)], abs=1e-9)
    assert panel.data.token_log[-1].rate == pytest.approx(100.0, rel=0.01)
    assert list(bar._token_times) == [sent + 0.01 * i for i in range(5)]
    untimed = Token(8, "c", 0, 1, "x")  # no stamp (a remote relay, a test): its arrival
    before = panel.now()
    panel._on_event(untimed)
    assert panel.data.token_log[-1].at >= before
