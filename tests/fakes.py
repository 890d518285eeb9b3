"""Test doubles for the engine, reusable by any test: `from fakes import ...`.

- `ScriptedProducer`: a LogitProducer + ChunkedPrefillRunner whose logits are fixed per
  position by a script, which keeps an honest KV mirror and records every call.
- `ByteTokenizer`: ids 0..255 are bytes, plus three special ids.
- `PieceTokenizer`: ids name arbitrary byte pieces (e.g. a text split at random points).
- `FakeClock`: a clock plus a sleep that advances it, for pacing tests without wall time.
- `drain(stream)`, `timeless(result)`: helpers for step-loop generators and results.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Generator, Mapping, NamedTuple, Sequence, Union

import numpy as np

LogitScript = Union[Mapping[int, "int | np.ndarray"], Callable[[int], "int | np.ndarray"]]
"""position -> logits after feeding the token at that position: an int (that id becomes the
argmax: HIT_LOGIT there, 0 elsewhere) or a full vector. The FIRST generated token comes from
the entry at len(prompt) - 1."""

HIT_LOGIT = 10.0


class Call(NamedTuple):
    """One recorded producer call. `token` is an int, a tuple (produce_chunk) or None
    (reset, try_reuse_prefix). `wants_logits` says whether logits were written; `at` is the
    producer's clock reading (None without a clock)."""

    method: str
    token: int | tuple[int, ...] | None
    position: int | None
    wants_logits: bool = False
    at: float | None = None


class ScriptedFailure(RuntimeError):
    """What ScriptedProducer raises at `fail_at` unless told otherwise."""


