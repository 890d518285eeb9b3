"""Never silently wrong (issue #19): every cache file a reply depends on - the weights' .npy
files and the saved ONNX Runtime session's model.onnx.data too - is verified before the reply's
first token is shown. A damaged file means the reply is computed again from weights rebuilt
from the GGUF, and the problem is reported; garbage is never streamed as a reply."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.chat.api import TurnSettings
from turbospark_app.chat.backend import LlamaChatBackend, load_backend
from turbospark_app.engine import GenerationConfig, Shaping, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.model import cache_integrity
from turbospark_app.model.weight_cache import budget

PROMPT = (1, 17, 42, 99, 5, 230, 64, 12)
SETTINGS = TurnSettings(generation=GenerationConfig(
    max_new_tokens=12, shaping=Shaping(repetition_penalty=50.0)))  # a varied reply


@pytest.fixture
def model(tmp_path: Path, isolated_dirs) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tokenizer={})
    budget.set_session_policy("current")  # a saved session: its files are under test too
    return path


def _reply(backend: LlamaChatBackend, session: str = "s") -> list[int]:
    """The token ids as the reply streams them (what a pane would show)."""
    shown: list[int] = []
    turn = backend.prepare_prompt(session, PROMPT, SETTINGS)
    drive_raw_completion(backend.stream_turn(turn, lambda: False), SETTINGS.generation.rate,
                         lambda: False, lambda e: shown.append(e.id) if isinstance(e, TokenProgress) else None)
    return shown


def _entry(cache: Path, kind: str) -> Path:
    (entry,) = [p for p in (cache / "weights").iterdir()
                if f"-{kind}-" in p.name and not p.name.startswith(".")]
    return entry


def _zero_tenth(path: Path) -> None:
    """Its second tenth zeroed, same size (ONNX Runtime happens to validate the prepacked
    blobs of the middle one itself; nothing checked the rest before)."""
    data = bytearray(path.read_bytes())
    n = len(data) // 10
    data[n:2 * n] = bytes(n)
    path.write_bytes(bytes(data))


def _zero_payload(path: Path) -> None:
    """Everything after the .npy header zeroed (the issue's zeroed embedding)."""
    data = bytearray(path.read_bytes())
    data[256:] = bytes(len(data) - 256)
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 9 // 10])


def _session_data(cache: Path) -> Path:
    (data,) = _entry(cache, "compact").glob("ort-*/model.onnx.data")
    return data


CASES: dict[str, tuple[str, Callable[[Path], Path], Callable[[Path], None]]] = {
    "zero a tenth of model.onnx.data": ("compact", _session_data, _zero_tenth),
    "zero the compact embedding": ("compact", lambda c: _entry(c, "compact") / "embd.0.packed.npy",
                                   _zero_payload),
    "zero the float32 embedding": ("f32", lambda c: _entry(c, "f32") / "token_embd.npy", _zero_payload),
    "truncate model.onnx.data": ("compact", _session_data, _truncate),
    "truncate a weight .npy": ("compact", lambda c: _entry(c, "compact") / "L1.down.0.packed.npy",
                               _truncate),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_cache_file_never_shows_a_wrong_reply(case: str, model: Path, tmp_path: Path,
                                                        isolated_dirs) -> None:
    weights, victim_of, damage = CASES[case]
    cache = tmp_path / "cache"
    clean = _reply(load_backend(model, cache_dir=cache, session_slots=1, weights=weights))
    if weights == "compact":  # a second load maps the saved session (the file under test)
        mapped = load_backend(model, cache_dir=cache, session_slots=1)
        assert mapped.model.session_origin == "mapped" and mapped.cache_check.join(30)
        del mapped
    damage(victim_of(cache))
    reported: list[str] = []
    backend = load_backend(model, cache_dir=cache, session_slots=1, weights=weights,
                           on_cache_problem=reported.append)
    assert _reply(backend) == clean  # never the damaged cache's reply, not even its first token
    if backend.cache_check is not None and backend.cache_check.state == "mismatch" or reported:
        assert reported and "integrity check" in reported[0] and "rebuilt" in reported[0]
    assert _reply(backend, "again") == clean  # and the next turns run on the rebuilt weights
    assert cache_integrity.verify_entry(_entry(cache, weights)) == []


def test_the_saved_session_is_checksummed_with_its_data(model: Path, tmp_path: Path,
                                                        isolated_dirs) -> None:
    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    data = _session_data(cache)
    assert cache_integrity.verify_entry(data.parent) == []
    _zero_tenth(data)
    problems = cache_integrity.verify_entry(data.parent)
    assert len(problems) == 1 and "model.onnx.data" in problems[0]


def test_the_first_token_waits_for_the_check(model: Path, tmp_path: Path, isolated_dirs,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A check still running holds the reply: no token is shown before its verdict."""
    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    release = threading.Event()
    real_verify = cache_integrity.verify_entry
    monkeypatch.setattr(cache_integrity, "verify_entry",
                        lambda entry: release.wait(30) and real_verify(entry))
    backend = load_backend(model, cache_dir=cache, session_slots=1)
    turn = backend.prepare_prompt("s", PROMPT, SETTINGS)
    stream = backend.stream_turn(turn, lambda: False)
    events = [next(stream) for _ in range(50)]
    assert not any(isinstance(e, TokenProgress) for e in events)  # held: only prefill and waits
    release.set()
    assert backend.cache_check.join(30) and backend.cache_check.state == "ok"
    assert any(isinstance(e, TokenProgress) for e in stream)


def test_stop_while_the_first_token_is_held_keeps_nothing(model: Path, tmp_path: Path,
                                                          isolated_dirs,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    release = threading.Event()
    monkeypatch.setattr(cache_integrity, "verify_entry", lambda entry: release.wait(30) and [])
    backend = load_backend(model, cache_dir=cache, session_slots=1)
    stop = threading.Event()
    turn = backend.prepare_prompt("s", PROMPT, SETTINGS)
    shown: list[object] = []
    timer = threading.Timer(1.0, stop.set)  # the whole reply takes a fraction of that unheld
    timer.start()
    result = drive_raw_completion(backend.stream_turn(turn, stop.is_set), SETTINGS.generation.rate,
                                  stop.is_set, shown.append)
    release.set()
    timer.cancel()
    assert result.new_tokens == 0 and result.reason.value == "cancelled"
    assert not any(isinstance(e, TokenProgress) for e in shown)


def test_a_cache_that_keeps_failing_is_an_error_not_a_loop(model: Path, tmp_path: Path,
                                                          isolated_dirs,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from turbospark_app.chat.cache_gate import CacheRejected

    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    monkeypatch.setattr(cache_integrity, "verify_entry", lambda entry: ["x.npy does not match"])
    backend = load_backend(model, cache_dir=cache, session_slots=1)
    rebuilds: list[int] = []
    real = backend.reload_model

    def reload_warm():  # as if every rebuilt entry failed too
        rebuilds.append(1)
        load_backend(model, cache_dir=cache, session_slots=1)  # (rebuilds, then maps it warm)
        return real()

    backend.reload_model = reload_warm
    with pytest.raises(CacheRejected, match="3 times in a row.*check the disk"):
        _reply(backend)
    assert len(rebuilds) == 2
