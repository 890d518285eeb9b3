"""Shared fixtures (keep this file small)."""

from __future__ import annotations

from pathlib import Path

import os
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The run's caches (the loader's verdicts, built tokenizers) go to a folder of its own, never
    the user's; a test that wants its own folders takes `isolated_dirs`."""
    if not os.environ.get("TURBOSPARK_CACHE_DIR"):
        os.environ["TURBOSPARK_CACHE_DIR"] = tempfile.mkdtemp(prefix="turbospark-test-cache-")


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """The fetched, verified default model (SmolLM2-135M-Instruct Q4_1), or skip the test."""
    from turbospark_app.model.fetch import FetchError, ensure_default_model

    try:
        return ensure_default_model(download=False)
    except FetchError as exc:
        pytest.skip(f"default model not available: {exc} (`make test` fetches it first)")


@pytest.fixture(scope="session")
def embedder_path() -> Path:
    """The fetched, converted, verified default embedder (all-MiniLM-L6-v2 f16 GGUF), or skip."""
    from turbospark_app.model.embedder_fetch import ensure_embedder
    from turbospark_app.model.fetch import FetchError

    try:
        return ensure_embedder(download=False)
    except FetchError as exc:
        pytest.skip(f"embedding model not available: {exc} (`make test` fetches it first)")


@pytest.fixture
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Point TurboSpark's data, cache and config folders at fresh folders under tmp_path."""
    dirs = {name: tmp_path / name for name in ("data", "cache", "config")}
    for name, path in dirs.items():
        monkeypatch.setenv(f"TURBOSPARK_{name.upper()}_DIR", str(path))
    return dirs


@pytest.fixture
def ui(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A ui_fakes.UiHarness over a throw-away data folder (windows closed at tear-down)."""
    from ui_fakes import UiHarness

    import shiboken6

    from turbospark_app.ui.services.gc_guard import GuiThreadCollector

    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(tmp_path / "data"))
    collector = GuiThreadCollector()  # as run_app: cycles collected on the GUI thread only
    collector.start()
    harness = UiHarness(qtbot, tmp_path / "data")
    try:
        yield harness
        harness.teardown()
    finally:
        collector.stop()  # (automatic collection back even when the tear-down fails)
        shiboken6.delete(collector)  # (its timer's connection keeps the wrapper alive)
