"""`turbospark chat` starts loading the model before the chat modules import (`chat.preload`):
only a file the probe child loaded (a first-seen file's child runs on the preload's thread, or
early for a bigger file: `probe.verdict_soon`), and `load_backend` takes that model instead of
loading it again; anything else (a file llama.cpp refused, another file or layer count) loads
the normal way and says what it says there."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.chat.backend import load_backend
from turbospark_app.chat.preload import Preload, start_preload
from turbospark_app.cli.main import main
from turbospark_app.model.gguf.header import ModelFileError
from turbospark_app.model.llamacpp import probe
from turbospark_app.model.llamacpp.model import LlamaCppModel


@pytest.fixture
def tiny(tmp_path: Path, isolated_dirs) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every LlamaCppModel.open from now on, with its keywords."""
    seen: list[dict] = []
    real = LlamaCppModel.open.__func__

    def spy(cls, path, **kw):
        seen.append(dict(kw, path=Path(path)))
        return real(cls, path, **kw)

    monkeypatch.setattr(LlamaCppModel, "open", classmethod(spy))
    return seen


def test_a_first_seen_file_is_preloaded_once_its_child_said_it_runs(tiny: Path, monkeypatch) -> None:
    opens = _opens(monkeypatch)
    asked: list[Path] = []
    real_child = probe.probe_in_child
    monkeypatch.setattr(probe, "probe_in_child", lambda p, *a: asked.append(p) or real_child(p, *a))
    assert probe.known_verdict(tiny) is None
    preload = Preload(tiny, -1)
    model = preload.take(tiny, -1)  # the preload's thread asked the child, then loaded it
    try:
        assert model is not None and asked == [tiny] and [o["probed"] for o in opens] == [True]
        assert probe.known_verdict(tiny).runs  # remembered: the next start skips the child
    finally:
        model.close()


def test_an_early_verdict_is_the_one_the_load_waits_for(tiny: Path, monkeypatch) -> None:
    asked: list[Path] = []
    real_child = probe.probe_in_child
    monkeypatch.setattr(probe, "probe_in_child", lambda p, *a: asked.append(p) or real_child(p, *a))
    probe.verdict_soon(tiny)  # (what the command line does for a file too big to preload)
    probe.verdict_soon(tiny)
    backend = load_backend(tiny)
    backend.close()
    assert asked == [tiny]  # one child for the early look, the load and the second call
    probe.forget(tiny)
    assert probe.verdict(tiny).runs and asked == [tiny, tiny]  # forgotten: asked again


def test_a_refused_first_seen_file_is_not_preloaded(tmp_path: Path, isolated_dirs, monkeypatch) -> None:
    broken = tmp_path / "broken.gguf"
    write_tiny_gguf(broken, skip_tensor="blk.1.ffn_down.weight")
    opens = _opens(monkeypatch)
    preload = Preload(broken, -1)
    assert preload.take(broken, -1) is None and opens == []  # the child refused it: never loaded here


def test_a_probed_file_loads_once_and_the_backend_takes_it(tiny: Path, monkeypatch) -> None:
    assert probe.verdict(tiny).runs  # the child has loaded it: remembered
    opens = _opens(monkeypatch)
    preload = start_preload(tiny, -1)
    assert preload is not None
    backend = load_backend(tiny, preload=preload)
    try:
        assert [o["probed"] for o in opens] == [True]  # one load: the preload's
        assert backend.model.header is not None and backend.model.header.path == tiny
        assert backend.tokenizer.encode("hello") and backend.config.n_layers == 2
    finally:
        backend.close()
    preload.close()  # taken: nothing left to free


def test_a_preload_of_another_file_or_layer_count_is_freed(tiny: Path, tmp_path: Path, monkeypatch) -> None:
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, seed=5)
    for p in (tiny, other):
        assert probe.verdict(p).runs
    closed: list[Path] = []
    real_close = LlamaCppModel.close
    monkeypatch.setattr(LlamaCppModel, "close", lambda self: closed.append(self.path) or real_close(self))
    preload = Preload(tiny, -1)
    backend = load_backend(other, preload=preload)  # not this file's: it loads its own
    backend.close()
    assert preload.take(tiny, 0) is None and closed[-1] == tiny  # another layer count: freed
    unused = Preload(tiny, -1)
    unused.close()
    assert closed[-1] == tiny


def test_a_file_llama_cpp_refused_is_said_as_without_a_preload(tmp_path: Path, isolated_dirs) -> None:
    broken = tmp_path / "broken.gguf"
    write_tiny_gguf(broken, skip_tensor="blk.1.ffn_down.weight")
    assert not probe.verdict(broken).runs
    with pytest.raises(ModelFileError, match="tensor 'blk.1.ffn_down.weight' not found"):
        load_backend(broken, preload=Preload(broken, -1))


def test_the_command_line_preloads_and_replies(tiny: Path, monkeypatch, capsys) -> None:
    assert probe.verdict(tiny).runs
    opens = _opens(monkeypatch)
    code = main(["chat", "--model", str(tiny), "--prompt", "hi", "--max-new", "3", "--temperature", "0"])
    assert code == 0
    assert [o["probed"] for o in opens] == [True]
    assert "| new 3 tok |" in capsys.readouterr().err


def test_an_early_exit_frees_the_preloaded_model(tiny: Path, monkeypatch) -> None:
    from turbospark_app.chat import preload as preload_module

    assert probe.verdict(tiny).runs
    started: list[Preload] = []
    real_start = preload_module.start_preload
    monkeypatch.setattr(preload_module, "start_preload", lambda *a: started.append(real_start(*a)) or started[-1])
    freed: list[int] = []
    real_close = LlamaCppModel.close
    monkeypatch.setattr(LlamaCppModel, "close", lambda self: freed.append(id(self)) or real_close(self))
    # --raw with --system is refused before any load: the preload's model is freed on the way out
    code = main(["chat", "--model", str(tiny), "--prompt", "hi", "--raw", "--system", "x"])
    assert code == 2 and len(started) == 1
    assert started[0]._model is None and not started[0]._thread.is_alive() and freed
