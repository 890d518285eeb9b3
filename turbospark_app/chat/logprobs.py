"""Log-probabilities of the generated tokens, for API clients that ask for them.

`LogprobTap` wraps a turn's producer: it keeps a reference to the logits buffer the decode
loop samples from, and turns each TokenProgress of the stream into a ScoredTokenProgress
carrying the token's log-probability and the top alternatives. The decode loop yields a
token's progress BEFORE it feeds that token, so at that moment the buffer still holds the
distribution the token was drawn from. Figures are the model's own distribution (log-softmax
of the raw logits), not the penalized / truncated one the sampler drew from, as OpenAI reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Sequence

import numpy as np

from ..engine.progress import DecodeStep, PrefillStep, TokenProgress


@dataclass(frozen=True, slots=True)
class ScoredTokenProgress(TokenProgress):
    """A TokenProgress with the token's log-probability and the `top` most likely ids."""

    logprob: float
    top: tuple[tuple[int, float], ...]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float32 log-probabilities of a logit vector."""
    x = logits.astype(np.float32, copy=False)
    shifted = x - x.max()
    return shifted - np.float32(np.log(np.exp(shifted).sum(dtype=np.float32)))


def top_logprobs(logprobs: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The `k` most likely (id, logprob), most likely first."""
    if k <= 0:
        return ()
    k = min(k, logprobs.shape[0])
    part = np.argpartition(-logprobs, k - 1)[:k]
    order = part[np.argsort(-logprobs[part], kind="stable")]
    return tuple((int(i), float(logprobs[i])) for i in order)


class LogprobTap:
    """Delegates to `inner` (any producer); remembers the last logits buffer it filled."""

    def __init__(self, inner: Any, top: int) -> None:
        self._inner = inner
        self._top = top
        self._logits: np.ndarray | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        self._inner.produce(token, position, logits_out)
        self._logits = logits_out

    def produce_lent(self, token: int, position: int, logits_out: np.ndarray) -> None:
        lend = getattr(self._inner, "produce_lent", None)
        (self._inner.produce if lend is None else lend)(token, position, logits_out)
        self._logits = logits_out

    def produce_chunk(self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None) -> None:
        self._inner.produce_chunk(tokens, position, logits_out)
        if logits_out is not None:
            self._logits = logits_out

    def produce_chunk_cancellable(
        self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None, cancel: Any
    ) -> bool:
        """The inner producer's interruptible chunk (a whole chunk when it has none)."""
        inner = getattr(self._inner, "produce_chunk_cancellable", None)
        if inner is None:
            self._inner.produce_chunk(tokens, position, logits_out)
            committed = True
        else:
            committed = bool(inner(tokens, position, logits_out, cancel))
        if committed and logits_out is not None:
            self._logits = logits_out
        return committed

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        """A draft's verification: the decode loop copies row t into its logits buffer before
        it samples the token drawn from row t, so that buffer (the one the tap scores from)
        holds every accepted token's OWN row when its progress passes through here."""
        self._inner.produce_rows(tokens, position, rows_out)

    def score(self, event: TokenProgress) -> ScoredTokenProgress:
        """`event` with the log-probabilities of the distribution it was drawn from."""
        assert self._logits is not None, "a token before any logits"
        now = getattr(self._inner, "logits_now", None)  # a step's row may be lent (context.lend)
        lp = log_softmax(self._logits if now is None else now(self._logits))
        return ScoredTokenProgress(event.index, event.id, event.delta, float(lp[event.id]),
                                   top_logprobs(lp, self._top))

    def scored(self, stream: Generator[Any, None, Any]) -> Generator[Any, None, Any]:
        """Pass `stream` through, scoring every TokenProgress; returns the stream's result."""
        try:
            event = next(stream)
            while True:
                if isinstance(event, TokenProgress):
                    event = self.score(event)
                elif isinstance(event, DecodeStep):  # a batched step fills it without produce()
                    self._logits = event.logits
                elif isinstance(event, PrefillStep) and event.logits is not None:
                    self._logits = event.logits  # (a batched last chunk: the first token's)
                event = stream.send((yield event))
        except StopIteration as done:
            return done.value
        finally:
            stream.close()
