"""A `llama_batch` whose arrays are numpy arrays we own: filling one is a few slice writes.

`llama_batch_init` would malloc the arrays in C, and writing them through ctypes costs a Python
call per field per token. Here every row belongs to ONE sequence (`n_seq_id[i] == 1`), which is
all the producer needs: a prompt chunk of one slot, or one decode row per slot.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from . import library


class Batch:
    """Room for `capacity` tokens; `fill` sets the rows, `struct` is what `llama_decode` takes."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a batch needs room for at least one token (got {capacity})")
        C = library.binding()
        self.capacity = capacity
        self.token = np.zeros(capacity, np.int32)
        self.pos = np.zeros(capacity, np.int32)
        self.n_seq_id = np.ones(capacity, np.int32)
        self.seq = np.zeros(capacity, np.int32)  # each row's one sequence id
        self.logits = np.zeros(capacity, np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._seq_ptrs = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = C.llama_batch()
        self.struct.token = self.token.ctypes.data_as(int_p)
        self.struct.embd = None
        self.struct.pos = self.pos.ctypes.data_as(int_p)
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(int_p)
        self.struct.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(int_p))
        self.struct.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct.n_tokens = 0
        self.step_rows = 0  # rows of a decode step (one token per stream, logits each); 0 = other

    def fill_span(self, tokens: Sequence[int], position: int, seq: int, outputs: str) -> None:
        """Rows for `tokens` of sequence `seq` at [position, position + len): `outputs` "none",
        "last" or "all" says which rows' logits llama.cpp computes."""
        n = len(tokens)
        if not 0 < n <= self.capacity:
            raise ValueError(f"a batch of {n} tokens does not fit {self.capacity}")
        self.token[:n] = tokens
        self.pos[:n] = np.arange(position, position + n, dtype=np.int32)
        self.seq[:n] = seq
        self.logits[:n] = 1 if outputs == "all" else 0
        if outputs == "last":
            self.logits[n - 1] = 1
        self.struct.n_tokens = n
        self.step_rows = 1 if n == 1 and outputs != "none" else 0

    def fill_rows(self, tokens: Sequence[int], positions: Sequence[int], seqs: Sequence[int]) -> None:
        """One decode row per entry (each its own sequence), every row's logits computed."""
        n = len(tokens)
        if not 0 < n <= self.capacity:
            raise ValueError(f"a batch of {n} rows does not fit {self.capacity}")
        self.token[:n] = tokens
        self.pos[:n] = positions
        self.seq[:n] = seqs
        self.logits[:n] = 1
        self.struct.n_tokens = n
        self.step_rows = n

    def fill_parts(self, parts: Sequence[tuple[Sequence[int], int, int, bool]]) -> list[int]:
        """Rows of several sequences at once (continuous batching): each part is (tokens,
        position, seq, logits) — `tokens` at [position, position + len) of `seq`, its LAST row's
        logits computed when `logits`. Returns each part's last row. One-token parts with
        logits are decode rows (`step_rows`)."""
        n = sum(len(t) for t, _, _, _ in parts)
        if not 0 < n <= self.capacity or any(not t for t, _, _, _ in parts):
            raise ValueError(f"a batch of {n} tokens in {len(parts)} parts does not fit {self.capacity}")
        at, last, steps = 0, [], 0
        for tokens, position, seq, logits in parts:
            k = len(tokens)
            self.token[at: at + k] = tokens
            self.pos[at: at + k] = np.arange(position, position + k, dtype=np.int32)
            self.seq[at: at + k] = seq
            self.logits[at: at + k] = 0
            self.logits[at + k - 1] = 1 if logits else 0
            steps += k == 1 and logits
            at += k
            last.append(at - 1)
        self.struct.n_tokens = n
        self.step_rows = steps
        return last

    @property
    def n_tokens(self) -> int:
        return int(self.struct.n_tokens)

    def tokens_view(self) -> Any:
        return self.token[: self.n_tokens]


class EmbdBatch:
    """A `llama_batch` of embedding rows (an image's), one sequence: consecutive positions, or
    `n_pos_per_row` (4: M-RoPE) positions a row given section-major (`image_positions`)."""

    def __init__(self, capacity: int, n_embd: int, n_pos_per_row: int = 1) -> None:
        C = library.binding()
        self.capacity, self.n_embd, self.n_pos_per_row = capacity, n_embd, n_pos_per_row
        self.embd = np.zeros((capacity, n_embd), np.float32)
        self.pos = np.zeros(capacity * n_pos_per_row, np.int32)
        self.n_seq_id = np.ones(capacity, np.int32)
        self.seq = np.zeros(capacity, np.int32)
        self.logits = np.zeros(capacity, np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._seq_ptrs = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = C.llama_batch()
        self.struct.token = None
        self.struct.embd = self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self.struct.pos = self.pos.ctypes.data_as(int_p)
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(int_p)
        self.struct.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(int_p))
        self.struct.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct.n_tokens = 0
        self.step_rows = 0  # an image's rows are never a decode step (the host-overhead gauge)

    def fill(self, rows: np.ndarray, position: int, seq: int, positions: np.ndarray | None = None) -> None:
        """Rows of embeddings at [position, position + len(rows)) of `seq`, no logits; or at
        `positions` ((n_pos_per_row, len(rows)), M-RoPE's t, y, x, z rows)."""
        n = rows.shape[0]
        if not 0 < n <= self.capacity or rows.shape[1] != self.n_embd:
            raise ValueError(f"{rows.shape} embedding rows do not fit a batch of "
                             f"({self.capacity}, {self.n_embd})")
        self.embd[:n] = rows
        if positions is not None:
            if positions.shape != (self.n_pos_per_row, n):
                raise ValueError(f"positions {positions.shape} for {n} rows of {self.n_pos_per_row} each")
            self.pos[: self.n_pos_per_row * n] = positions.ravel()  # section-major over these n rows
        elif self.n_pos_per_row != 1:
            raise ValueError("an M-RoPE embedding batch needs each row's positions")
        else:
            self.pos[:n] = np.arange(position, position + n, dtype=np.int32)
        self.seq[:n] = seq
        self.logits[:n] = 0
        self.struct.n_tokens = n

    @property
    def n_tokens(self) -> int:
        return int(self.struct.n_tokens)
