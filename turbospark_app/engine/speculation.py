"""Prompt-lookup speculation (issue #20 part 2): draft tokens by n-gram matching, verify them in
one forward pass, keep what the model itself would have chosen.

Three pieces, each per stream (one `LookupDrafter` per run):

- `NgramIndex`: the token sequence (prompt + reply so far) and, for every n-gram size, where
  each n-gram last occurred with a known continuation. Drafting is a dictionary look-up of the
  last n tokens (longest n first), so it costs nothing on a miss and O(1) per token to maintain.
- `AcceptancePolicy`: how long a draft to verify, or none. Drafts only on a match; the length
  starts at `draft_start` (7), doubles after a fully accepted run up to `draft_max` (31) and drops
  back after a miss; and a draft is verified only when its EXPECTED gain pays for the wider pass
  (i.i.d. acceptance `a` estimated from this stream, pass cost `1 + c(T) * (T - 1)` with the
  row cost `c` measured per pass size from the backend's timed steps and passes). When
  acceptance stops paying the stream decodes plainly, probing again after `probe_every` skipped
  matches (with a draft no longer than a pass of about two steps allows) so a later echo-heavy
  stretch is found; a probe that keeps nothing doubles the wait before the next (up to
  `PROBE_BACKOFF` times), so an open reply pays for few probes.
- `LookupDrafter`: the two together plus the stream's counters (drafted / accepted / passes).

The decode loop (`raw_completion.decode`) asks `propose()` before each forward pass and reports
back with `settle()`; it never speculates while `crowded()` says other streams are decoding
(a batched step serves them better: research/throughput.md, PR #6828).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

def _never() -> bool:
    return False


# Pass sizes whose row cost is learnt apart: [2], [3], [4, 5], [6, 8], [9, 16], [17, ...). On this
# CPU a row costs 0.76 of a step in a pass of 2-3 rows and 0.44 in one of 8-32 (the default model:
# matmuls of a few rows are compute bound, wider ones reuse what is in cache), so one figure for
# every size either forbids the long drafts that pay or allows the short ones that lose.
_SIZE_CLASSES = (2, 3, 4, 6, 9, 17)
_CLASS_OF = tuple(max(c for c in _SIZE_CLASSES if c <= max(2, r)) for r in range(_SIZE_CLASSES[-1]))


def size_class(rows: int) -> int:
    """The smallest row count of the class a pass of `rows` (>= 2) rows is learnt in (a table:
    the draft-length choice asks it for every length it weighs, once per decode step)."""
    return _CLASS_OF[rows] if rows < len(_CLASS_OF) else _SIZE_CLASSES[-1]


class VerifyCost:
    """What a verify pass costs on this machine and model, learnt from every stream's timed steps
    and passes (one per backend): a new stream starts from what earlier ones measured instead of a
    prior. On a CPU one more row costs a good part of a step (llama.cpp's matmuls are compute
    bound there), less in a wider pass; on a GPU almost nothing."""

    def __init__(self, row_cost: float = 0.2, alpha: float = 0.15) -> None:
        self.prior = row_cost
        self.row_cost = row_cost  # one more row in a pass, in one-token steps (every size)
        self.by_size: dict[int, float] = {}  # the same per size class, once measured
        self.step_seconds: float | None = None
        self.alpha = alpha
        self.passes = 0

    def extra_row(self, rows: int) -> float:
        """One more row's cost in a pass of `rows` rows: its size class's measure; a class not
        measured yet takes the least of the prior, the all-sizes figure and the nearest smaller
        measured class (taken as a row costing no more in a wider pass), so a wider pass that
        might pay is tried and then known."""
        k = size_class(rows)
        if k in self.by_size:
            return self.by_size[k]
        smaller = [c for c in self.by_size if c < k]
        nearest = self.by_size[max(smaller)] if smaller else self.prior
        return min(self.prior, self.row_cost, nearest)

    def timed_step(self, seconds: float) -> None:
        s = self.step_seconds
        self.step_seconds = seconds if s is None else s + self.alpha * (seconds - s)

    def timed_pass(self, rows: int, seconds: float) -> None:
        if self.step_seconds is None or rows < 2 or self.step_seconds <= 0:
            return
        observed = min(1.0, max(0.02, (seconds / self.step_seconds - 1.0) / (rows - 1)))
        k = size_class(rows)
        known = self.by_size.get(k)
        if known is None:  # a first pass of this size counts half: one slow pass would rule it out
            self.by_size[k] = 0.5 * (self.extra_row(rows) + observed)
        else:
            self.by_size[k] = known + self.alpha * (observed - known)
        self.row_cost += self.alpha * (observed - self.row_cost)
        self.passes += 1


@dataclass(frozen=True)
class LookupSpeculation:
    """Prompt-lookup speculation settings for a run (`decode(..., speculation=...)`).

    `crowded`: True while other streams are decoding — then the run decodes plainly (its steps
    stay batchable). The rest tune the drafter; the defaults follow the research notes.
    """

    ngram_max: int = 3
    ngram_min: int = 2
    draft_start: int = 7
    draft_max: int = 31
    probe_every: int = 16
    crowded: Callable[[], bool] = _never
    cost: VerifyCost | None = None  # shared by the backend's streams (None: this run's own)

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max (got {self.ngram_min}, {self.ngram_max})")
        if not 1 <= self.draft_start <= self.draft_max:
            raise ValueError(f"need 1 <= draft_start <= draft_max (got {self.draft_start}, {self.draft_max})")

    def start(self, history: Sequence[int]) -> "LookupDrafter":
        """A fresh drafter for one stream whose tokens so far are `history`."""
        return LookupDrafter(self, history)


class NgramIndex:
    """The stream's tokens and, per n-gram size, the position after the n-gram's most recent
    occurrence whose continuation is known (so the trailing n-gram never matches itself)."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.tokens: list[int] = []
        self._sizes = range(ngram_max, ngram_min - 1, -1)  # longest first
        self._last: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self._sizes}

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append `tokens`, indexing every n-gram that now has a continuation."""
        seq = self.tokens
        for t in tokens:
            end = len(seq)  # the n-grams ending here get `t` as their continuation
            for n, table in self._last.items():
                if end >= n:
                    table[tuple(seq[end - n:end])] = end
            seq.append(int(t))

    def sync(self, history: Sequence[int]) -> None:
        """Catch up with `history`, a sequence that only ever grows by appending."""
        if len(history) > len(self.tokens):
            self.extend(history[len(self.tokens):])

    def lookup(self, k: int) -> tuple[int, ...]:
        """Up to `k` tokens that followed the latest earlier occurrence of the longest trailing
        n-gram that occurred before; () when none did."""
        seq = self.tokens
        for n in self._sizes:
            if len(seq) < n:
                continue
            at = self._last[n].get(tuple(seq[len(seq) - n:]))
            if at is not None:
                return tuple(seq[at:at + k])
        return ()


def expected_tokens(a: float, t: int) -> float:
    """Tokens one verify pass of `t` rows yields when each draft is accepted with
    probability `a`: the accepted prefix plus the model's own token, (1 - a^t) / (1 - a)."""
    if a >= 1.0:
        return float(t)
    return (1.0 - a ** t) / (1.0 - a)


