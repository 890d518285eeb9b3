"""Sampling's passes over the whole vocabulary without a vocabulary-sized sort, index array or
temporary per step (a 128k vocabulary: 0.5 MB of logits, re-read from cold caches each step).

- `top_ids`: the ids of the k highest logits. A strided sample of the row gives a value that at
  least k logits reach (its own k-th highest: the sample's top k are row logits), one compare
  pass finds them, and only those few are partitioned: no argpartition of the whole row (an
  int64 index array of the vocabulary's size, 1 MB at 128k).
- `nucleus`: the smallest highest-logit prefix whose mass reaches top-p, by a histogram of the
  mass over logit values: every token of the bins above the one where the mass crosses top-p is
  in, and only that bin is sorted (a flat distribution's nucleus is most of the vocabulary: the
  sorts had grown to the whole row); only the tokens within NEAR logits of the top are binned
  when they hold the mass asked for (a language model's usually do).
- `draw_all`: a draw over every token at a temperature, weights computed into one scratch
  buffer and found by block sums, then a cumulative sum of one block only.
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32
SAMPLE_MIN = 4096  # the strided sample holds at least this many logits (and 8 k): fewer to partition after
MIN_STRIDE = 4  # below this the sample saves nothing: one argpartition of the row
BLOCK = 4096  # tokens a block of the draw
BINS = 1024  # the nucleus histogram's bins below the highest logit
SPAN = 48.0  # logits the bins cover below the highest (lower ones share the last bin)
NEAR = 12.0  # logits below the highest a nucleus is first looked for among (exp(-12): 6e-6)


class Scratch:
    """Two float32 rows of the vocabulary's size, reused across one sampler's steps (a sampler
    runs on one thread at a time: the engine thread's)."""

    def __init__(self) -> None:
        self._rows = (np.empty(0, _F32), np.empty(0, _F32))

    def get(self, n: int, which: int = 0) -> np.ndarray:
        if self._rows[which].shape[0] != n:
            self._rows = tuple(np.empty(n, _F32) if r.shape[0] != n else r  # type: ignore[assignment]
                               for r in self._rows)
        return self._rows[which]


def top_ids(x: np.ndarray, k: int) -> np.ndarray:
    """int64 ids of the `k` highest of `x` (1-D float32, no NaN; 0 < k < x.size), unordered;
    ties at the k-th value are broken arbitrarily, as argpartition's are."""
    n = x.shape[0]
    stride = n // max(SAMPLE_MIN, 8 * k)
    if stride < MIN_STRIDE:
        return np.argpartition(x, n - k)[n - k:].astype(np.int64, copy=False)
    sample = x[::stride]
    floor = np.partition(sample, sample.shape[0] - k)[sample.shape[0] - k]
    ids = np.flatnonzero(x >= floor)  # >= k of them: the sample's own top k
    if ids.shape[0] > k:
        ids = ids[np.argpartition(x[ids], ids.shape[0] - k)[ids.shape[0] - k:]]
    return ids.astype(np.int64, copy=False)


def exp_shifted(x: np.ndarray, top: np.floating, out: np.ndarray,
                scale: np.floating | None = None) -> np.ndarray:
    """`exp((x - top) * scale)` into `out` (no temporaries)."""
    np.subtract(x, top, out=out)
    if scale is not None:
        np.multiply(out, scale, out=out)
    return np.exp(out, out=out)


def draw_all(x: np.ndarray, top: np.floating, scale: np.floating, rng: np.random.Generator,
             scratch: Scratch) -> int:
    """An id drawn with weight exp((x - top) * scale) over the whole row (-inf weighs 0 and is
    never drawn)."""
    w = exp_shifted(x, top, scratch.get(x.shape[0]), scale)
    starts = np.arange(0, w.shape[0], BLOCK)
    sums = np.cumsum(np.add.reduceat(w, starts), dtype=np.float64)
    target = rng.random() * float(sums[-1])
    j = min(int(np.searchsorted(sums, target, side="right")), starts.shape[0] - 1)
    while j > 0 and sums[j] == sums[j - 1]:  # (past the end by rounding: an empty block)
        j -= 1
    base = float(sums[j - 1]) if j else 0.0
    block = w[starts[j]: starts[j] + BLOCK]
    # side="right" never lands on a zero-width (zero-weight) interval
    i = int(np.searchsorted(np.cumsum(block, dtype=np.float64), target - base, side="right"))
    if i >= block.shape[0]:  # rounding between the two sums: the block's last token that weighs
        i = int(np.flatnonzero(block)[-1])
    return int(starts[j]) + i


def nucleus(x: np.ndarray, top: np.floating, top_p: float, scratch: Scratch) -> np.ndarray:
    """The ids of the smallest prefix of the row sorted by logit (highest first) whose share of
    the whole row's mass exp(x - top) reaches `top_p` (the cut: searchsorted "left" of the
    cumulative mass, + 1), in no particular order. -inf may be among them at a cut of nearly
    the whole row: the caller drops what is not finite."""
    n = x.shape[0]
    w = exp_shifted(x, top, scratch.get(n, 0))
    need = top_p * float(w.sum(dtype=np.float64))
    # A language model's mass sits within a few logits of the top: when the tokens there hold
    # `need`, the prefix ends among them (they are a prefix of the order), so only they are binned.
    spare = scratch.get(n, 1)
    near = np.flatnonzero(x >= top - _F32(NEAR))
    if near.shape[0] < n // 4 and float(w[near].sum(dtype=np.float64)) >= need:
        return near[_cut(x[near], w[near], top, need, spare[: near.shape[0]])]
    return _cut(x, w, top, need, spare)


def _cut(x: np.ndarray, w: np.ndarray, top: np.floating, need: float, spare: np.ndarray) -> np.ndarray:
    """Positions in `x` of its highest-first prefix whose weights `w` sum to `need` (`spare`: a
    float32 row of x's length to work in)."""
    # Bin b holds logits in (top - (b+1) * width, top - b * width]; the last bin everything
    # lower (-inf too), so every token is in a bin whatever the spread.
    dist = np.subtract(top, x, out=spare)
    np.multiply(dist, _F32(BINS / SPAN), out=dist)
    np.minimum(dist, _F32(BINS - 1), out=dist)
    bins = dist.astype(np.intp)
    cum = np.cumsum(np.bincount(bins, weights=w, minlength=BINS))
    c = min(int(np.searchsorted(cum, need, side="left")), BINS - 1)
    inside = np.flatnonzero(bins < c)
    edge = np.flatnonzero(bins == c)
    edge = edge[np.argsort(-x[edge], kind="stable")]
    before = float(cum[c - 1]) if c else 0.0
    mass = before + np.cumsum(w[edge], dtype=np.float64)
    cut = int(np.searchsorted(mass, need, side="left")) + 1
    return np.concatenate((inside, edge[:cut])).astype(np.int64, copy=False)
