"""`LlamaCppProducer`: the engine's producer over ONE llama.cpp sequence (a session slot).

It keeps a TOKEN MIRROR beside the sequence's KV cells: the ids they hold, in order, so
`len(mirror)` is the sequence's cursor and prefix reuse compares against it (llama.cpp
server's slots, GPT4All). A token must be fed at the cursor, anything else is a
`PositionMismatch`; ids outside the vocabulary are refused before llama.cpp sees them.

Stop inside a prefill chunk (`produce_chunk_cancellable`): on the CPU llama.cpp's abort
callback stops the decode within a graph node; on a GPU backend, where it does not reach the
device, the chunk goes in pieces sized from the measured rate to take <= `GPU_PIECE_SECONDS`
each, with a look at the flag between them. Either way a stopped chunk is trimmed off whole:
nothing of it stays committed. Recurrent models (Mamba, RWKV) cannot drop part of a sequence:
there a stop clears the sequence (the next turn reads its prompt again) and `can_trim` is False,
so nothing speculates on them.

Images (`vision.py`): a chunk may hold an image's pseudo-ids (negative, derived from its sha256),
whole; the producer encodes it with the model's projector and decodes the embedding rows at
those cells (a non-causal image in one batch). The mirror keeps the pseudo-ids, so prefix reuse
matches the same image at the same place; a trim or a reused prefix never ends inside one. With
an M-RoPE model (Qwen-VL) an image's positions are not its cells: the producer keeps the shift
between the two (`image_positions`) and hands llama.cpp positions, the engine cells.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ...engine.errors import ContextOverflow, EngineError
from ...engine.kv_prefix import common_prefix_len
from .batch import EmbdBatch
from .context import LlamaCppContext
from .image_positions import shift_of
from .vision import EncodeFigures, ImageSegment, Projector, image_runs

GPU_PIECE_SECONDS = 0.030  # the longest a piece of a chunk may take where abort cannot reach
_FIRST_PIECE = 32  # tokens of the first piece, before a rate is measured
_MIN_PIECE = 8


class PositionMismatch(EngineError):
    """A token was fed at a position other than the sequence's cursor."""

    def __init__(self, position: int, expected: int) -> None:
        self.position = position
        self.expected = expected
        super().__init__(
            f"token fed at position {position}, but the KV cache holds {expected} tokens "
            f"(the next position must be {expected}; reset() or try_reuse_prefix() first)")