PROBE_BACKOFF = 8  # the longest wait between probes, in units of probe_every


@dataclass
class AcceptancePolicy:
    """Per-stream draft length and the pays-or-not decision (see the module docstring)."""

    draft_start: int
    draft_max: int
    probe_every: int
    cap: int = 0  # current draft-length cap
    accept_rate: float = 0.7  # estimated per-draft-token acceptance (prior: echo-ish)
    skipped: int = 0  # matches not verified since the last draft
    probe_wait: int = 0  # skipped matches before the next probe (probe_every, doubled per failed probe)
    probing: bool = False  # the last draft handed out was a probe
    alpha: float = 0.15  # EMA weight of one observation
    measured: VerifyCost = field(default_factory=VerifyCost)  # the pass cost (shared or own)

    def __post_init__(self) -> None:
        self.cap = self.draft_start
        self.probe_wait = self.probe_every

    @property
    def row_cost(self) -> float:
        return self.measured.row_cost

    @row_cost.setter
    def row_cost(self, value: float) -> None:
        self.measured.row_cost = value

    @property
    def step_seconds(self) -> float | None:
        return self.measured.step_seconds

    def cost(self, t: int) -> float:
        """A pass of `t` rows, in one-token steps."""
        return 1.0 if t <= 1 else 1.0 + self.measured.extra_row(t) * (t - 1)

    def length(self, available: int) -> int:
        """How many of `available` drafted tokens to verify: the length with the best expected
        gain up to the cap; 0 when no length pays, except every `probe_every`-th match (a probe
        at the starting length, so a stream whose acceptance comes back speculates again)."""
        limit = min(self.cap, available)
        if limit <= 0:
            return 0
        a = self.accept_rate
        best, best_gain = 0, 1.0
        for k in range(1, limit + 1):
            gain = expected_tokens(a, k + 1) / self.cost(k + 1)
            if gain > best_gain:
                best, best_gain = k, gain
        probe = best == 0
        if probe:
            self.skipped += 1
            if self.skipped < self.probe_wait:
                return 0
            best = min(limit, self.probe_length())  # probe: acceptance may have come back
        self.probing = probe
        self.skipped = 0
        return best

    def probe_length(self) -> int:
        """A probe's draft: as long as a pass of at most about two steps allows (1 + c k <= 2),
        up to `draft_start`. Where a row costs most of a step (a CPU) a probe is one draft, so
        probing an open prompt costs ~1/probe_every of its speed, not a 7-row pass each time."""
        c = max(self.row_cost, 1e-6)
        return max(1, min(self.draft_start, int(1.0 / c)))

    def settle(self, drafted: int, accepted: int) -> None:
        """Learn from a verify pass: `accepted` of `drafted` matched (a miss after them unless
        all did); grow the cap after a full run, drop it back after a miss. A probe that kept
        nothing doubles the wait for the next one; one that kept a token brings it back."""
        if self.probing:
            self.probing = False
            self.probe_wait = (self.probe_every if accepted else
                               min(self.probe_every * PROBE_BACKOFF, self.probe_wait * 2))
        for _ in range(accepted):
            self.accept_rate += self.alpha * (1.0 - self.accept_rate)
        if accepted < drafted:
            self.accept_rate += self.alpha * (0.0 - self.accept_rate)
            self.cap = self.draft_start
        else:
            self.cap = min(self.draft_max, max(self.cap, drafted) * 2 + 1)

    def timed_step(self, seconds: float) -> None:
        """A plain one-token step took `seconds`."""
        self.measured.timed_step(seconds)

    def timed_pass(self, rows: int, seconds: float) -> None:
        """A verify pass of `rows` rows took `seconds`: refine the per-row cost."""
        self.measured.timed_pass(rows, seconds)


