"""Choosing the next token from the logits (reference: `selection::select`).

Order, as llama.cpp's default chain: logit bias -> penalties -> top-k -> top-p -> min-p ->
temperature -> draw. The filters read the un-tempered distribution, so temperature changes how the
survivors are weighted but never which tokens survive. Temperature 0 is argmax (after
penalties). Everything on the hot path stays float32: numpy 2 promotes
`float32_array * np.float64` to float64, so scalars are wrapped in `np.float32`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .config import Shaping
from .constraint import Constraint, ConstraintSpec
from .errors import SelectionError
from .full_vocab import Scratch, draw_all, nucleus, top_ids

Sampler = Callable[[np.ndarray, Sequence[int]], int]
"""`sampler(logits, history) -> token id`; built once per request by `make_sampler`."""

_F32 = np.float32
# First window the top-p search sorts; grown x8 until it holds the nucleus. Sorting a
# 49k vocabulary each token would cost more than the rest of selection put together.
_TOP_P_FIRST_WINDOW = 64


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_finite(value: object) -> bool:
    try:
        return not isinstance(value, bool) and math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def validate_shaping(shaping: Shaping) -> None:
    """Raise SelectionError naming every invalid field of `shaping` (all of them at once)."""
    s = shaping
    problems: list[str] = []
    if not _is_finite(s.temperature) or s.temperature < 0:
        problems.append(f"temperature must be a finite number >= 0 (got {s.temperature!r})")
    if not _is_int(s.top_k) or s.top_k < 0:
        problems.append(f"top_k must be an integer >= 0, 0 = off (got {s.top_k!r})")
    if not _is_finite(s.top_p) or not 0.0 < s.top_p <= 1.0:
        problems.append(f"top_p must be in (0, 1], 1 = off (got {s.top_p!r})")
    if not _is_finite(s.min_p) or not 0.0 <= s.min_p < 1.0:
        problems.append(f"min_p must be in [0, 1), 0 = off (got {s.min_p!r})")
    if not _is_finite(s.repetition_penalty) or s.repetition_penalty <= 0:
        problems.append(
            f"repetition_penalty must be a finite number > 0, 1 = off "
            f"(got {s.repetition_penalty!r})"
        )
    if not _is_finite(s.presence_penalty):
        problems.append(f"presence_penalty must be finite (got {s.presence_penalty!r})")
    if not _is_finite(s.frequency_penalty):
        problems.append(f"frequency_penalty must be finite (got {s.frequency_penalty!r})")
    if not _is_int(s.penalty_last_n) or s.penalty_last_n < 0:
        problems.append(f"penalty_last_n must be an integer >= 0 (got {s.penalty_last_n!r})")
    if s.seed is not None and (not _is_int(s.seed) or s.seed < 0):
        problems.append(f"seed must be None or an integer >= 0 (got {s.seed!r})")
    bad_bias = next((e for e in s.logit_bias if not (isinstance(e, tuple) and len(e) == 2 and _is_int(e[0])
                                                     and e[0] >= 0 and _is_finite(e[1]))), None)
    if bad_bias is not None:
        problems.append(f"logit_bias takes (token id >= 0, finite bias) pairs (got {bad_bias!r})")
    if problems:
        raise SelectionError("invalid sampling settings: " + "; ".join(problems))


def checked_logits(logits: np.ndarray) -> np.ndarray:
    """`logits` as a 1-D float32 array (no copy when it already is one).

    Raises SelectionError on NaN, +inf, an empty vector, or every logit at -inf.
    """
    x = np.asarray(logits)
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    if x.ndim != 1 or x.size == 0:
        raise SelectionError(f"logits must be a non-empty vector (got shape {x.shape})")
    _check_top(x.max())  # one pass: max propagates NaN
    return x


def _check_top(top: np.floating) -> None:
    """SelectionError when the highest logit (NaN if any is) leaves no token to choose."""
    if np.isnan(top):
        raise SelectionError("the model produced NaN logits: cannot choose a token")
    if top == np.inf:
        raise SelectionError("the model produced +inf logits: cannot choose a token")
    if top == -np.inf:
        raise SelectionError("every logit is -inf: no token can be chosen")


def penalties_active(shaping: Shaping) -> bool:
    """True when any penalty would change a logit."""
    return shaping.penalty_last_n > 0 and (
        shaping.repetition_penalty != 1.0
        or shaping.presence_penalty != 0.0
        or shaping.frequency_penalty != 0.0
    )


def apply_penalties(logits: np.ndarray, shaping: Shaping, history: Sequence[int]) -> np.ndarray:
    """Penalize the ids among the last `penalty_last_n` of `history`; never modifies `logits`.

    As llama.cpp: repetition divides a positive logit and multiplies a negative one; then
    `frequency * count + presence` is subtracted. Returns `logits` itself when nothing
    applies, else a float32 copy.
    """
    if not penalties_active(shaping) or len(history) == 0:
        return logits
    window = np.asarray(history[-shaping.penalty_last_n :], dtype=np.int64)
    window = window[(window >= 0) & (window < logits.shape[0])]
    if window.size == 0:
        return logits
    ids, counts = np.unique(window, return_counts=True)
    out = np.array(logits, dtype=np.float32, copy=True)
    vals = out[ids]
    rep = _F32(shaping.repetition_penalty)
    if rep != 1:
        vals = np.where(vals > 0, vals / rep, vals * rep)
    if shaping.frequency_penalty != 0.0:
        vals = vals - counts.astype(np.float32) * _F32(shaping.frequency_penalty)
    if shaping.presence_penalty != 0.0:
        vals = vals - _F32(shaping.presence_penalty)
    out[ids] = vals
    return out


def bias_of(shaping: Shaping) -> Callable[[np.ndarray], np.ndarray]:
    """`logits -> logits + the shaping's logit_bias` (a float32 copy; the input itself when
    there is none). Built once per request; SelectionError for an id past the vocabulary."""
    if not shaping.logit_bias:
        return lambda logits: logits
    ids = np.array([t for t, _ in shaping.logit_bias], np.int64)
    biases = np.array([b for _, b in shaping.logit_bias], np.float32)
    highest = int(ids.max())

    def apply(logits: np.ndarray) -> np.ndarray:
        if highest >= logits.shape[0]:
            raise SelectionError(f"logit_bias names token {highest}, past the vocabulary "
                                 f"(0..{logits.shape[0] - 1})")
        out = np.array(logits, dtype=np.float32, copy=True)
        np.add.at(out, ids, biases)  # a repeated id adds up
        return out

    return apply


def _sorted_desc(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return ids[np.argsort(-x[ids])]


def _inv_temperature(temperature: float) -> np.float32:
    # Floored at float32's tiny so an astronomically high temperature never turns
    # (-inf * 0) into NaN: it still means "near uniform".
    return max(_F32(1.0 / temperature), np.finfo(np.float32).tiny)


def _filters_active(shaping: Shaping, n: int) -> bool:
    return 0 < shaping.top_k < n or shaping.top_p < 1.0 or shaping.min_p > 0.0


def _nucleus(x: np.ndarray, pool: np.ndarray, keep: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest highest-logit prefix of `keep` whose mass (normalized over `pool`) >= top_p.

    `keep` is a subset of `pool` closed upward in logit (min-p survivors), so cutting
    `keep` equals cutting `pool` and then intersecting: the two filters commute.
    """
    top = x[pool].max()
    total = float(np.exp(x[pool] - top).sum(dtype=np.float32))
    window = _TOP_P_FIRST_WINDOW
    while True:
        if window * 4 >= keep.size:  # close to everything: one full sort is cheaper
            head = _sorted_desc(x, keep)
        else:
            part = np.argpartition(x[keep], keep.size - window)[keep.size - window :]
            head = _sorted_desc(x, keep[part])
        mass = np.cumsum(np.exp(x[head] - top)) / _F32(total)
        if mass[-1] >= top_p or head.size == keep.size:
            cut = int(np.searchsorted(mass, _F32(top_p), side="left")) + 1
            return head[: min(cut, head.size)]
        window *= 8


