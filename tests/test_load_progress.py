"""A long model load says how far it is: the model layers report, the engine thread turns that
into BackendProgress events, the status bar shows "Preparing model… 40%" with a bar, and
`turbospark chat` prints the steps on stderr."""

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf
from ui_fakes import FakeBackend

from turbospark_app.engine import load_progress
from turbospark_app.engine.load_progress import KERNELS, PREPARING
from turbospark_app.model.reference.forward import LlamaModel
from turbospark_app.service import BackendProgress, BackendReady, EngineThread


def test_reports_go_to_the_caller_of_reporting_only() -> None:
    seen: list[tuple[str, float]] = []
    load_progress.report(PREPARING, 0.5)  # nobody asked: nothing happens
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        load_progress.report(PREPARING, 1.7)  # clamped
        other = threading.Thread(target=load_progress.report, args=(PREPARING, 0.3))
        other.start()
        other.join()  # another thread's load reports to nobody
    load_progress.report(PREPARING, 0.9)  # after the block: nobody again
    assert seen == [(PREPARING, 1.0)]


def test_the_weights_load_beside_the_tokenizer_and_still_report(tmp_path: Path) -> None:
    """load_backend loads the weights on a helper thread: its progress still reaches the
    caller's reporter, and its result or error comes back on the caller's thread."""
    from turbospark_app.chat.backend import in_background, load_backend

    seen: list[tuple[str, float]] = []
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        join = in_background(lambda: (load_progress.report(PREPARING, 0.5), threading.current_thread().name)[1],
                             "helper")
        assert join() == "helper"
    assert seen == [(PREPARING, 0.5)]

    def fails() -> None:
        raise ValueError("broken weights")

    with pytest.raises(ValueError, match="broken weights"):
        in_background(fails, "helper")()

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, n_layers=4, tokenizer={})
    seen.clear()
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        backend = load_backend(path, cache_dir=tmp_path / "cache")
    assert [f for p, f in seen if p == PREPARING] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert backend.tokenizer.encode("hello") and backend.model.config.n_layers == 4

    # A file whose weights AND tokenizer are broken: the weights' error, as before the overlap.
    broken = tmp_path / "broken.gguf"
    write_tiny_gguf(broken, skip_tensor="blk.1.ffn_down.weight")
    with pytest.raises(Exception, match="ffn_down"):
        load_backend(broken, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("weights", ["compact", "f32"])
def test_a_first_open_reports_each_layer_then_the_kernels(tmp_path: Path, weights: str) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, n_layers=4)
    seen: list[tuple[str, float]] = []
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        LlamaModel.from_gguf(path, tmp_path / "cache", weights=weights)
    preparing = [f for p, f in seen if p == PREPARING]
    assert preparing == [0.0, 0.25, 0.5, 0.75, 1.0]
    kernels = [f for p, f in seen if p == KERNELS]
    assert kernels == ([0.0, 1.0] if weights == "compact" else [])
    seen.clear()
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        LlamaModel.from_gguf(path, tmp_path / "cache", weights=weights)  # warm: nothing to build
    assert [p for p, _ in seen if p == PREPARING] == []


def test_the_engine_thread_sends_progress_before_ready() -> None:
    events: list[object] = []

    def factory() -> FakeBackend:
        for i in range(5):
            load_progress.report(PREPARING, i / 4)
            load_progress.report(PREPARING, i / 4)  # the same percent twice: one event
        return FakeBackend()

    engine = EngineThread(factory, events.append)
    engine.start()
    try:
        deadline = time.monotonic() + 10
        while not any(isinstance(e, BackendReady) for e in events) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        engine.shutdown(5)
    progress = [e for e in events if isinstance(e, BackendProgress)]
    assert [round(e.fraction * 100) for e in progress] == [0, 25, 50, 75, 100]
    assert progress[2].label == "Preparing model… 50%"
    ready = next(i for i, e in enumerate(events) if isinstance(e, BackendReady))
    assert events.index(progress[-1]) < ready


def test_the_status_bar_shows_the_step_and_a_bar(ui, qtbot) -> None:
    w = ui.window(FakeBackend())
    status = w.status
    status._on_event(BackendProgress(PREPARING, 0.4))
    assert status.text("model") == "Preparing model… 40%"
    assert status.load_bar.isVisible() and status.load_bar.value() == 40
    assert status.load_bar.maximum() == 100
    # the kernels' prepack has no measure: a busy bar (range 0-0) and no percentage
    status._on_event(BackendProgress(KERNELS, 0.0))
    assert status.text("model") == "Preparing kernels…"
    assert status.load_bar.isVisible() and status.load_bar.maximum() == 0
    status._on_event(BackendProgress(PREPARING, 0.5))  # a measured phase gets its bar back
    assert status.load_bar.maximum() == 100 and status.load_bar.value() == 50
    status._on_event(BackendReady({"file_name": "m.gguf"}, 2048, 1.0))
    assert not status.load_bar.isVisible()


def test_chat_prints_the_steps_on_stderr() -> None:
    from turbospark_app.cli.chat_command import StderrProgress

    quiet = io.StringIO()
    StderrProgress(quiet)(PREPARING, 0.5)  # within its first half second: a quick load says nothing
    assert quiet.getvalue() == ""
    out = io.StringIO()  # not a terminal: a line per tenth
    progress = StderrProgress(out, quiet_for=0.0)
    for i in range(21):
        progress(PREPARING, i / 20)
    progress(KERNELS, 0.0)
    time.sleep(0.05)
    progress(KERNELS, 1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "turbospark: Preparing model… 0%" and lines[10] == "turbospark: Preparing model… 100%"
    # the prepack has no measure: said begun, then done with its time (no "0%" for seconds)
    assert len(lines) == 13 and lines[11] == "turbospark: Preparing kernels…"
    assert re.fullmatch(r"turbospark: Preparing kernels… done \(\d+\.\d s\)", lines[-1]), lines[-1]


def test_a_long_prepack_is_said_when_the_quiet_time_ends_and_a_quick_one_not_at_all() -> None:
    from turbospark_app.cli.progress import StderrProgress

    out = io.StringIO()
    progress = StderrProgress(out, quiet_for=0.1)
    progress(KERNELS, 0.0)  # begun within the quiet time: no line yet
    assert out.getvalue() == ""
    time.sleep(0.3)  # still running when the quiet time ends: said then, no report needed
    assert out.getvalue() == "turbospark: Preparing kernels…\n"
    progress(KERNELS, 1.0)
    done = re.fullmatch(r"turbospark: Preparing kernels… done \((\d+\.\d) s\)", out.getvalue().splitlines()[-1])
    assert done is not None and float(done.group(1)) >= 0.3  # timed from the begin report
    quick = io.StringIO()
    progress = StderrProgress(quick, quiet_for=0.2)
    progress(KERNELS, 0.0)
    progress(KERNELS, 1.0)
    time.sleep(0.3)  # the cancelled timer says nothing later
    assert quick.getvalue() == ""


def test_silence_drops_a_begun_phase_line_still_to_come() -> None:
    from turbospark_app.cli.progress import StderrProgress

    out = io.StringIO()
    progress = StderrProgress(out, quiet_for=0.1)
    progress(KERNELS, 0.0)
    progress.silence()  # the load failed, or serve could not listen: the process is leaving
    time.sleep(0.3)
    progress(KERNELS, 1.0)
    assert out.getvalue() == ""