@dataclass
class LookupDrafter:
    """One stream's drafter: n-gram index, policy and counters."""

    config: LookupSpeculation
    history: Sequence[int]
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # of them, kept
    passes: int = 0  # verify passes run
    index: NgramIndex = field(init=False)
    policy: AcceptancePolicy = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.index = NgramIndex(c.ngram_min, c.ngram_max)
        self.index.extend(self.history)
        self.policy = AcceptancePolicy(c.draft_start, c.draft_max, c.probe_every,
                                       measured=c.cost if c.cost is not None else VerifyCost())

    def propose(self, history: Sequence[int], limit: int) -> tuple[int, ...]:
        """Draft tokens to follow `history` (its last token is being fed now), at most `limit`
        of them; () for a plain step (no match, no pay, or other streams decoding)."""
        if limit <= 0 or self.config.crowded():
            return ()
        self.index.sync(history)
        found = self.index.lookup(min(limit, self.policy.cap))
        cut = next((i for i, t in enumerate(found) if t < 0), None)
        if cut is not None:  # an image's pseudo-ids are never a token to draft
            found = found[:cut]
        if not found:
            return ()
        return found[: self.policy.length(len(found))]

    def settle(self, drafted: int, accepted: int, *, learn: bool = True) -> None:
        """A verify pass of `drafted` drafts ended with `accepted` of them kept. `learn` False:
        the run ended inside the pass (stop, cap, cancel), so the rest was never judged."""
        self.passes += 1
        self.drafted += drafted
        self.accepted += accepted
        if learn:
            self.policy.settle(drafted, accepted)


class Verifying:
    """The verify pass in flight: its rows' logits and the drafts not yet judged.

    Row 0 holds the logits after the fed token, row i those after draft i. A sampled token
    equal to the next draft is already in the KV: the loop takes the next row instead of
    feeding it. Anything else ends the pass; the KV rows past the confirmed tokens are trimmed.
    """

    def __init__(self, rows: np.ndarray, drafts: Sequence[int]) -> None:
        self.rows = rows
        self.drafts = tuple(drafts)
        self.judged = 0  # drafts confirmed so far

    @property
    def pending(self) -> int:
        """Drafts in the KV but not confirmed (trimmed when the pass ends now)."""
        return len(self.drafts) - self.judged

    def confirms(self, token: int) -> bool:
        """Whether `token` is the next draft (then it is confirmed and its row becomes next)."""
        if self.judged < len(self.drafts) and self.drafts[self.judged] == token:
            self.judged += 1
            return True
        return False

    def row(self) -> np.ndarray:
        """The logits after the last confirmed token."""
        return self.rows[self.judged]