def candidates(logits: np.ndarray, shaping: Shaping, scratch: Scratch | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The ids that survive top-k, top-p and min-p, and their probabilities at the temperature.

    `logits` must already be checked (`checked_logits`) and penalized. Ids are int64,
    probabilities float32 summing to 1; -inf logits never survive. Temperature 0 gives the
    argmax alone. No pass copies or sorts the whole vocabulary (`full_vocab`); `scratch`
    (reused by a sampler across steps) holds the rows' weights.
    """
    x = logits
    n = x.shape[0]
    if shaping.temperature == 0:
        return np.array([int(np.argmax(x))], dtype=np.int64), np.ones(1, dtype=np.float32)
    if 0 < shaping.top_k < n:  # a small pool: the filters work on its ids
        pool = top_ids(x, shaping.top_k)
        keep = pool
        if shaping.min_p > 0.0:
            # p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p): no softmax needed.
            floor = x[pool].max() + _F32(math.log(shaping.min_p))
            keep = pool[x[pool] >= floor]
        if shaping.top_p < 1.0:
            keep = _nucleus(x, pool, keep, shaping.top_p)
    else:  # the whole row: one histogram for top-p, one compare pass for min-p
        top = x.max()
        keep = None
        if shaping.top_p < 1.0:
            keep = nucleus(x, top, shaping.top_p, scratch or Scratch())
        if shaping.min_p > 0.0:  # the min-p survivors are closed upward: the cuts commute
            floor = top + _F32(math.log(shaping.min_p))
            keep = np.flatnonzero(x >= floor) if keep is None else keep[x[keep] >= floor]
        if keep is None:  # no filter at all (the sampler draws over the row without this)
            keep = np.arange(n)
    keep = keep[np.isfinite(x[keep])]
    vals = x[keep]
    weights = np.exp((vals - vals.max()) * _inv_temperature(shaping.temperature))
    return keep.astype(np.int64, copy=False), weights / weights.sum(dtype=np.float32)


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn in proportion to `weights` (not necessarily normalized)."""
    if weights.size == 1:
        return 0
    cdf = np.cumsum(weights)
    # side="right" never lands on a zero-width (zero-weight) interval.
    i = int(np.searchsorted(cdf, rng.random() * float(cdf[-1]), side="right"))
    return min(i, weights.size - 1)


def _argmax_checked(logits: np.ndarray) -> int:
    """`argmax(checked_logits(logits))` in ONE pass over a float32 vector: argmax propagates NaN
    as max does (the first NaN's index), so the value it lands on tells the same errors."""
    x = np.asarray(logits)
    if x.dtype != np.float32 or x.ndim != 1 or x.size == 0:
        return int(np.argmax(checked_logits(x)))  # (the same checks, on the converted vector)
    i = int(np.argmax(x))
    _check_top(x[i])
    return i


def _build(shaping: Shaping, rng: np.random.Generator) -> Sampler:
    # A temperature so small that 1/T overflows float32 is greedy too (else 0 * inf = NaN).
    greedy = shaping.temperature == 0 or 1.0 / shaping.temperature > float(np.finfo(np.float32).max)
    bias = bias_of(shaping)
    if greedy and not shaping.logit_bias and not penalties_active(shaping):
        return lambda logits, history: _argmax_checked(logits)  # nothing changes a logit

    scratch = Scratch()

    def sample(logits: np.ndarray, history: Sequence[int]) -> int:
        x = apply_penalties(bias(checked_logits(logits)), shaping, history)
        if greedy:
            return int(np.argmax(x))
        if not _filters_active(shaping, x.shape[0]):
            # Whole vocabulary: skip the id gather (-inf weighs exactly 0 and is never drawn).
            return draw_all(x, x.max(), _inv_temperature(shaping.temperature), rng, scratch)
        ids, probs = candidates(x, shaping, scratch)
        return int(ids[_draw(probs, rng)])

    return sample


def make_sampler(shaping: Shaping) -> Sampler:
    """Validate `shaping` and return `sampler(logits, history) -> token id` for one request.

    Raises SelectionError at once on invalid settings. The random generator is created here,
    once, so a seeded request is reproducible token by token; seed None draws fresh entropy.
    The sampler raises SelectionError on NaN / +inf logits or when every logit is -inf.
    """
    validate_shaping(shaping)
    return _build(shaping, np.random.default_rng(shaping.seed))


def select(
    logits: np.ndarray, shaping: Shaping, history: Sequence[int], generated: int
) -> int:
    """One-shot selection (the reference's stateless entry point).

    Builds a sampler per call; a seeded call is seeded with (seed, generated) so repeated
    calls are reproducible yet differ from step to step. Loops should use `make_sampler`.
    """
    validate_shaping(shaping)
    seed = None if shaping.seed is None else [shaping.seed, generated]
    return _build(shaping, np.random.default_rng(seed))(logits, history)


# --- constrained decoding (the protocol: `engine.constraint`) ----------------------------------


@dataclass
class ConstrainedSampler:
    """A sampler whose logits are masked by `constraint` first and which advances it with the
    token it returns (every token the loop samples is committed: `decode`)."""

    inner: Sampler
    constraint: Constraint

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> int:
        token = self.inner(self.constraint.mask(logits), history)
        self.constraint.accept(token)
        return token


def constrained(sampler: Sampler, spec: ConstraintSpec | None) -> Sampler:
    """`sampler` itself without a spec, else a `ConstrainedSampler` over a fresh run of it."""
    return sampler if spec is None else ConstrainedSampler(sampler, spec.start())


def draft_within(sampler: Sampler, draft: Sequence[int]) -> tuple[int, ...]:
    """`draft` cut to what the sampler's grammar accepts after the token being fed now (which it
    has already accepted); the whole draft for an unconstrained sampler."""
    if isinstance(sampler, ConstrainedSampler) and draft:
        return tuple(draft[: sampler.constraint.valid_prefix(draft)])
    return tuple(draft)
