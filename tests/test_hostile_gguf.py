"""Hostile GGUF headers: refused at once, with the field or tensor named, never a hang, a leak or
a crash: our bounded header reader refuses what it can name, llama.cpp's loader (tried first in
a child process) the rest, in its own words.

Each file is opened the ways a user opens it (`turbospark model info`, and `load_backend`, which
`chat` and the window's Open Model use) in a child process capped in memory and time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gguf_mutate import header_sites, mutated, site_named
from hostile import open_bounded
from tiny_gguf import write_tiny_gguf

RAW_LIBRARY_TEXTS = ("index ", "out of bounds", "unpack", "reshape", "Traceback", "KeyError",
                     "object has no attribute")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list]:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, tokenizer={})
    return path.read_bytes(), header_sites(str(path))


def _open(tmp_path: Path, data: bytes) -> dict:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    env = dict(os.environ, TURBOSPARK_CACHE_DIR=str(tmp_path / "cache"),
               TURBOSPARK_DATA_DIR=str(tmp_path / "data"))
    return open_bounded(path, tmp_path / "cache", env)


def _refused(out: dict) -> str:
    """Both paths refused the file with a ModelFileError; the shared reason."""
    assert out["info"]["code"] == 1, out
    assert out["load"]["outcome"] == "ModelFileError", out
    info = out["info"]["stderr"]
    assert not any(t in info or t in out["load"]["text"] for t in RAW_LIBRARY_TEXTS), out
    assert out["load"]["reason"] in info  # one set of messages for every path
    assert out["info"]["seconds"] < 5 and out["load"]["seconds"] < 5, out
    return out["load"]["reason"]


def test_the_untouched_file_loads(tiny, tmp_path) -> None:
    out = _open(tmp_path, tiny[0])
    assert out["info"]["code"] == 0 and out["load"]["outcome"] == "ok", out


def test_an_absurd_array_count_is_refused_at_once(tiny, tmp_path) -> None:
    data, sites = tiny
    site = site_named(sites, "tokenizer.ggml.tokens: array length")
    reason = _refused(_open(tmp_path, mutated(data, site, 1 << 40)))
    assert "'tokenizer.ggml.tokens'" in reason and "1,099,511,627,776" in reason


def test_absurd_tensor_dimensions_name_the_tensor_and_size(tiny, tmp_path) -> None:
    data, sites = tiny
    site = site_named(sites, "blk.0.attn_q.weight: dimension 1")
    reason = _refused(_open(tmp_path, mutated(data, site, 1 << 50)))
    assert "'blk.0.attn_q.weight'" in reason and "truncated" not in reason
    assert "bytes" in reason and str(1 << 50) in reason.replace(",", "")


def test_an_absurd_tensor_offset_names_the_tensor(tiny, tmp_path) -> None:
    data, sites = tiny
    site = site_named(sites, "blk.0.attn_q.weight: data offset")
    reason = _refused(_open(tmp_path, mutated(data, site, 1 << 36)))
    assert "'blk.0.attn_q.weight'" in reason and "offset 68,719,476,736" in reason
    assert "truncated" not in reason


@pytest.mark.parametrize(("label", "value", "expected"), [
    ("GGUF version", 7, "unsupported GGUF version 7"),
    ("metadata count", 1 << 62, "metadata count"),
    ("tensor count", 1 << 40, "tensor count"),
    ("general.architecture: value type", 99, "unknown value type 99"),
    ("tokenizer.ggml.merges: array item type", 42, "unknown value type 42"),
    ("blk.0.attn_q.weight: dimension count", 9, "claims 9 dimensions"),
    ("blk.0.attn_q.weight: dimension 0", 0, "zero dimension"),
    ("blk.0.attn_q.weight: tensor type", 999, "unknown GGML type id 999"),
    ("tokenizer.ggml.tokens: string length in array", 1 << 33, "tokenizer.ggml.tokens' element"),
    ("general.architecture: key length", 1 << 45, "key of metadata entry"),
])
def test_lying_header_fields_give_one_clear_message(tiny, tmp_path, label, value, expected) -> None:
    data, sites = tiny
    reason = _refused(_open(tmp_path, mutated(data, site_named(sites, label), value)))
    assert expected in reason


def test_an_absurd_layer_count_is_refused_before_any_loop(tiny, tmp_path) -> None:
    # found by the fuzzer: block_count = 2^60 made the shape check build a dict per layer
    import gguf

    data, sites = tiny
    reader = gguf.GGUFReader(_good_path(tmp_path, data))
    field = reader.fields["llama.block_count"]
    offset = field.parts[-1].ctypes.data - reader.data.ctypes.data
    hostile = data[:offset] + (1 << 30).to_bytes(4, "little") + data[offset + 4:]
    reason = _refused(_open(tmp_path, hostile))
    assert "'llama.block_count' = 1,073,741,824" in reason


def _good_path(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "good.gguf"
    path.write_bytes(data)
    return str(path)


def test_a_file_llama_cpp_cannot_run_is_described_and_refused(tmp_path) -> None:
    from foreign_gguf import write_foreign_gguf

    data = write_foreign_gguf(tmp_path / "mamba-src.gguf", "mamba").read_bytes()  # keys, no layers
    reason = _refused(_open(tmp_path, data))
    assert "not found" in reason


def test_metadata_of_the_wrong_type_is_refused_by_name(tmp_path) -> None:
    # A string where a count belongs: int("two") was a ValueError traceback in both paths.
    import gguf
    import numpy as np

    path = tmp_path / "typed-src.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("llama.block_count", "two")
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reason = _refused(_open(tmp_path, path.read_bytes()))
    assert reason == "bad metadata 'llama.block_count' = 'two': a string, expected an integer"


# --- one case per model family: its own tensors and keys, named (by llama.cpp) when wrong --------

FAMILY_CASES = [  # llama.cpp's own words (its loader knows every family; we hold no table)
    ("qwen3", {"head_dim": 96, "wrong_shape": {"blk.0.attn_q_norm.weight": (112,)}},
     "tensor 'blk.0.attn_q_norm.weight' has wrong shape; expected     96, got    112"),
    ("gemma3", {"skip_tensor": "blk.1.post_ffw_norm.weight"}, "tensor 'blk.1.post_ffw_norm.weight' not found"),
    ("gemma2", {"wrong_shape": {"blk.0.post_attention_norm.weight": (128,)}},
     "tensor 'blk.0.post_attention_norm.weight' has wrong shape; expected    256, got    128"),
    ("phi3", {"wrong_shape": {"blk.1.attn_qkv.weight": (256, 256)}},
     "tensor 'blk.1.attn_qkv.weight' has wrong shape; expected    256,    512, got    256,    256"),
    ("granite", {"meta": {"residual_scale": 0.2}}, "key not found in model: granite.logit_scale"),
    ("smollm3", {"skip_tensor": "blk.0.ffn_gate.weight"}, "tensor 'blk.0.ffn_gate.weight' not found"),
    ("olmo2", {"tied": True}, "tensor 'output.weight' not found"),
]


@pytest.mark.parametrize(("arch", "options", "expected"), FAMILY_CASES, ids=[c[0] for c in FAMILY_CASES])
def test_a_bad_file_of_each_family_names_what_is_wrong(tmp_path, arch, options, expected) -> None:
    path = tmp_path / "family.gguf"
    write_tiny_gguf(path, arch=arch, tokenizer={}, **options)
    assert expected in _refused(_open(tmp_path, path.read_bytes()))


def test_a_gemma3_file_without_its_sliding_window_key_runs(tmp_path) -> None:
    # The key has a default (no sliding window, llama.cpp's non-iswa graph): the file is fine.
    path = tmp_path / "gemma3.gguf"
    write_tiny_gguf(path, arch="gemma3", tokenizer={})
    out = _open(tmp_path, path.read_bytes())
    assert out["info"]["code"] == 0 and out["load"]["outcome"] == "ok", out
