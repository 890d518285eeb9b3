"""Batched decode steps and multi-row logits on tiny random GGUFs of every family: the KV arena's
rows, `forward_batch` (one session run for streams at different positions, bit-identical to
their one-token steps) and `forward_rows` (every row's logits, for a draft's verification)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_gguf import FAMILY_VARIANTS, write_tiny_gguf

from turbospark_app.model.kv_cache import ArenaKVCache, KVArena, KVCacheFull
from turbospark_app.model.reference.forward import LlamaModel

PROMPTS = [[5, 17, 299, 0, 42, 42, 7], [150, 3], [88, 201, 64, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8]]
VARIANTS = {"llama": {}, "qwen2": {"arch": "qwen2", "n_kv": 4}, **FAMILY_VARIANTS}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "tiny.gguf"
    write_tiny_gguf(path, seed=len(request.param), **VARIANTS[request.param])
    compact = LlamaModel.from_gguf(path, folder / "cache", weights="compact", kernels="int8")
    f32 = LlamaModel.from_gguf(path, folder / "cache", weights="f32")
    return compact, f32


def _plain(model: LlamaModel, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding one token at a time on a private cache: (tokens fed, logits after each)."""
    cache = model.new_cache()
    model.forward(prompt[:-1], cache, False)
    token, fed, out = prompt[-1], [], []
    for _ in range(steps):
        logits = model.forward((token,), cache).copy()
        fed.append(token)
        out.append(logits)
        token = int(logits.argmax())
    return fed, out


def test_batched_steps_equal_one_stream_steps_bit_for_bit(models) -> None:
    compact, _ = models
    plain = [_plain(compact, p, 6) for p in PROMPTS]
    arena = compact.new_kv_arena()
    caches = [arena.new_cache() for _ in PROMPTS]
    for p, cache in zip(PROMPTS, caches):  # prompts of different lengths: rows at other positions
        compact.forward(p[:-1], cache, False)
    assert [c.row for c in caches] == [0, 1, 2]
    logits = np.empty((3, compact.vocab_size), np.float32)
    for step in range(6):
        compact.forward_batch([fed[step] for fed, _ in plain], caches, logits)
        for b, (_, out) in enumerate(plain):
            np.testing.assert_array_equal(logits[b], out[step])
    assert [c.offset for c in caches] == [len(p) - 1 + 6 for p in PROMPTS]


def test_batch_of_rows_that_are_not_adjacent_and_private_caches(models) -> None:
    compact, _ = models
    plain = [_plain(compact, p, 3) for p in PROMPTS]
    arena = compact.new_kv_arena()
    caches = [arena.new_cache(), arena.new_cache(), compact.new_cache()]
    idle = arena.new_cache()
    compact.forward(PROMPTS[0][:-1], caches[0], False)
    compact.forward([1, 2, 3], idle, False)  # row 1: not in the batch, must stay untouched
    compact.forward(PROMPTS[1][:-1], caches[1], False)
    compact.forward(PROMPTS[2][:-1], caches[2], False)
    assert (caches[0].row, idle.row, caches[1].row) == (0, 1, 2)
    kept = [k[:, : idle.offset].copy() for k in idle.k_layers]
    order = [2, 0, 1]  # any order in, logits rows in that order out
    logits = np.empty((3, compact.vocab_size), np.float32)
    for step in range(3):
        compact.forward_batch([plain[b][0][step] for b in order], [caches[b] for b in order], logits)
        for i, b in enumerate(order):
            np.testing.assert_array_equal(logits[i], plain[b][1][step])
    for k, before in zip(idle.k_layers, kept):
        np.testing.assert_array_equal(k[:, : idle.offset], before)
    # the batch's rows were moved next to each other (the idle row out of the way): one call
    assert sorted((caches[0].row, caches[1].row)) == [0, 1] and idle.row == 2


@pytest.mark.parametrize("engine", ["compact", "f32"])
def test_rows_give_every_positions_logits(models, engine: str) -> None:
    model = models[0] if engine == "compact" else models[1]
    fed, out = _plain(model, PROMPTS[0], 5)
    cache = model.new_cache()
    model.forward(PROMPTS[0][:-1], cache, False)
    rows = np.empty((5, model.vocab_size), np.float32)
    model.forward_rows(fed, cache, rows)
    assert cache.offset == len(PROMPTS[0]) - 1 + 5
    scale = np.abs(np.array(out)).max()
    # the f32 engine steps token by token: identical; one compact pass differs only in the
    # attention's summation order, which int8 activations can round either way
    tol = 0.0 if engine == "f32" else 0.05 * scale
    for t in range(5):
        np.testing.assert_allclose(rows[t], out[t], atol=tol, rtol=0)
        assert rows[t].dtype == np.float32


def test_arena_rows_grow_copy_and_free() -> None:
    arena = KVArena(n_layers=2, n_kv_heads=1, head_dim=4, max_context=40, step=8)
    a, b = arena.new_cache(), arena.new_cache()
    assert isinstance(a, ArenaKVCache) and a.capacity == 0 and arena.nbytes == 0
    a.reserve(5)
    for layer in a.k_layers:
        layer[:, :5] = np.arange(20, dtype=np.float32).reshape(1, 5, 4)
    a.advance(5)
    generation = a.generation
    b.reserve(3)  # a second row: a's positions are copied into the new layout
    assert (a.row, b.row, arena.n_rows, arena.capacity) == (0, 1, 2, 8)
    assert a.generation > generation
    np.testing.assert_array_equal(a.k_layers[1][0, :5].ravel(), np.arange(20))
    a.reserve(20)  # grows every row
    assert arena.capacity >= 20 and b.capacity == arena.capacity
    np.testing.assert_array_equal(a.keys(0)[0].ravel(), np.arange(20))
    assert a.nbytes + b.nbytes == arena.nbytes
    with pytest.raises(KVCacheFull):
        a.reserve(41)
    for layer in b.k_layers:
        layer[:, :3] = 7.0
    b.advance(3)
    a.release()  # b moves up to row 0 with its positions; the arena holds one row, sized for b
    assert a.row is None and a.capacity == 0 and (b.row, arena.n_rows) == (0, 1)
    assert arena.capacity == 8 and (b.keys(1) == 7.0).all()
    c = arena.new_cache()
    c.reserve(1)
    assert c.row == 1 and arena.n_rows == 2
    b.release()
    c.release()
    assert arena.n_rows == 0 and arena.nbytes == 0
