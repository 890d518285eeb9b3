"""Sampling's whole-vocabulary passes without vocabulary-sized sorts (`engine.full_vocab`) choose
exactly what the obvious versions choose: the k highest, the top-p nucleus, a temperature draw
that follows its distribution and never draws a token of weight 0."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbospark_app.engine import full_vocab as fv
from turbospark_app.engine.config import Shaping
from turbospark_app.engine.selection import candidates, make_sampler

F32 = np.float32


def rows(n: int, seed: int, spread: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * spread).astype(F32)
    hot = rng.choice(n, 8, replace=False)
    x[hot] += F32(rng.uniform(3, 12))
    return x


@settings(max_examples=60, deadline=None)
@given(st.integers(20_000, 140_000), st.integers(1, 400), st.integers(0, 2**31), st.floats(0.3, 4))
def test_top_ids_are_the_k_highest(n: int, k: int, seed: int, spread: float) -> None:
    x = rows(n, seed, spread)
    got = fv.top_ids(x, k)
    assert got.dtype == np.int64 and got.shape == (k,) and len(set(got.tolist())) == k
    kth = np.sort(x)[n - k]
    assert x[got].min() == kth  # the same values as a full sort's (ties: any of them)


def test_top_ids_with_many_ties_and_minus_inf() -> None:
    x = np.full(50_000, -np.inf, F32)
    x[::7] = 1.0
    x[123] = 5.0
    got = fv.top_ids(x, 30)
    assert 123 in got and set(x[got].tolist()) == {5.0, 1.0}


def reference_nucleus(x: np.ndarray, top_p: float) -> set[int]:
    order = np.argsort(-x.astype(np.float64), kind="stable")
    w = np.exp(x.astype(np.float64)[order] - float(x.max()))
    mass = np.cumsum(w) / w.sum()
    cut = int(np.searchsorted(mass, top_p, side="left")) + 1
    return {int(i) for i in order[:cut] if np.isfinite(x[i])}


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 60_000), st.integers(0, 2**31), st.floats(0.05, 6), st.floats(0.05, 0.999))
def test_the_nucleus_is_the_sorted_prefix(n: int, seed: int, spread: float, top_p: float) -> None:
    x = rows(n, seed, spread) if n > 8 else np.random.default_rng(seed).standard_normal(n).astype(F32)
    got = {int(i) for i in fv.nucleus(x, x.max(), top_p, fv.Scratch()) if np.isfinite(x[i])}
    want = reference_nucleus(x, top_p)
    # float64 here, float32 weights there: a token sitting exactly at the cut may differ
    assert len(got ^ want) <= 1, (len(got), len(want))


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.999])
@pytest.mark.parametrize("seed", range(4))
def test_a_peaked_rows_nucleus_is_found_among_the_tokens_near_the_top(top_p: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(128_256) * 3).astype(F32)
    x[rng.choice(x.size, 50, replace=False)] += F32(30) + rng.uniform(0, 8, 50).astype(F32)
    assert np.count_nonzero(x >= x.max() - F32(fv.NEAR)) < x.size // 4  # (the near path)
    got = {int(i) for i in fv.nucleus(x, x.max(), top_p, fv.Scratch())}
    assert len(got ^ reference_nucleus(x, top_p)) <= 1


def test_the_nucleus_of_a_flat_row_and_of_minus_inf() -> None:
    x = np.zeros(10_000, F32)
    assert len(fv.nucleus(x, x.max(), 0.5, fv.Scratch())) == 5000
    x[:9_000] = -np.inf
    got = {int(i) for i in fv.nucleus(x, x.max(), 0.999, fv.Scratch()) if np.isfinite(x[i])}
    assert got == reference_nucleus(x, 0.999) and min(got) >= 9_000


def test_the_whole_row_draw_follows_the_distribution_and_skips_zero_weight() -> None:
    n = 3 * fv.BLOCK + 17  # several blocks and a short last one
    x = np.full(n, -np.inf, F32)
    picks = {5: 0.0, fv.BLOCK + 3: np.log(2.0), 2 * fv.BLOCK + 9: np.log(3.0), n - 1: np.log(4.0)}
    for i, v in picks.items():
        x[i] = v
    rng = np.random.default_rng(0)
    sc = fv.Scratch()
    draws = [fv.draw_all(x, x.max(), F32(1.0), rng, sc) for _ in range(20_000)]
    assert set(draws) == set(picks)
    freq = np.array([draws.count(i) for i in picks]) / len(draws)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.015)


@pytest.mark.parametrize("shaping", [
    Shaping(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    Shaping(temperature=1.0, top_p=0.9),
    Shaping(temperature=1.0, top_p=0.9, min_p=0.01),
    Shaping(temperature=0.7, top_k=1000),
])
def test_candidates_on_a_128k_row_match_a_full_sort(shaping: Shaping) -> None:
    x = rows(128_256, 3, 2.0)
    ids, probs = candidates(x, shaping)
    order = np.argsort(-x.astype(np.float64), kind="stable")
    if shaping.top_k:
        order = order[: shaping.top_k]
    p = np.exp(x.astype(np.float64)[order] - float(x.max()))
    p /= p.sum()
    keep = np.ones(order.size, bool)
    if shaping.top_p < 1:
        keep[int(np.searchsorted(np.cumsum(p), shaping.top_p)) + 1:] = False
    if shaping.min_p > 0:
        keep &= p >= shaping.min_p * p[0]
    want = set(order[keep].tolist())
    assert len(set(ids.tolist()) ^ want) <= 1
    assert abs(float(probs.sum()) - 1) < 1e-4


def test_a_seeded_sampler_on_a_large_row_repeats_itself() -> None:
    x = rows(128_256, 9, 1.5)
    for shaping in (Shaping(temperature=1.0, seed=4), Shaping(temperature=0.9, top_p=0.9, seed=4)):
        a, b = make_sampler(shaping), make_sampler(shaping)
        run = [a(x, []) for _ in range(30)]
        assert run == [b(x, []) for _ in range(30)] and len(set(run)) > 3
