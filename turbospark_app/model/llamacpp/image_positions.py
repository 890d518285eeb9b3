"""Positions versus cells once images are in a sequence (llama.cpp's rules, mtmd.cpp and
llama-batch.cpp at the vendored commit).

A text token takes one KV cell and one position. An image chunk takes `n_tokens` cells and
advances the position by `n_pos`: the same for most projectors, but for M-RoPE ones (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL: the text model's rope type is M-RoPE) an image of nx x ny merged patches
takes nx * ny cells and only max(nx, ny) positions. Each of its rows carries four positions,
section-major in the batch (`pos[j * n + i]`, j = t, y, x, z: mtmd-helper's
`set_position_mrope_2d`): t = the image's first position for every row, x = pos_0 + column,
y = pos_0 + row, z = 0 (`mtmd_image_tokens_get_decoder_pos`). The KV cells keep section t, so
after such an image `seq_pos_max` is pos_0, not pos_0 + n_pos - 1, and the next text token goes
at pos_0 + n_pos (llama.cpp lets M-RoPE positions jump forward).

So the producer's cursor (cells: the token mirror's length) and the next position differ by the
SHIFT: the sum of (n_pos - n_tokens) over the images before the cursor, 0 without M-RoPE. The
rows' positions the producer hands llama.cpp are libmtmd's own (`Projector.positions`, which
also covers layouts other than Qwen-VL's grid); `mrope_positions` is the same arithmetic written
out, and the tests hold the two equal.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np


class Span(Protocol):
    """An image chunk as the arithmetic needs it (`vision.ImageSegment`)."""

    @property
    def n_tokens(self) -> int: ...

    @property
    def n_pos(self) -> int: ...

    @property
    def nx(self) -> int: ...


def mrope_positions(pos_0: int, nx: int, n_tokens: int) -> np.ndarray:
    """The (4, n_tokens) int32 positions of an M-RoPE image starting at `pos_0` whose merged
    patch grid is `nx` wide: rows t, y, x, z (the batch's section order)."""
    if nx < 1 or n_tokens % nx:
        raise ValueError(f"an M-RoPE image of {n_tokens} tokens is not rows of {nx}")
    i = np.arange(n_tokens, dtype=np.int32)
    return np.stack([np.full(n_tokens, pos_0, np.int32), pos_0 + i // nx, pos_0 + i % nx,
                     np.zeros(n_tokens, np.int32)])


def shift_of(ids: Sequence[int], segment: Callable[[int], Span | None]) -> int | None:
    """Positions minus cells after `ids` (the images' n_pos - n_tokens, summed); None when a
    negative id does not start an image chunk `segment` knows (its positions are unknown)."""
    shift, i, n = 0, 0, len(ids)
    while i < n:
        if ids[i] >= 0:
            i += 1
            continue
        span = segment(ids[i])
        if span is None or i + span.n_tokens > n:
            return None
        shift += span.n_pos - span.n_tokens
        i += span.n_tokens
    return shift
