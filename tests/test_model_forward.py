"""The float32 LlamaModel against a plain reference forward, on tiny random GGUFs written by the test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from model_reference import ref_forward
from tiny_gguf import FAMILY_VARIANTS, write_tiny_gguf

from turbospark_app.model.kv_cache import KVCache, KVCacheFull
from turbospark_app.model.reference.forward import LlamaModel

TOKENS = [5, 17, 299, 0, 42, 42, 7, 150, 3, 88, 201, 64]

VARIANTS = {
    # tied embeddings, full RoPE
    "llama": {},
    # separate output head, partial RoPE, llama3-style frequency factors, linear scaling, 4:1 GQA
    "llama-untied-partial-rope": {
        "tied": False, "rope_dims": 32, "rope_freqs": True, "linear_scale": 2.0, "n_kv": 1,
        "rope_base": 500000.0,
    },
    # q/k/v biases, NeoX RoPE, no GQA
    "qwen2": {"arch": "qwen2", "n_kv": 4},
    **FAMILY_VARIANTS,
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "tiny.gguf"
    weights, cfg = write_tiny_gguf(path, seed=len(request.param), **VARIANTS[request.param])
    # The float32 reference path (test_model_compact.py checks the compact one against it).
    model = LlamaModel.from_gguf(path, cache_dir=folder / "cache", weights="f32")
    return model, weights, cfg


def test_logits_match_reference_forward(tiny) -> None:
    model, weights, cfg = tiny
    ref = ref_forward(weights, cfg, TOKENS)  # (T, vocab) float64
    cache = model.new_cache()
    for t, token in enumerate(TOKENS):  # token by token: every position's logits
        logits = model.forward([token], cache)
        np.testing.assert_allclose(logits, ref[t], rtol=1e-4, atol=1e-4)
    chunk_cache = model.new_cache()
    logits = model.forward(TOKENS, chunk_cache)  # one chunk: the last position's logits
    np.testing.assert_allclose(logits, ref[-1], rtol=1e-4, atol=1e-4)
    assert np.abs(ref[-1]).max() > 0.1  # the comparison is not vacuous


def test_chunked_equals_token_by_token_equals_one_chunk(tiny) -> None:
    model, _, _ = tiny
    tokens = (TOKENS * 4)[:45]
    one = model.forward(tokens, model.new_cache())

    cache = model.new_cache()
    for token in tokens[:-1]:
        assert model.forward([token], cache, want_logits=False) is None
    by_token = model.forward(tokens[-1:], cache)

    chunked_cache = model.new_cache()
    spans = [(0, 7), (7, 8), (8, 21), (21, 40), (40, 45)]  # includes a 1-token chunk
    for start, end in spans[:-1]:
        model.forward(tokens[start:end], chunked_cache, want_logits=False)
    chunked = model.forward(tokens[40:45], chunked_cache)

    np.testing.assert_allclose(by_token, one, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(chunked, one, rtol=1e-4, atol=1e-4)
    for layer in range(model.config.n_layers):  # the caches hold the same K/V
        np.testing.assert_allclose(cache.keys(layer), chunked_cache.keys(layer), atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), chunked_cache.values(layer), atol=1e-5)


def test_trim_then_reproduce_equals_fresh(tiny) -> None:
    model, _, _ = tiny
    cache = model.new_cache()
    model.forward(TOKENS, cache, want_logits=False)
    cache.trim(5)
    other = [9, 8, 7, 6]
    after_trim = model.forward(other, cache)
    fresh = model.forward(TOKENS[:5] + other, model.new_cache())
    np.testing.assert_allclose(after_trim, fresh, rtol=1e-4, atol=1e-4)
    cache.trim(0)
    again = model.forward(TOKENS, cache)
    np.testing.assert_allclose(again, model.forward(TOKENS, model.new_cache()), atol=1e-4)


def test_float32_everywhere(tiny) -> None:
    model, _, _ = tiny
    w = model.weights
    for name, arr in w.arrays().items():
        assert arr.dtype == np.float32, name
    cache = model.new_cache()
    assert cache.dtype == np.float32
    logits = model.forward(TOKENS, cache)
    assert logits.dtype == np.float32 and logits.shape == (model.config.vocab_size,)
    assert model.forward([1], cache).dtype == np.float32
    out = np.full(model.config.vocab_size, np.nan, np.float32)
    assert model.forward([2], cache, logits_out=out) is out and np.isfinite(out).all()
    assert cache.k_store(0).dtype == np.float32 and cache.v_store(1).dtype == np.float32
    assert cache.keys(1).dtype == np.float32
    assert model._rope_table(4).dtype == np.complex64  # pairs of float32
    buf = model._buffers()
    for name in ("x", "xn", "tmp", "qkv", "gu", "act"):
        assert getattr(buf, name).dtype == np.float32, name


def test_kv_cache_grows_in_steps(tiny) -> None:
    model, _, cfg = tiny
    cache = model.new_cache(step=16)
    assert cache.capacity == 0 and cache.nbytes == 0
    model.forward(TOKENS[:10], cache, want_logits=False)
    assert cache.offset == 10 and cache.capacity == 16 < cfg["context"]
    per_token = cache.nbytes // cache.capacity
    assert per_token == cfg["n_layers"] * 2 * cfg["n_kv"] * cfg["head_dim"] * 4
    for t in TOKENS[:6]:
        model.forward([t], cache, want_logits=False)
    assert cache.offset == 16 and cache.capacity == 16
    model.forward([1], cache, want_logits=False)
    assert cache.capacity == 32  # one step more, K/V of the first 16 tokens kept
    reference = model.new_cache()
    model.forward(TOKENS[:10] + TOKENS[:6] + [1], reference, want_logits=False)
    np.testing.assert_allclose(cache.keys(1), reference.keys(1), atol=1e-5)


def test_kv_cache_unit_behaviour() -> None:
    cache = KVCache(n_layers=2, n_kv_heads=1, head_dim=4, max_context=600, step=256)
    cache.reserve(10)
    assert cache.capacity == 256
    cache.k_store(0)[:, :, :10] = 1.0
    cache.v_store(0)[:, :10] = 1.0
    cache.advance(10)
    cache.reserve(300)
    assert cache.capacity == 512 and (cache.keys(0) == 1.0).all() and (cache.values(0) == 1.0).all()
    cache.reserve(600)
    assert cache.capacity == 600  # bounded by max_context, never beyond
    with pytest.raises(KVCacheFull, match="600"):
        cache.reserve(601)
    with pytest.raises(ValueError):
        cache.trim(11)
    cache.trim(4)
    assert cache.offset == 4 and cache.keys(1).shape == (1, 4, 4)
    cache.shrink()
    assert cache.capacity == 256 and (cache.keys(0) == 1.0).all() and (cache.values(0) == 1.0).all()
    cache.release()
    assert cache.offset == 0 and cache.capacity == 0 and cache.nbytes == 0


def test_context_limit_and_bad_tokens(tiny) -> None:
    model, _, _ = tiny
    cache = model.new_cache(max_context=8)
    with pytest.raises(KVCacheFull):
        model.forward(TOKENS, cache)  # 12 tokens > 8
    assert cache.offset == 0  # nothing half-written becomes visible
    model.forward(TOKENS[:8], cache, want_logits=False)
    with pytest.raises(KVCacheFull):
        model.forward([1], cache)
    with pytest.raises(ValueError, match="out of range"):
        model.forward([model.config.vocab_size], model.new_cache())
    with pytest.raises(ValueError, match="out of range"):
        model.forward([-1], model.new_cache())


def test_config_from_metadata(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, tied=False, rope_dims=32, linear_scale=2.0)
    model = LlamaModel.from_gguf(path, cache_dir=tmp_path / "cache")
    c = model.config
    assert (c.architecture, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim) == (
        "llama", 2, 256, 4, 2, 64)
    assert (c.ffn_dim, c.vocab_size, c.context_length, c.rope_dims) == (512, 300, 1024, 32)
    assert c.rope_base == 10000.0 and c.rope_linear_scale == 2.0 and c.rope_style == "interleaved"
    assert abs(c.norm_eps - 1e-5) < 1e-9 and not c.tied_embeddings and not c.qkv_bias
    assert c.quantization == "Q8_0" and c.file_type == 7
    expected_params = 300 * 256 * 2 + 256 + 2 * (2 * 256 + 256 * 256 * 2 + 128 * 256 * 2 + 3 * 512 * 256)
    assert c.n_params == expected_params


@pytest.mark.parametrize("block", [1, 5, 128])
def test_chunked_attention_in_query_blocks(tiny, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks longer than the attention's query block (and starting mid-cache) stay exact."""
    import turbospark_app.model.base as llama_mod

    model, _, _ = tiny
    tokens = [(i * 37) % 300 for i in range(150)]
    cache = model.new_cache()
    for token in tokens[:-1]:
        model.forward([token], cache, want_logits=False)
    by_token = model.forward(tokens[-1:], cache)
    monkeypatch.setattr(llama_mod, "_ATTN_QUERY_BLOCK", block)
    chunked_cache = model.new_cache()
    model.forward(tokens[:11], chunked_cache, want_logits=False)
    chunked = model.forward(tokens[11:], chunked_cache)  # 139 tokens at position 11
    np.testing.assert_allclose(chunked, by_token, rtol=1e-4, atol=1e-4)