class ScriptedProducer:
    """A producer whose logits are scripted per position.

    It mirrors a KV cache: writing at position p truncates everything from p on, a
    position past the cursor raises (a gap), and `kv` lists the resident token ids, so a
    test can compare it with `RawDecodeResult.kv_backed_token_ids`.

    - `script`: see `LogitScript`; positions missing from a mapping give `default`.
    - `reuse`: the answer of `try_reuse_prefix`: an int (the KV then pretends to hold that
      many prompt ids) or None (the true common prefix of the KV and the prompt).
    - `poison_prefill`: `produce_prefill` and logit-less chunks write NaN, so a loop that
      samples from prefill logits fails loudly.
    - `fail_at`: any feed covering this position raises `error` (default ScriptedFailure).
    - `evicted`: the answer of `session_slot_evicted`.
    """

    def __init__(
        self,
        vocab_size: int,
        script: LogitScript | None = None,
        *,
        default: int | np.ndarray = 0,
        reuse: int | None = 0,
        poison_prefill: bool = True,
        fail_at: int | None = None,
        error: Exception | None = None,
        evicted: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.vocab_size = vocab_size
        self.script: LogitScript = {} if script is None else script
        self.default = default
        self.reuse = reuse
        self.poison_prefill = poison_prefill
        self.fail_at = fail_at
        self.error = error
        self.evicted = evicted
        self.clock = clock
        self.kv: list[int] = []
        self.calls: list[Call] = []
        self.resets = 0

    @classmethod
    def for_reply(cls, vocab_size: int, prompt_len: int, reply: Sequence[int], **kw: object) -> "ScriptedProducer":
        """A producer whose argmax spells `reply` after a prompt of `prompt_len` tokens."""
        script = {prompt_len - 1 + i: tok for i, tok in enumerate(reply)}
        return cls(vocab_size, script, **kw)  # type: ignore[arg-type]

    # -- inspection -------------------------------------------------------------------
    def methods(self) -> list[str]:
        """The recorded method names, in call order."""
        return [c.method for c in self.calls]

    def feeds(self) -> list[Call]:
        """The calls that fed tokens (produce, produce_prefill, produce_chunk)."""
        return [c for c in self.calls if c.method.startswith("produce")]

    def logits_at(self, position: int) -> np.ndarray:
        """The scripted logits after feeding `position`, as float32."""
        entry = self.script(position) if callable(self.script) else self.script.get(position, self.default)
        if isinstance(entry, (int, np.integer)):
            out = np.zeros(self.vocab_size, dtype=np.float32)
            out[int(entry)] = HIT_LOGIT
            return out
        vec = np.asarray(entry, dtype=np.float32)
        assert vec.shape == (self.vocab_size,), "scripted vector has the wrong length"
        return vec

    # -- LogitProducer ----------------------------------------------------------------
    def _now(self) -> float | None:
        return self.clock() if self.clock is not None else None

    def _feed(self, tokens: Sequence[int], position: int) -> None:
        if position > len(self.kv):
            raise AssertionError(f"position {position} past the KV cursor {len(self.kv)}")
        if self.fail_at is not None and position <= self.fail_at < position + len(tokens):
            raise self.error if self.error is not None else ScriptedFailure(f"scripted failure at {self.fail_at}")
        del self.kv[position:]
        self.kv.extend(int(t) for t in tokens)

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        self.calls.append(Call("produce", token, position, True, self._now()))
        self._feed([token], position)
        logits_out[:] = self.logits_at(position)

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
        self.calls.append(Call("produce_prefill", token, position, False, self._now()))
        self._feed([token], position)
        if self.poison_prefill:
            logits_out[:] = np.nan

    def produce_chunk(self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None) -> None:
        wants = logits_out is not None
        self.calls.append(Call("produce_chunk", tuple(tokens), position, wants, self._now()))
        self._feed(tokens, position)
        if logits_out is not None:
            logits_out[:] = self.logits_at(position + len(tokens) - 1)

    def reset(self) -> None:
        self.calls.append(Call("reset", None, None))
        self.resets += 1
        self.kv.clear()

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        self.calls.append(Call("try_reuse_prefix", None, None))
        if self.reuse is None:
            n = 0
            while n < min(len(self.kv), len(prompt_ids)) and self.kv[n] == prompt_ids[n]:
                n += 1
        else:
            n = self.reuse
            self.kv = [int(t) for t in prompt_ids[:n]]  # pretend the KV held them
        del self.kv[n:]  # a producer trims its state to the reused length
        return n

    def session_slot_evicted(self) -> bool:
        return self.evicted


class _FakeTokenizer:
    """Shared parts: specials with empty bytes, decode with replacement."""

    end_of_turn_ids: frozenset[int]
    tool_call_ids: frozenset[int]
    eos_ids: frozenset[int]

    @property
    def eog_ids(self) -> frozenset[int]:
        return self.end_of_turn_ids | self.eos_ids

    def _piece(self, token_id: int) -> bytes:
        raise NotImplementedError

    def token_bytes(self, token_id: int) -> bytes:
        if token_id in self.end_of_turn_ids or token_id in self.tool_call_ids or token_id in self.eos_ids:
            return b""
        return self._piece(token_id)

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


class ByteTokenizer(_FakeTokenizer):
    """Ids 0..255 are single bytes; END_OF_TURN, EOS and TOOL_CALL are specials (b"")."""

    END_OF_TURN = 256
    EOS = 257
    TOOL_CALL = 258
    VOCAB_SIZE = 259

    def __init__(self) -> None:
        self.end_of_turn_ids = frozenset({self.END_OF_TURN})
        self.eos_ids = frozenset({self.EOS})
        self.tool_call_ids = frozenset({self.TOOL_CALL})

    def _piece(self, token_id: int) -> bytes:
        if not 0 <= token_id < 256:
            raise KeyError(f"no such token id {token_id}")
        return bytes([token_id])

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class PieceTokenizer(_FakeTokenizer):
    """Ids 0..len(pieces)-1 name `pieces` (any bytes, even half a UTF-8 character); then
    END_OF_TURN = len(pieces), EOS = len + 1, TOOL_CALL = len + 2."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces: tuple[bytes, ...] = tuple(pieces)
        self.END_OF_TURN = len(self.pieces)
        self.EOS = len(self.pieces) + 1
        self.TOOL_CALL = len(self.pieces) + 2
        self.vocab_size = len(self.pieces) + 3
        self.end_of_turn_ids = frozenset({self.END_OF_TURN})
        self.eos_ids = frozenset({self.EOS})
        self.tool_call_ids = frozenset({self.TOOL_CALL})

    @classmethod
    def split(cls, data: bytes, cuts: Sequence[int]) -> tuple["PieceTokenizer", list[int]]:
        """Cut `data` at `cuts` (any order, duplicates and ends ignored): (tokenizer, ids)."""
        bounds = sorted({c for c in cuts if 0 < c < len(data)} | {0, len(data)})
        pieces = tuple(data[a:b] for a, b in zip(bounds, bounds[1:]))
        return cls(pieces), list(range(len(pieces)))

    def _piece(self, token_id: int) -> bytes:
        return self.pieces[token_id]

    def encode(self, text: str) -> list[int]:
        """Greedy longest-piece match; raises ValueError when the text cannot be spelled."""
        data, ids, i = text.encode("utf-8"), [], 0
        while i < len(data):
            best = max(
                (j for j, p in enumerate(self.pieces) if p and data.startswith(p, i)),
                key=lambda j: len(self.pieces[j]),
                default=None,
            )
            if best is None:
                raise ValueError(f"cannot encode byte {i} of {data!r}")
            ids.append(best)
            i += len(self.pieces[best])
        return ids


class FakeClock:
    """A manual clock: `clock()` reads it, `sleep(dt)` advances it and records dt."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self.reads = 0

    def clock(self) -> float:
        self.reads += 1
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)


def drain(stream: Generator[Any, None, Any]) -> tuple[list[Any], Any]:
    """Run a step-loop generator to its end without waiting: (every yielded item, result)."""
    items: list[Any] = []
    while True:
        try:
            items.append(next(stream))
        except StopIteration as done:
            return items, done.value


def timeless(result: Any) -> Any:
    """`result` with its wall-clock fields zeroed, for comparing two runs."""
    return replace(result, prefill_seconds=0.0, decode_seconds=0.0)


class Shared:
    """A backend several EngineThreads use in turn (a test's module-wide model): each engine
    closes its backend when it shuts down, this one's `close` leaves it open. Every other
    attribute, set or read, is the backend's."""

    def __init__(self, backend: Any) -> None:
        object.__setattr__(self, "_backend", backend)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._backend, name, value)

    def close(self) -> None:
        """Left open: the test's fixture closes it."""
