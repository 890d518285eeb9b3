"""Bad model files give a ModelFileError that names the file and the reason: our bounded header
reader's for a broken file, llama.cpp's own refusal (from its log, in one line) for a file it
does not run; the app never crashes on one (the first open is tried in a child process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import EngineError
from turbospark_app.model.gguf.header import ModelFileError


@pytest.fixture(autouse=True)
def _dirs(isolated_dirs: dict[str, Path]) -> None:
    """Every test starts with no remembered verdicts (the probe's cache is per user)."""


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "good.gguf"
    write_tiny_gguf(path)
    return path.read_bytes()


def _load_error(path: Path) -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        load_backend(path)
    err = info.value
    assert isinstance(err, EngineError)
    assert str(path) in str(err) and err.path == str(path)
    assert "\n" not in err.reason  # one line
    return err


def test_bad_magic(good: bytes, tmp_path: Path) -> None:
    path = tmp_path / "notgguf.gguf"
    path.write_bytes(b"GGML" + good[4:])
    err = _load_error(path)
    assert "not a GGUF file" in err.reason and "bad magic" in err.reason


def test_text_file_and_empty_file(tmp_path: Path) -> None:
    text = tmp_path / "readme.gguf"
    text.write_text("hello, I am not a model")
    assert "not a GGUF file" in _load_error(text).reason
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "not a GGUF file" in _load_error(empty).reason


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _load_error(tmp_path / "nope.gguf").reason


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_truncated_in_tensor_data(good: bytes, tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[: int(len(good) * keep)])
    assert "truncated" in _load_error(path).reason


@pytest.mark.parametrize("size", [6, 24, 200, 2000])
def test_truncated_in_header(good: bytes, tmp_path: Path, size: int) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[:size])
    assert "truncated" in _load_error(path).reason


def test_an_architecture_llama_cpp_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "new.gguf"
    write_tiny_gguf(path, arch="brand-new-arch")
    assert _load_error(path).reason == "unknown model architecture: 'brand-new-arch'"


def test_a_known_architecture_without_its_tensors(tmp_path: Path) -> None:
    """A gpt2 file llama.cpp runs needs gpt2's tensors: these are Llama's. No name table of ours
    decides it: llama.cpp's loader says what is missing."""
    path = tmp_path / "gpt2.gguf"
    write_tiny_gguf(path, arch="gpt2")
    reason = _load_error(path).reason
    assert reason.startswith("key not found in model: gpt2.") or "tensor" in reason


def test_missing_tensor(tmp_path: Path) -> None:
    path = tmp_path / "missing.gguf"
    write_tiny_gguf(path, skip_tensor="blk.1.ffn_up.weight")
    assert _load_error(path).reason == "tensor 'blk.1.ffn_up.weight' not found"


def test_wrong_tensor_shape(tmp_path: Path) -> None:
    path = tmp_path / "shape.gguf"
    write_tiny_gguf(path, wrong_shape={"blk.0.attn_q.weight": (256, 512)})
    reason = _load_error(path).reason
    assert "blk.0.attn_q.weight" in reason and "wrong shape" in reason


def test_missing_metadata(tmp_path: Path) -> None:
    path = tmp_path / "nometa.gguf"
    write_tiny_gguf(path, skip_metadata="layer_norm_rms_epsilon")
    assert "llama.attention.layer_norm_rms_epsilon" in _load_error(path).reason


def test_no_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "novocab.gguf"
    write_tiny_gguf(path, tokenizer=False)
    assert _load_error(path).reason == "key not found in model: tokenizer.ggml.model"


def test_a_refused_file_is_not_asked_again_and_a_good_one_loads(tmp_path: Path, monkeypatch) -> None:
    from turbospark_app.model.llamacpp import probe

    path = tmp_path / "missing.gguf"
    write_tiny_gguf(path, skip_tensor="blk.1.ffn_up.weight")
    _load_error(path)
    children: list[Path] = []
    real = probe.probe_in_child
    monkeypatch.setattr(probe, "probe_in_child", lambda p, *a: children.append(p) or real(p, *a))
    _load_error(path)  # the remembered verdict: no child this time
    assert children == []
    good_path = tmp_path / "good.gguf"
    write_tiny_gguf(good_path)
    backend = load_backend(good_path)
    assert children == [good_path]
    assert backend.model_info()["engine_description"].startswith("llama")
    backend.close()
