"""LlamaProducer: the engine contract over a tiny model (token mirror, cursor, prefix reuse)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.engine import ChunkedPrefillRunner, LogitProducer
from turbospark_app.model.producer import LlamaProducer, PositionMismatch
from turbospark_app.model.reference.forward import LlamaModel

PROMPT = [3, 14, 15, 92, 65, 35, 89, 79]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    folder = tmp_path_factory.mktemp("producer")
    write_tiny_gguf(folder / "tiny.gguf")
    # The float32 path: its chunked and token-by-token passes agree to 1e-4 (exact contract checks).
    return LlamaModel.from_gguf(folder / "tiny.gguf", cache_dir=folder / "cache", weights="f32")


def _logits(model: LlamaModel) -> np.ndarray:
    return np.zeros(model.config.vocab_size, np.float32)


def _fresh(model: LlamaModel, ids: list[int]) -> np.ndarray:
    return model.forward(ids, model.new_cache())


def test_implements_the_engine_protocols(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    assert isinstance(p, LogitProducer) and isinstance(p, ChunkedPrefillRunner)
    assert p.session_slot_evicted() is False


def test_produce_writes_logits_in_place_and_mirrors_tokens(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    out = _logits(model)
    for pos, tok in enumerate(PROMPT[:-1]):
        p.produce_prefill(tok, pos, out)
    assert not out.any()  # produce_prefill skipped the head and left logits_out alone
    p.produce(PROMPT[-1], len(PROMPT) - 1, out)
    np.testing.assert_allclose(out, _fresh(model, PROMPT), rtol=1e-4, atol=1e-4)
    assert p.mirror == tuple(PROMPT) and p.cache.offset == len(PROMPT)
    assert isinstance(p.mirror, tuple)  # read-only copy


def test_produce_chunk(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    p.produce_chunk(PROMPT[:5], 0, None)
    out = _logits(model)
    p.produce_chunk(PROMPT[5:], 5, out)
    np.testing.assert_allclose(out, _fresh(model, PROMPT), rtol=1e-4, atol=1e-4)
    assert p.mirror == tuple(PROMPT)
    with pytest.raises(ValueError):
        p.produce_chunk([], len(PROMPT), None)


def test_position_must_be_the_cursor(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    out = _logits(model)
    with pytest.raises(PositionMismatch, match="position 1.*holds 0"):
        p.produce(7, 1, out)
    p.produce(7, 0, out)
    for bad in (0, 2):
        with pytest.raises(PositionMismatch):
            p.produce_prefill(7, bad, out)
        with pytest.raises(PositionMismatch):
            p.produce_chunk([7, 8], bad, None)
    assert p.mirror == (7,) and p.cache.offset == 1  # failed calls changed nothing


def test_logits_out_is_validated(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    with pytest.raises(ValueError, match="float32"):
        p.produce(1, 0, np.zeros(model.config.vocab_size, np.float64))
    with pytest.raises(ValueError, match="shape"):
        p.produce(1, 0, np.zeros(3, np.float32))
    assert p.mirror == ()


def test_try_reuse_prefix(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    p.produce_chunk(PROMPT, 0, None)
    assert p.try_reuse_prefix([]) == 0
    p.reset()
    p.produce_chunk(PROMPT, 0, None)
    new_prompt = PROMPT[:5] + [1, 2, 3]
    assert p.try_reuse_prefix(new_prompt) == 5
    assert p.mirror == tuple(PROMPT[:5]) and p.cache.offset == 5
    out = _logits(model)
    p.produce_chunk(new_prompt[5:], 5, out)
    np.testing.assert_allclose(out, _fresh(model, new_prompt), rtol=1e-4, atol=1e-4)

    # a prompt that extends the history reuses all of it
    longer = new_prompt + [4, 5]
    assert p.try_reuse_prefix(longer) == len(new_prompt)
    # an identical prompt: the last token is fed again for fresh logits (capped at len - 1)
    assert p.try_reuse_prefix(new_prompt) == len(new_prompt) - 1
    assert p.cache.offset == len(new_prompt) - 1
    p.produce(new_prompt[-1], len(new_prompt) - 1, out)
    np.testing.assert_allclose(out, _fresh(model, new_prompt), rtol=1e-4, atol=1e-4)
    # nothing in common
    assert p.try_reuse_prefix([299, 298]) == 0 and p.mirror == () and p.cache.offset == 0


def test_long_prefix_match_crosses_the_chunked_comparison(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    history = [(i * 7) % 300 for i in range(600)]
    p.produce_chunk(history, 0, None)
    prompt = history[:513] + [1, 2]
    assert p.try_reuse_prefix(prompt) == 513
    assert p.try_reuse_prefix(np.array(prompt[:300])) == 299  # numpy ids work too


def test_reset_and_release(model: LlamaModel) -> None:
    p = LlamaProducer(model)
    out = _logits(model)
    p.produce_chunk(PROMPT, 0, None)
    allocated = p.kv_nbytes
    assert allocated > 0
    p.reset()
    assert p.mirror == () and p.cache.offset == 0 and p.kv_nbytes == allocated  # memory kept
    p.produce_chunk(PROMPT, 0, out)
    np.testing.assert_allclose(out, _fresh(model, PROMPT), rtol=1e-4, atol=1e-4)
    p.release()
    assert p.mirror == () and p.kv_nbytes == 0
    p.produce(PROMPT[0], 0, out)
    assert p.mirror == (PROMPT[0],)


def test_given_cache_is_used(model: LlamaModel) -> None:
    cache = model.new_cache(step=32)
    p = LlamaProducer(model, cache)
    p.produce_chunk(PROMPT, 0, None)
    assert p.cache is cache and cache.capacity == 32
    with pytest.raises(ValueError, match="empty"):
        LlamaProducer(model, cache)


def test_two_producers_share_a_model_without_interference(model: LlamaModel) -> None:
    a, b = LlamaProducer(model), LlamaProducer(model)
    out_a, out_b = _logits(model), _logits(model)
    a.produce_chunk(PROMPT[:4], 0, None)
    b.produce_chunk([9, 9, 9], 0, None)
    for i, tok in enumerate(PROMPT[4:]):
        a.produce(tok, 4 + i, out_a)
        b.produce(tok, 3 + i, out_b)
    np.testing.assert_allclose(out_a, _fresh(model, PROMPT), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out_b, _fresh(model, [9, 9, 9] + PROMPT[4:]), rtol=1e-4, atol=1e-4)
