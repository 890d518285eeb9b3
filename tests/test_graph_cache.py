"""The forward graph saved in the weight cache entry (model/compact/graph_cache.py): a warm open
reads it instead of importing onnx and building it, and a damaged copy is never used."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.model.compact import graph_cache
from turbospark_app.model.reference.forward import LlamaModel

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [1, 17, 42, 99, 5, 230, 64, 12]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, seed=5)
    return path


def _logits(m) -> np.ndarray:
    return m.forward(PROMPT, m.new_cache())


def _graph_file(cache: Path, kernels: str = "int8") -> Path:
    (path,) = (cache / "weights").glob(f"*-compact-*/{graph_cache.FOLDER}/*-{kernels}-0.onnx")
    return path


def test_a_warm_open_reads_the_saved_graph(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8")
    assert first.graph_cached is False and _graph_file(cache).is_file()
    second = LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8")
    assert second.graph_cached is True
    np.testing.assert_array_equal(_logits(first), _logits(second))
    other = LlamaModel.from_gguf(model, cache, weights="compact", kernels="exact")
    assert other.graph_cached is False  # one graph per kernel mode
    assert _graph_file(cache, "exact").parent == _graph_file(cache).parent


def test_a_warm_open_does_not_import_onnx(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    LlamaModel.from_gguf(model, cache, weights="compact")
    code = ("import sys; from turbospark_app.model.reference.forward import LlamaModel;"
            f"m = LlamaModel.from_gguf({str(model)!r}, {str(cache)!r}, weights='compact');"
            "print(m.graph_cached, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.split() == ["True", "False"]


def _rescale_attention(path: Path) -> None:
    """A silent change: every attention's softmax scale halved (a proto that still loads)."""
    blob = bytearray(path.read_bytes())
    head = 4 + 32
    proto = bytes(blob[head:])
    scale = struct.pack("<f", np.float32(1 / np.sqrt(64)))  # tiny model: head_dim 64
    assert scale in proto
    blob[head:] = proto.replace(scale, struct.pack("<f", np.float32(0.5 / np.sqrt(64))))
    path.write_bytes(bytes(blob))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damage", [_rescale_attention, _truncate], ids=["rescaled", "truncated"])
def test_a_damaged_graph_is_built_again(damage, model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    clean = _logits(LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8"))
    damage(_graph_file(cache))
    again = LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8")
    assert again.graph_cached is False
    np.testing.assert_array_equal(_logits(again), clean)
    assert LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8").graph_cached


def test_graphs_of_older_code_are_removed(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8")
    current = _graph_file(cache)
    folder = current.parent
    current.unlink()
    (folder / "0123456789abcdef-int8-0.onnx").write_bytes(b"old")
    LlamaModel.from_gguf(model, cache, weights="compact", kernels="int8")
    assert [p.name.split("-")[0] for p in folder.glob("*.onnx")] == [graph_cache.graph_key("int8", False)[:16]]