class LlamaCppProducer:
    """LogitProducer, InterruptibleChunkRunner, DraftVerifier and PooledProducer for sequence
    `seq` of `context`."""

    def __init__(self, context: LlamaCppContext, seq: int, *, kv_bytes_per_token: int = 0,
                 projector: Projector | None = None) -> None:
        if not 0 <= seq < context.n_seq_max:
            raise ValueError(f"sequence {seq} is not one of the context's {context.n_seq_max}")
        self.context = context
        self.seq = seq
        self.kv_bytes_per_token = kv_bytes_per_token
        self._mirror: list[int] = []
        self._vocab = context.n_vocab
        facts = context.model.facts
        self.can_trim = not (facts.recurrent or facts.hybrid)
        self._piece_rate = 0.0  # prefill tokens/s of the last pieces (GPU chunking)
        self.projector = projector  # the model's vision projector, None: text only
        self._embd_batch: EmbdBatch | None = None
        self.image_figures: list[EncodeFigures] = []  # per image chunk fed (encoded or stopped)
        # Positions minus cells at the cursor: an M-RoPE image advances the position by fewer
        # than its cells (image_positions); 0 for every other model.
        self._shift = 0
        context.clear_seq(seq)

    # -- state --------------------------------------------------------------------------------

    @property
    def mirror(self) -> tuple[int, ...]:
        """The ids the sequence's KV cells hold (a read-only copy)."""
        return tuple(self._mirror)

    @property
    def kv_position(self) -> int:
        return len(self._mirror)

    @property
    def kv_nbytes(self) -> int:
        """Bytes of KV this sequence holds (its tokens x the model's K+V bytes per token)."""
        return len(self._mirror) * self.kv_bytes_per_token

    @property
    def max_context(self) -> int:
        return self.context.n_ctx

    @property
    def batchable(self) -> bool:
        """Decode steps of several sequences run as one `llama_decode` (`produce_batch`)."""
        return True

    def _check(self, tokens: Sequence[int], position: int, media: bool = False) -> list[int]:
        """The ids as ints, checked: at the cursor, in the vocabulary (`media`: or an image's
        pseudo-ids, checked whole by `image_runs`), within the context."""
        if position != len(self._mirror):
            raise PositionMismatch(position, len(self._mirror))
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("at least one token must be fed")
        bad = next((t for t in ids if not (0 <= t < self._vocab or (media and t < 0))), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary of {self._vocab:,} tokens")
        if position + len(ids) > self.context.n_ctx:
            raise ContextOverflow(position, len(ids), self.context.n_ctx)
        return ids

    def _check_out(self, out: np.ndarray, rows: int | None = None) -> None:
        shape = (self._vocab,) if rows is None else (rows, self._vocab)
        if (out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous
                or not out.flags.writeable):
            raise ValueError(f"the logits buffer must be a writable contiguous float32 array of "
                             f"shape {shape}, got {out.dtype} {out.shape}")

    # -- LogitProducer ------------------------------------------------------------------------

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed `token` at `position`; the next-token logits into `logits_out`."""
        self._step(token, position, logits_out)
        np.copyto(logits_out, self.context.logits(0))

    def produce_lent(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """`produce` without the copy: the row is LENT to `logits_out` (`LlamaCppContext.lend`);
        read it through `logits_now(logits_out)`. The step loop's way (`forward_step`)."""
        self._step(token, position, logits_out)
        self.context.lend(0, logits_out)

    def _step(self, token: int, position: int, logits_out: np.ndarray) -> None:
        ids = self._check((token,), position)
        self._check_out(logits_out)
        self.context.batch.fill_span(ids, position + self._shift, self.seq, "last")
        self._decode_or_roll_back(position, logits_out)
        self._mirror.append(ids[0])

    def logits_now(self, logits_out: np.ndarray) -> np.ndarray:
        """The array holding `logits_out`'s logits now: the lent row of a decode step, else
        `logits_out` itself (`LlamaCppContext.lend`)."""
        return self.context.current(logits_out)

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed a prompt token whose logits nobody reads (`logits_out` is left untouched)."""
        ids = self._check((token,), position)
        self.context.batch.fill_span(ids, position + self._shift, self.seq, "none")
        self._decode_or_roll_back(position)
        self._mirror.append(ids[0])

    def produce_chunk(self, tokens: Sequence[int], position: int,
                      logits_out: np.ndarray | None) -> None:
        """Feed `tokens` at [position, position + len); the LAST one's logits when asked."""
        self.produce_chunk_cancellable(tokens, position, logits_out, None)

    def produce_chunk_cancellable(self, tokens: Sequence[int], position: int,
                                  logits_out: np.ndarray | None,
                                  cancel: Callable[[], bool] | None) -> bool:
        """`produce_chunk`, stoppable inside by `cancel`: False = stopped, nothing of the chunk
        committed (the cursor stays at `position`). A chunk may hold whole images (their
        pseudo-ids, `vision.Projector.image_ids`): each is encoded and its rows decoded here."""
        ids = self._check(tokens, position, media=True)
        if logits_out is not None:
            self._check_out(logits_out)
        runs = image_runs(ids, self.projector) if min(ids) < 0 else [(0, len(ids), None)]
        if logits_out is not None and runs[-1][2] is not None:
            raise ValueError("a chunk that ends with an image has no logits to give")
        shift = self._shift  # positions run ahead of (M-RoPE: behind) cells past each image
        try:
            for start, end, seg in runs:
                if seg is None:
                    out = logits_out is not None and end == len(ids)
                    done = self._feed_text(ids[start:end], position + start + shift, out, cancel)
                else:
                    done = self._feed_image(seg, position + start + shift, cancel)
                    shift += seg.n_pos - seg.n_tokens
                if not done:
                    self._roll_back(position)
                    return False
        except Exception:
            self._roll_back(position)
            raise
        if logits_out is not None:
            np.copyto(logits_out, self.context.logits(-1))
        self._mirror.extend(ids)
        self._shift = shift
        return True

    def _feed_text(self, ids: list[int], position: int, logits: bool,
                   cancel: Callable[[], bool] | None) -> bool:
        """Decode text `ids` at llama.cpp position `position` on (the caller has shifted it)."""
        ctx = self.context
        polled = cancel is not None and not (ctx.abort_works and self.can_trim)
        start = 0
        while start < len(ids):
            size = ctx.n_batch if not polled else self._piece_size()
            end = min(len(ids), start + size)
            last = end == len(ids)
            ctx.batch.fill_span(ids[start:end], position + start, self.seq,
                                "last" if last and logits else "none")
            began = time.perf_counter()
            done = ctx.decode(ctx.batch, None if polled else cancel)
            if polled:
                self._note_piece(end - start, time.perf_counter() - began)
            if not done or (polled and not last and cancel is not None and cancel()):
                return False
            start = end
        return True

    def _feed_image(self, seg: ImageSegment, position: int,
                    cancel: Callable[[], bool] | None) -> bool:
        """Encode one image chunk and decode its rows at `position` (all or nothing: the caller
        rolls back). Stop reaches into the encode through the projector's graph callback
        (`encode_stop`): a stopped encode's rows are thrown away."""
        assert self.projector is not None
        ctx = self.context
        mrope = self.projector.mrope
        if seg.n_pos != seg.n_tokens and not mrope:
            raise EngineError(f"an image chunk advancing {seg.n_pos} positions over "
                              f"{seg.n_tokens} cells needs an M-RoPE model")
        if cancel is not None and cancel():
            return False
        rows = self.projector.encode(seg, cancel)
        if self.projector.last_encode is not None:
            self.image_figures.append(self.projector.last_encode)
        if rows is None or (cancel is not None and cancel()):
            return False
        if self._embd_batch is None:
            self._embd_batch = EmbdBatch(ctx.n_batch, self.projector.n_embd, 4 if mrope else 1)
        grid = self.projector.positions(seg, position) if mrope else None
        # A non-causal image goes in ONE ubatch (checked when it was tokenized, again here).
        step = len(rows) if seg.non_causal else ctx.n_batch
        if step > ctx.n_batch:
            raise EngineError(f"an image of {len(rows)} tokens does not fit one batch of {ctx.n_batch}")
        polled = cancel is not None and not (ctx.abort_works and self.can_trim)
        for at in range(0, len(rows), step):
            self._embd_batch.fill(rows[at: at + step], position + at, self.seq,
                                  None if grid is None else np.ascontiguousarray(grid[:, at: at + step]))
            if not ctx.decode_embd(self._embd_batch, None if polled else cancel,
                                   causal=not seg.non_causal):
                return False
            if polled and cancel is not None and cancel():
                return False
        return True

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        """Feed `tokens` at [position, position + T) in ONE decode (a draft's verification):
        the logits after every token into `rows_out` (T, vocab)."""
        ids = self._check(tokens, position)
        self._check_out(rows_out, len(ids))
        ctx = self.context
        if len(ids) > ctx.n_batch:
            raise ValueError(f"{len(ids)} rows do not fit one batch of {ctx.n_batch}")
        ctx.batch.fill_span(ids, position + self._shift, self.seq, "all")
        self._decode_or_roll_back(position)
        for i in range(len(ids)):
            np.copyto(rows_out[i], ctx.logits(i))
        self._mirror.extend(ids)

    def trim(self, n: int) -> None:
        """Keep the first `n` fed tokens (KV cells and mirror): a rejected draft's rows go."""
        if not 0 <= n <= len(self._mirror):
            raise ValueError(f"cannot trim to {n}: the sequence holds {len(self._mirror)} tokens")
        if n == len(self._mirror):
            return
        if self._image_boundary(n) != n:
            raise ValueError(f"cannot trim to {n}: that cuts inside an image")
        if not self.context.seq_rm(self.seq, n + self._shift_at(n), -1):
            raise EngineError(f"this model's memory cannot drop part of a sequence "
                              f"({self.context.model.facts.description}: recurrent state)")
        del self._mirror[n:]
        self._shift = self._shift_at(n)
        if not self._holds(n):
            self.reset()
            raise EngineError(f"the KV cache no longer holds the first {n} tokens (a sliding window "
                              "dropped them): the sequence was cleared")

    def reset(self) -> None:
        """Forget every token: the next is fed at position 0."""
        self.context.clear_seq(self.seq)
        self._mirror.clear()
        self._shift = 0

    def release(self) -> None:
        """Reset: the cells go back to the shared KV memory (PooledProducer)."""
        self.reset()

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        """Trim to the longest common prefix with `prompt_ids` (at most len - 1: the last prompt
        token is always fed again, for fresh logits); return its length."""
        keep = common_prefix_len(self._mirror, [int(t) for t in prompt_ids[: len(prompt_ids) - 1]])
        keep = self._image_boundary(keep)  # never keep part of an image
        if keep < len(self._mirror) and not (self.context.seq_rm(self.seq, keep + self._shift_at(keep), -1)
                                             and self._holds(keep)):
            keep = 0  # a recurrent state or a window's lost cells cannot be cut back to: start over
            self.context.clear_seq(self.seq)
        del self._mirror[keep:]
        self._shift = self._shift_at(keep)
        return keep

    def session_slot_evicted(self) -> bool:
        """Always False: the session pool reports evictions."""
        return False

    # -- the state in RAM (engine.state_cache) --------------------------------------------------

    def save_state(self) -> bytes:
        """The sequence's KV state, to put back with `restore_state` (into any sequence)."""
        return self.context.state_get(self.seq)

    def restore_state(self, blob: bytes, mirror: Sequence[int]) -> bool:
        """Replace what the sequence holds with a saved state whose tokens are `mirror`; False
        (the sequence left empty) when llama.cpp refuses it or it does not hold what it claims."""
        self.reset()
        ids = [int(t) for t in mirror]
        if not ids or len(ids) > self.context.n_ctx or not self.context.state_set(self.seq, blob):
            self.reset()
            return False
        self._mirror = ids
        shift = self._shift_of_mirror(len(ids))
        if shift is None:  # an M-RoPE image whose positions are no longer known: read it again
            self.reset()
            return False
        self._shift = shift
        if not self._holds(len(ids)):
            self.reset()
            return False
        return True

    # -- internals ------------------------------------------------------------------------------

    def _image_boundary(self, n: int) -> int:
        """`n`, or the start of the image chunk the cut at `n` would fall inside."""
        m = self._mirror
        if n <= 0 or n >= len(m) or m[n] >= 0 or m[n - 1] >= 0:
            return n
        start = n - 1
        while start > 0 and m[start - 1] < 0:
            start -= 1
        i = start
        while i < n:
            seg = self.projector.segment(m[i]) if self.projector is not None else None
            if seg is None or i + seg.n_tokens > n:
                return i  # inside this chunk (or one no longer known): cut before it
            i += seg.n_tokens
        return n

    def _shift_of_mirror(self, n: int) -> int | None:
        """Positions minus cells after the mirror's first `n` ids (None: an M-RoPE image the
        projector no longer knows)."""
        if self.projector is None or not self.projector.mrope:
            return 0
        return shift_of(self._mirror[:n], self.projector.segment)

    def _shift_at(self, n: int) -> int:
        """`_shift_of_mirror` where it must be known: `n` at a boundary the mirror reached."""
        shift = self._shift_of_mirror(n)
        if shift is None:
            raise EngineError(f"the positions of an image before cell {n} are no longer known")
        return shift

    def _holds(self, n: int) -> bool:
        """The memory still has what the next token at `n` attends to (llama-server's rule: a
        sliding window's cells may be gone; with the full window history kept they never are).
        Positions, not cells, after an M-RoPE image (image_positions)."""
        ctx = self.context
        if n == 0:
            return True
        if ctx.seq_pos_max(self.seq) != self._last_position(n):
            return False
        swa = ctx.model.facts.n_swa
        return not swa or ctx.seq_pos_min(self.seq) <= max(0, n + self._shift_at(n) - swa)

    def _last_position(self, n: int) -> int:
        """The position `seq_pos_max` reports when the first `n` mirror ids are in the cells."""
        start = self._image_boundary(n - 1) if self._mirror[n - 1] < 0 else n - 1
        if self._mirror[n - 1] >= 0 or self.projector is None:
            return n - 1 + self._shift_at(n - 1)
        seg = self.projector.segment(self._mirror[start])
        if seg is None or start + seg.n_tokens != n:
            return n - 1 + self._shift_at(n)  # (not a whole known image: no better answer)
        return start + self._shift_at(start) + seg.last_offset

    def _decode_or_roll_back(self, position: int, refills: np.ndarray | None = None) -> None:
        try:
            self.context.decode(self.context.batch, refills=() if refills is None else (refills,))
        except Exception:
            self._roll_back(position)
            raise

    def _roll_back(self, position: int) -> None:
        """Drop whatever a failed or stopped decode left past `position`."""
        ctx = self.context
        position += self._shift  # (the mirror is still what it was before the failed feed)
        if ctx.seq_pos_max(self.seq) < position:
            return
        if not ctx.seq_rm(self.seq, position, -1):
            ctx.clear_seq(self.seq)  # recurrent: cannot cut back, start over
            self._mirror.clear()
            self._shift = 0

    def _piece_size(self) -> int:
        if self._piece_rate <= 0:
            return _FIRST_PIECE
        return int(min(self.context.n_batch, max(_MIN_PIECE, self._piece_rate * GPU_PIECE_SECONDS)))

    def _note_piece(self, tokens: int, seconds: float) -> None:
        if seconds > 0:
            rate = tokens / seconds
            self._piece_rate = rate if self._piece_rate <= 0 else 0.5 * (self._piece_rate + rate)


def produce_batch(steps: Sequence[tuple[LlamaCppProducer, int, int, np.ndarray]], *,
                  lend: bool = False) -> None:
    """One decode step for each (producer, token, position, logits_out): the sequences of one
    context go as ONE `llama_decode`, one row each at its own position. `lend`: each row is lent
    to its buffer (`produce_lent`), not copied into it."""
    groups: dict[int, list[tuple[LlamaCppProducer, int, int, np.ndarray]]] = {}
    seen = [(id(p.context), p.seq) for p, _, _, _ in steps]
    if len(set(seen)) != len(seen):
        raise ValueError("two decode rows of one batch are for the same sequence")
    for producer, token, position, out in steps:
        ids = producer._check((token,), position)
        producer._check_out(out)
        groups.setdefault(id(producer.context), []).append((producer, ids[0], position, out))
    for group in groups.values():
        ctx = group[0][0].context
        for at in range(0, len(group), ctx.n_batch):
            part = group[at: at + ctx.n_batch]
            ctx.batch.fill_rows([t for _, t, _, _ in part], [pos + p._shift for p, _, pos, _ in part],
                                [p.seq for p, _, _, _ in part])
            try:
                ctx.decode(ctx.batch, refills=tuple(out for _, _, _, out in part))
            except Exception:
                for producer, _, position, _ in part:
                    producer._roll_back(position)
                raise
            for i, (producer, token, _, out) in enumerate(part):
                if lend:
                    ctx.lend(i, out)
                else:
                    np.copyto(out, ctx.logits(i))
                producer._mirror.append(token)


def produce_mixed(rows: Sequence[tuple[LlamaCppProducer, int, int, np.ndarray]],
                  spans: Sequence[tuple[LlamaCppProducer, Sequence[int], int, np.ndarray | None]], *,
                  lend: bool = False, cancel: Callable[[], bool] | None = None) -> bool:
    """Decode rows (as `produce_batch`) and prompt spans (as `produce_chunk`, text only) of
    several sequences of ONE context in ONE `llama_decode`: llama-server's continuous batching,
    a prompt going in beside the streams that decode. A span's last logits go to its buffer when
    one is given. `cancel` may stop the pass inside (CPU): False, and nothing of it is committed
    for any sequence (llama.cpp drops the pass's cells; each cursor stays)."""
    if not spans:
        produce_batch(rows, lend=lend)
        return True
    producers = [p for p, _, _, _ in rows] + [p for p, _, _, _ in spans]
    ctx = producers[0].context
    if any(p.context is not ctx for p in producers):
        raise ValueError("a mixed batch runs on one context")
    if len({p.seq for p in producers}) != len(producers):
        raise ValueError("two parts of one batch are for the same sequence")
    parts: list[tuple[list[int], int, int, bool]] = []
    for producer, token, position, out in rows:
        producer._check_out(out)
        parts.append((producer._check((token,), position), position + producer._shift, producer.seq, True))
    for producer, tokens, position, out in spans:
        if out is not None:
            producer._check_out(out)
        parts.append((producer._check(tokens, position), position + producer._shift, producer.seq,
                      out is not None))
    if sum(len(t) for t, _, _, _ in parts) > ctx.n_batch:
        raise ValueError(f"{sum(len(t) for t, _, _, _ in parts)} rows do not fit one batch of {ctx.n_batch}")
    last = ctx.batch.fill_parts(parts)
    # Stop inside the pass only where every sequence can drop what it wrote (not recurrent).
    stoppable = cancel if cancel is not None and all(p.can_trim for p in producers) else None
    starts = [pos for _, _, pos, _ in rows] + [pos for _, _, pos, _ in spans]
    try:
        done = ctx.decode(ctx.batch, stoppable, refills=tuple(out for _, _, _, out in rows))
    except Exception:
        for producer, position in zip(producers, starts):
            producer._roll_back(position)
        raise
    if not done:
        for producer, position in zip(producers, starts):
            producer._roll_back(position)
        return False
    for i, (producer, token, _, out) in enumerate(rows):
        if lend:
            ctx.lend(last[i], out)
        else:
            np.copyto(out, ctx.logits(last[i]))
        producer._mirror.append(token)
    for j, (producer, _, _, out) in enumerate(spans):
        if out is not None:
            np.copyto(out, ctx.logits(last[len(rows) + j]))
        producer._mirror.extend(parts[len(rows) + j][0])
    return True
