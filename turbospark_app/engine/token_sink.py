"""Where sampled tokens become text (reference: `token_sink::TokenSink`).

The sink owns everything between "a token was sampled" and "text reached the user":
stop-token checks, incremental UTF-8 detokenization, stop-string matching across token
boundaries and the token budget. It is a plain object whose `commit` returns the events to
emit plus an optional stop reason, so a generator can yield them. The cancel poll belongs to
the loop, which polls AFTER yielding a token's events (a cancel raised while handling a
token's progress then takes effect on that very token) and ends the run with `finish`.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple, Sequence

from .config import GenerationConfig
from .progress import RawDecodeProgress, StopReason, TailProgress, TokenProgress
from .tokenizer import EngineTokenizer


class Commit(NamedTuple):
    """What committing one token produced: events to emit (in order) and why the run stops
    (None = keep going)."""

    events: tuple[RawDecodeProgress, ...]
    stop: StopReason | None


class StopMatcher:
    """Finds stop strings in streamed text and withholds what could still become one.

    `push(text)` returns (releasable text, matched). Text is withheld only while it is a
    suffix that could start a stop string, so a stop string split over any number of pushes
    is still found and never released. When several stop strings occur, the one that
    COMPLETES first wins (ties: the longer), which is what a token-by-token stream can see
    and makes the result independent of how the text was split. Empty stop strings are
    ignored.
    """

    def __init__(self, stop_strings: Sequence[str]) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stop_strings if s))
        self._hold_max = max((len(s) for s in self._stops), default=1) - 1
        self._withheld = ""

    @property
    def withheld(self) -> str:
        """Text received but not yet released."""
        return self._withheld

    def push(self, text: str) -> tuple[str, bool]:
        """Add `text`; return (text safe to release now, whether a stop string completed).

        On a match the released text ends right before the stop string; anything after it
        is dropped, and the matcher must not be used again.
        """
        if not self._stops:
            return text, False
        buf = self._withheld + text
        best: tuple[int, int] | None = None  # (end, -length) of the earliest-completing match
        for stop in self._stops:
            at = buf.find(stop)
            if at >= 0:
                key = (at + len(stop), -len(stop))
                if best is None or key < best:
                    best = key
        if best is not None:
            self._withheld = ""
            end, neg_len = best
            return buf[: end + neg_len], True
        hold = self._hold_len(buf)
        self._withheld = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def _hold_len(self, buf: str) -> int:
        # Longest suffix of buf that is a proper prefix of some stop string.
        for n in range(min(len(buf), self._hold_max), 0, -1):
            tail = buf[-n:]
            if any(stop.startswith(tail) for stop in self._stops):
                return n
        return 0

    def flush(self) -> str:
        """Release and forget everything withheld (the run ended without a match)."""
        text, self._withheld = self._withheld, ""
        return text


class TokenSink:
    """Turns each sampled token into progress events and decides when the run stops.

    `history` (prompt ids, then every committed text token) feeds the penalties; stop
    tokens are never appended to it nor emitted. `generated` counts every committed token,
    stop tokens included (the reference's `new_tokens`).
    """

    def __init__(
        self, tokenizer: EngineTokenizer, config: GenerationConfig, history: Sequence[int]
    ) -> None:
        self.history: list[int] = list(history)
        self.generated = 0
        self.stopped: StopReason | None = None
        self._tokenizer = tokenizer
        self._budget = config.max_new_tokens
        self._matcher = StopMatcher(config.stop_strings)
        # "replace" only for truly invalid bytes; an incomplete sequence waits for more.
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Precedence if an id is listed twice: end-of-turn, then EOS.
        self._special: dict[int, StopReason] = {}
        for ids, reason in (
            (tokenizer.eog_ids, StopReason.END_OF_TURN),  # every end of generation stops
            (tokenizer.eos_ids, StopReason.EOS),
            (tokenizer.end_of_turn_ids, StopReason.END_OF_TURN),
        ):
            self._special.update(dict.fromkeys(ids, reason))
        # A tool-call token (`<tool_call>`, `[TOOL_CALLS]`) opens the call the reply goes on to
        # write (chat.formats parses it): it is text, and a reply that then ends by itself ends
        # as TOOL_CALLS.
        self._tool_call_ids = frozenset(tokenizer.tool_call_ids) - self._special.keys()
        self.called = False

    def commit(self, token_id: int) -> Commit:
        """Account for one sampled token; return its events and the stop reason, if any.

        Checks, in order: stop token (END_OF_TURN / EOS, nothing emitted; TOOL_CALLS instead
        when a tool-call token came before it),
        stop string (STOP_STRING, text before it emitted), budget (MAX_TOKENS, the token is
        emitted first). Every end but STOP_STRING flushes the withheld tail.
        """
        if self.stopped is not None:
            raise RuntimeError(f"TokenSink: commit after the run stopped ({self.stopped})")
        self.generated += 1
        special = self._special.get(token_id)
        if special is not None:
            if self.called:
                special = StopReason.TOOL_CALLS
            return Commit(self.finish(special), special)
        if token_id in self._tool_call_ids:
            self.called = True
        self.history.append(token_id)
        text = self._utf8.decode(self._tokenizer.token_bytes(token_id), final=False)
        delta, matched = self._matcher.push(text)
        event = TokenProgress(self.generated - 1, token_id, delta)
        if matched:
            self.stopped = StopReason.STOP_STRING
            return Commit((event,), StopReason.STOP_STRING)
        if self.generated >= self._budget:
            return Commit((event, *self.finish(StopReason.MAX_TOKENS)), StopReason.MAX_TOKENS)
        return Commit((event,), None)

    def finish(self, reason: StopReason) -> tuple[RawDecodeProgress, ...]:
        """End the run with `reason` (e.g. CANCELLED by the loop): the events left to emit.

        Releases the withheld tail as one TailProgress (none when nothing is withheld).
        Bytes of an unfinished UTF-8 character are dropped rather than shown broken.
        """
        self.stopped = reason
        tail = self._matcher.flush()
        return (TailProgress(tail),) if tail else ()
