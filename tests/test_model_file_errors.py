"""Bad model files give a ModelFileError that names the file and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import LAYER_TYPES, write_tiny_gguf

from turbospark_app.engine import EngineError
from turbospark_app.model.families import cannot_run_message
from turbospark_app.model.gguf.file import ModelFileError, open_gguf
from turbospark_app.model.reference.forward import LlamaModel


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "good.gguf"
    write_tiny_gguf(path)
    return path.read_bytes()


def _load_error(path: Path, tmp_path: Path) -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        LlamaModel.from_gguf(path, cache_dir=tmp_path / "cache")
    err = info.value
    assert isinstance(err, EngineError)
    assert str(path) in str(err) and err.path == str(path)
    return err


def test_bad_magic(good: bytes, tmp_path: Path) -> None:
    path = tmp_path / "notgguf.gguf"
    path.write_bytes(b"GGML" + good[4:])
    err = _load_error(path, tmp_path)
    assert "not a GGUF file" in err.reason and "bad magic" in err.reason


def test_text_file_and_empty_file(tmp_path: Path) -> None:
    text = tmp_path / "readme.gguf"
    text.write_text("hello, I am not a model")
    assert "not a GGUF file" in _load_error(text, tmp_path).reason
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "not a GGUF file" in _load_error(empty, tmp_path).reason


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _load_error(tmp_path / "nope.gguf", tmp_path).reason


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_truncated_in_tensor_data(good: bytes, tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[: int(len(good) * keep)])
    assert "truncated" in _load_error(path, tmp_path).reason


@pytest.mark.parametrize("size", [6, 24, 200, 2000])
def test_truncated_in_header(good: bytes, tmp_path: Path, size: int) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[:size])
    assert "truncated" in _load_error(path, tmp_path).reason


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "gpt2.gguf"
    write_tiny_gguf(path, arch="gpt2")
    err = _load_error(path, tmp_path)
    assert err.reason == cannot_run_message("gpt2")
    assert err.reason.startswith("TurboSpark cannot run architecture 'gpt2' yet (it runs: llama")


def test_missing_tensor(tmp_path: Path) -> None:
    path = tmp_path / "missing.gguf"
    write_tiny_gguf(path, skip_tensor="blk.1.ffn_up.weight")
    assert "missing tensor 'blk.1.ffn_up.weight'" in _load_error(path, tmp_path).reason


def test_missing_metadata(tmp_path: Path) -> None:
    path = tmp_path / "nometa.gguf"
    write_tiny_gguf(path, skip_metadata="layer_norm_rms_epsilon")
    err = _load_error(path, tmp_path)
    assert "missing metadata 'llama.attention.layer_norm_rms_epsilon'" in err.reason


def test_zero_context_length(tmp_path: Path) -> None:
    path = tmp_path / "noctx.gguf"
    write_tiny_gguf(path, context=0)
    assert "'llama.context_length' = 0 (must be > 0)" in _load_error(path, tmp_path).reason


def test_unsupported_tensor_type(tmp_path: Path) -> None:
    path = tmp_path / "q2k.gguf"
    write_tiny_gguf(path, layer_types=[dict(LAYER_TYPES[0], ffn_down="Q2_K"), LAYER_TYPES[1]])
    err = _load_error(path, tmp_path)
    assert "unsupported tensor type Q2_K" in err.reason and "blk.0.ffn_down.weight" in err.reason


def test_open_gguf_reports_config(tmp_path: Path) -> None:
    path = tmp_path / "ok.gguf"
    write_tiny_gguf(path)
    gf = open_gguf(path)
    try:
        assert gf.config.architecture == "llama" and gf.has_tensor("token_embd.weight")
        with pytest.raises(ModelFileError, match="missing tensor 'nope'"):
            gf.tensor("nope")
    finally:
        gf.close()
