"""Weight-cache integrity: a checksum per cache file, verified in the background after a warm
load while the first token waits; a mismatch is reported, the entry rebuilt and the reply
computed again, never shown from the bad bytes (tests/test_cache_never_wrong.py: per file)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.chat.backend import load_backend
from turbospark_app.model import cache_integrity
from turbospark_app.model.reference.weights import load_weights


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tokenizer={})
    return path


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / "weights").iterdir() if not p.name.startswith(".")]
    return entry


def _contents(entry: Path) -> dict[str, str]:
    """Digest of every weight file of an entry (not the manifest: it holds a timestamp)."""
    return {p.name: cache_integrity.file_digest(p) for p in entry.iterdir()
            if p.suffix == ".npy"}


def _zero_payload(entry: Path) -> Path:
    """The issue's damage: the biggest file's payload zeroed, same size, header intact."""
    victim = max((p for p in entry.iterdir() if p.name != cache_integrity.CHECKSUM_FILE),
                 key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    keep = 256  # the .npy header (and any format's header) stays valid
    data[keep:] = bytes(len(data) - keep)
    victim.write_bytes(bytes(data))
    return victim


def test_each_entry_carries_checksums_that_verify(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_weights(model, cache)
    entry = _entry(cache)
    assert (entry / cache_integrity.CHECKSUM_FILE).is_file()
    assert cache_integrity.verify_entry(entry) == []


def test_a_zeroed_payload_is_found_by_name(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_weights(model, cache)
    victim = _zero_payload(_entry(cache))
    _, warm = load_weights(model, cache)
    assert warm.origin == "cache"  # the quick checks (size, header) pass: only content differs
    problems = cache_integrity.verify_entry(_entry(cache))
    assert len(problems) == 1 and victim.name in problems[0] and "checksum" in problems[0]


def test_a_corrupt_entry_is_reported_rebuilt_and_reloaded(model: Path, tmp_path: Path,
                                                          isolated_dirs) -> None:
    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    expected = _contents(_entry(cache))  # whatever the weight format writes
    _zero_payload(_entry(cache))
    reported: list[str] = []
    seen = threading.Event()

    def on_problem(message: str) -> None:
        reported.append(message)
        seen.set()

    backend = load_backend(model, cache_dir=cache, session_slots=1, on_cache_problem=on_problem)
    assert backend.model.weights.origin == "cache"
    assert seen.wait(30), "the background check never reported"
    assert "weight cache" in reported[0] and "rebuil" in reported[0]
    assert backend.model_info()["weights_check"] == "mismatch"
    reloaded = load_backend(model, cache_dir=cache, session_slots=1)
    assert reloaded.model.weights.origin == "built"  # the bad entry was set aside
    assert _contents(_entry(cache)) == expected  # rebuilt the same as before the damage


def test_a_sound_warm_load_checks_out_in_the_background(model: Path, tmp_path: Path,
                                                       isolated_dirs) -> None:
    cache = tmp_path / "cache"
    load_backend(model, cache_dir=cache, session_slots=1)
    problems: list[str] = []
    backend = load_backend(model, cache_dir=cache, session_slots=1, on_cache_problem=problems.append)
    assert backend.model.weights.origin == "cache"
    backend.cache_check.join(30)
    assert problems == [] and backend.model_info()["weights_check"] == "ok"


def test_the_cli_says_so_and_answers_from_the_rebuilt_weights(model: Path, tmp_path: Path,
                                                               isolated_dirs, capsys) -> None:
    from turbospark_app.cli.main import main

    argv = ["chat", "--model", str(model), "--prompt", "hi the", "--max-new", "12",
            "--repeat-penalty", "50", "--quiet-summary"]  # (a varied reply from the tiny model)
    assert main(argv) == 0
    clean = capsys.readouterr().out
    _zero_payload(_entry(isolated_dirs["cache"]))
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "weight cache" in err and "rebuil" in err
    assert len(clean) > 8 and out == clean  # the corrupt cache's reply was never printed


def test_the_window_shows_it_and_leaves_the_rebuild_to_the_backend(ui, qtbot) -> None:
    """A cache problem reported from the checking thread: the status bar says so; the engine is
    not switched (that would stop a held reply): the backend rebuilds and answers again."""
    from qa_fakes import RecordingBackend, issue6_window

    backend = RecordingBackend(replies=("a",), model_name="m")
    w = issue6_window(ui, backend)
    loads = [c[0] for c in backend.calls].count("load")
    message = "the weight cache m-1234 failed its integrity check (wo.npy does not match)"
    with qtbot.waitSignal(w.bridge.cacheProblem, timeout=10000):
        threading.Thread(target=w.bridge.report_cache_problem, args=(message,)).start()
    assert message in w.status.currentMessage()
    qtbot.wait(200)
    assert [c[0] for c in backend.calls].count("load") == loads
    assert w.bridge.backend_state == "ready"


def test_the_app_factory_passes_the_reporter_to_load_backend(monkeypatch) -> None:
    import turbospark_app.chat.backend as backend_mod
    from turbospark_app.ui.app import real_backend_factory

    seen = {}
    monkeypatch.setattr(backend_mod, "load_backend", lambda path, **kw: seen.update(kw) or "b")
    report = lambda message: None  # noqa: E731
    factory = real_backend_factory(__file__, 1, on_cache_problem=report)
    assert factory() == "b" and seen["on_cache_problem"] is report


def test_pieces_are_checked_on_both_cores_and_old_entries_still_verify(tmp_path: Path, monkeypatch) -> None:
    import hashlib
    import json

    monkeypatch.setattr(cache_integrity, "PIECE_BYTES", 1000)
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "big.bin").write_bytes(bytes(range(256)) * 40)  # 10,240 bytes: 11 pieces
    (entry / "small.bin").write_bytes(b"abc")
    cache_integrity.write_checksums(entry)
    doc = json.loads((entry / cache_integrity.CHECKSUM_FILE).read_text())
    assert len(doc["files"]["big.bin"]["pieces"]) == 11 and doc["algorithm"] == "sha256"
    assert cache_integrity.verify_entry(entry, workers=2) == []
    data = bytearray((entry / "big.bin").read_bytes())
    data[7500] ^= 1  # one bit, in the eighth piece
    (entry / "big.bin").write_bytes(bytes(data))
    assert cache_integrity.verify_entry(entry) == ["big.bin does not match its checksum (its content changed)"]
    old = {"algorithm": "blake2b-128", "files": {  # written before sha256 pieces
        name: {"size": (entry / name).stat().st_size,
               "digest": hashlib.blake2b((entry / name).read_bytes(), digest_size=16).hexdigest()}
        for name in ("big.bin", "small.bin")}}
    (entry / cache_integrity.CHECKSUM_FILE).write_text(json.dumps(old))
    assert cache_integrity.verify_entry(entry) == []


def test_only_a_verifying_load_hashes_at_once(model: Path, tmp_path: Path) -> None:
    """A model loaded by a benchmark or tool starts no hashing beside what it measures; the
    chat backend's loads do (their replies wait for the verdict)."""
    cache = tmp_path / "cache"
    load_weights(model, cache)
    cache_integrity.take_warm_entries(model)
    load_weights(model, cache)
    (entry,) = cache_integrity.take_warm_entries(model)
    assert cache_integrity._take_early(entry) is None
    with cache_integrity.verifying_load():
        load_weights(model, cache)
    (entry,) = cache_integrity.take_warm_entries(model)
    early = cache_integrity._take_early(entry)
    assert early is not None and early.result(30) == []
