"""A long model load says how far it is: llama.cpp's load reports, the engine thread turns that
into BackendProgress events, the status bar shows "Loading model… 40%" with a bar, and
`turbospark chat` prints the steps on stderr; a first open's check in a child process has no
measure and shows as a busy bar."""

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
from turbospark_app.engine.load_progress import CHECKING, LOADING
from turbospark_app.service import BackendProgress, BackendReady, EngineThread


def test_reports_go_to_the_caller_of_reporting_only() -> None:
    seen: list[tuple[str, float]] = []
    load_progress.report(LOADING, 0.5)  # nobody asked: nothing happens
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        load_progress.report(LOADING, 1.7)  # clamped
        other = threading.Thread(target=load_progress.report, args=(LOADING, 0.3))
        other.start()
        other.join()  # another thread's load reports to nobody
    load_progress.report(LOADING, 0.9)  # after the block: nobody again
    assert seen == [(LOADING, 1.0)]


def test_load_backend_reports_the_check_then_llama_cpps_load(tmp_path: Path, isolated_dirs, monkeypatch) -> None:
    """A first open: the child's check (begun, done), then llama.cpp's own fractions up to 1
    (for a file past PROGRESS_BYTES: a smaller one loads too fast to show, so it says begun and
    done only); a second open of the same file skips the check (its verdict is remembered)."""
    from turbospark_app.chat import backend as backend_module
    from turbospark_app.chat.backend import load_backend

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, n_layers=4)
    seen: list[tuple[str, float]] = []
    monkeypatch.setattr(backend_module, "PROGRESS_BYTES", 0)  # this tiny file counts as big
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        backend = load_backend(path)
    assert [f for p, f in seen if p == CHECKING] == [0.0, 1.0]
    loading = [f for p, f in seen if p == LOADING]
    assert loading[0] == 0.0 and loading[-1] == 1.0 and len(loading) >= 3
    assert loading == sorted(loading)
    assert backend.tokenizer.encode("hello") and backend.config.n_layers == 4
    backend.close()
    seen.clear()
    monkeypatch.setattr(backend_module, "PROGRESS_BYTES", 256 << 20)
    with load_progress.reporting(lambda phase, fraction: seen.append((phase, fraction))):
        load_backend(path).close()
    assert [p for p, _ in seen if p == CHECKING] == []
    assert seen == [(LOADING, 0.0), (LOADING, 1.0)]  # small: begun and done

    broken = tmp_path / "broken.gguf"  # llama.cpp's own refusal, in one line
    write_tiny_gguf(broken, skip_tensor="blk.1.ffn_down.weight")
    with pytest.raises(Exception, match="tensor 'blk.1.ffn_down.weight' not found"):
        load_backend(broken)


def test_the_engine_thread_sends_progress_before_ready() -> None:
    events: list[object] = []

    def factory() -> FakeBackend:
        for i in range(5):
            load_progress.report(LOADING, i / 4)
            load_progress.report(LOADING, i / 4)  # the same percent twice: one event
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
    assert progress[2].label == "Loading model… 50%"
    ready = next(i for i, e in enumerate(events) if isinstance(e, BackendReady))
    assert events.index(progress[-1]) < ready


def test_the_status_bar_shows_the_step_and_a_bar(ui, qtbot) -> None:
    w = ui.window(FakeBackend())
    status = w.status
    status._on_event(BackendProgress(LOADING, 0.4))
    assert status.text("model") == "Loading model… 40%"
    assert status.load_bar.isVisible() and status.load_bar.value() == 40
    assert status.load_bar.maximum() == 100
    # the child's check has no measure: a busy bar (range 0-0) and no percentage
    status._on_event(BackendProgress(CHECKING, 0.0))
    assert status.text("model") == "Checking the model file…"
    assert status.load_bar.isVisible() and status.load_bar.maximum() == 0
    status._on_event(BackendProgress(LOADING, 0.5))  # a measured phase gets its bar back
    assert status.load_bar.maximum() == 100 and status.load_bar.value() == 50
    status._on_event(BackendReady({"file_name": "m.gguf"}, 2048, 1.0))
    assert not status.load_bar.isVisible()


def test_chat_prints_the_steps_on_stderr() -> None:
    from turbospark_app.cli.chat_command import StderrProgress

    quiet = io.StringIO()
    StderrProgress(quiet)(LOADING, 0.5)  # within its first half second: a quick load says nothing
    assert quiet.getvalue() == ""
    out = io.StringIO()  # not a terminal: a line per tenth
    progress = StderrProgress(out, quiet_for=0.0)
    for i in range(21):
        progress(LOADING, i / 20)
    progress(CHECKING, 0.0)
    time.sleep(0.05)
    progress(CHECKING, 1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "turbospark: Loading model… 0%" and lines[10] == "turbospark: Loading model… 100%"
    # the check has no measure: said begun, then done with its time (no "0%" for seconds)
    assert len(lines) == 13 and lines[11] == "turbospark: Checking the model file…"
    assert re.fullmatch(r"turbospark: Checking the model file… done \(\d+\.\d s\)", lines[-1]), lines[-1]


def test_a_long_prepack_is_said_when_the_quiet_time_ends_and_a_quick_one_not_at_all() -> None:
    from turbospark_app.cli.progress import StderrProgress

    out = io.StringIO()
    progress = StderrProgress(out, quiet_for=0.1)
    progress(CHECKING, 0.0)  # begun within the quiet time: no line yet
    assert out.getvalue() == ""
    time.sleep(0.3)  # still running when the quiet time ends: said then, no report needed
    assert out.getvalue() == "turbospark: Checking the model file…\n"
    progress(CHECKING, 1.0)
    done = re.fullmatch(r"turbospark: Checking the model file… done \((\d+\.\d) s\)", out.getvalue().splitlines()[-1])
    assert done is not None and float(done.group(1)) >= 0.3  # timed from the begin report
    quick = io.StringIO()
    progress = StderrProgress(quick, quiet_for=0.2)
    progress(CHECKING, 0.0)
    progress(CHECKING, 1.0)
    time.sleep(0.3)  # the cancelled timer says nothing later
    assert quick.getvalue() == ""


def test_silence_drops_a_begun_phase_line_still_to_come() -> None:
    from turbospark_app.cli.progress import StderrProgress

    out = io.StringIO()
    progress = StderrProgress(out, quiet_for=0.1)
    progress(CHECKING, 0.0)
    progress.silence()  # the load failed, or serve could not listen: the process is leaving
    time.sleep(0.3)
    progress(CHECKING, 1.0)
    assert out.getvalue() == ""
