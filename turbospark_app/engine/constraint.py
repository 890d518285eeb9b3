"""Constrained decoding: a per-request grammar that masks the logits before the sampler's filters.

The engine owns the protocol (this module: no engine import, so `config` can name the spec's
type; the sampler that applies it is `selection.ConstrainedSampler`); an implementation (the
app's is llguidance, `chat.grammar`) lives above it. A `ConstraintSpec` travels in
`GenerationConfig.constraint` (immutable, checked when the request is admitted); each run starts its own `Constraint` from it (`start()`), so a request's
grammar state is never shared between runs.

The step loop's contract (`raw_completion.decode`):
- every sampled token is masked first: `mask(logits)` returns a float32 copy with -inf outside
  the allowed set (the input, a producer's buffer, is never written);
- every committed token advances the constraint (`accept`), the sampled ones and, under
  speculation, each verified row's token in order (a row is only sampled after the rows before
  it were accepted, so its mask is computed from the right state);
- a speculative draft is cut to its longest prefix the grammar accepts before it is verified
  (`valid_prefix`: consume, then roll back), so no row is spent on a token the mask would
  refuse; rows past a rejected draft are never sampled, so the state needs no further rollback;
- once the grammar is complete (`finished`), the mask allows only end-of-generation ids: the
  reply stops with the sink's END_OF_TURN / EOS reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # annotations only: `config` imports this module, numpy stays unloaded
    import numpy as np


@runtime_checkable
class Constraint(Protocol):
    """One run's grammar state."""

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """`logits` (float32, 1-D) with every token the grammar refuses now at -inf: a copy."""
        ...

    def accept(self, token: int) -> None:
        """Advance past a committed token (one the last mask allowed)."""
        ...

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the grammar would accept from here; the state is unchanged."""
        ...

    @property
    def finished(self) -> bool:
        """True when the grammar is complete: only an end-of-generation token may follow."""
        ...


@runtime_checkable
class ConstraintSpec(Protocol):
    """A compiled grammar: immutable, shared by the request; `start()` once per run."""

    def start(self) -> Constraint: ...
