"""A real MainWindow over a tiny GGUF, loaded through the app's own model factory (as run_app),
for the load-setting tests (test_ui_threads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tiny_gguf import write_tiny_gguf


@pytest.fixture
def tiny_chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny GGUF the chat backend can load (weights, vocabulary, ChatML template); the caches
    in tmp_path; no TURBOSPARK_THREADS from the caller's shell."""
    monkeypatch.delenv("TURBOSPARK_THREADS", raising=False)
    monkeypatch.setenv("TURBOSPARK_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny-chat.gguf"
    write_tiny_gguf(path, tokenizer={})
    return path


def real_window(ui: Any, model: Path, *, flag: int | None = None,
                wrap: Callable[[Any], Any] | None = None) -> Any:
    """A shown MainWindow loading `model` through the app's own model factory (as run_app);
    `flag`: the --threads flag; `wrap`: wraps the factory."""
    from turbospark_app.ui.app import app_model_factory, build_window

    settings = ui.settings()
    factory = app_model_factory(settings, threads_flag=flag)
    if wrap is not None:
        factory = wrap(factory)
    w = build_window(factory(str(model)), store_path=ui.store_path, settings=settings,
                     model_factory=factory, threads_flag=flag)
    ui.qtbot.addWidget(w)
    w.show()
    ui.windows.append(w)
    ui.qtbot.waitUntil(lambda: w.bridge.backend_state in ("ready", "failed"), timeout=30000)
    return w


def engine_context(w: Any) -> Any:
    """The llama.cpp context the engine thread owns (read here only to check its threads)."""
    return w.bridge.engine._backend.context


def pick_settings(w: Any, **modes: str) -> Any:
    """Conversation › Settings…, choose each of `modes` (threads="1") in its control, press OK.
    Returns the dialog."""
    w.open_settings()
    dialog = w.settings_dialog
    for what, mode in modes.items():
        combo = getattr(dialog, f"{what}_field").combo
        assert combo.isEnabled(), f"the {what} control is disabled"
        combo.setCurrentIndex(combo.findData(mode))
    dialog.ok_button.click()
    return dialog


def wait_for_model(qtbot: Any, w: Any, **facts: Any) -> None:
    """Until the engine is ready with these model_info facts (threads=1)."""
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready"
                    and all(w.bridge.model_info.get(k) == v for k, v in facts.items()), timeout=30000)


def spy_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every backend chat_backend.load_backend builds from now on (the CLI's loads), in order."""
    import turbospark_app.chat.backend as backend_mod

    loaded: list[Any] = []
    real = backend_mod.load_backend

    def spy(*args: Any, **kwargs: Any) -> Any:
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(backend_mod, "load_backend", spy)
    return loaded
