"""GGUF blocks -> MatMulNBits blocks: the same floats as gguf-py's dequantizer (bit for bit
without minimums; within one float32 rounding of the re-centred minimum with them)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from turbospark_app.model.gguf.quant_blocks import (
    _DECODERS,
    BLOCK_TYPES,
    BlockMatrix,
    DenseMatrix,
    pack,
    permute_rows,
    stack_rows,
    unpack,
)

# Byte offsets of each format's float16 fields (scale d, then min/dmin when present).
_F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q5_0": (0,), "Q5_1": (0, 2),
               "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_blocks(qtype: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random raw blocks with finite, varied float16 scales: (rows, cols/block, type_size)."""
    rng = np.random.default_rng(seed)
    block, size = gguf.GGML_QUANT_SIZES[Q[qtype]]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for at in _F16_FIELDS[qtype]:
        vals = (rng.standard_normal(raw.shape[:2]) * 0.01).astype(np.float16)
        raw[..., at : at + 2] = vals.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw


@pytest.mark.parametrize("qtype", BLOCK_TYPES)
def test_blocks_reproduce_gguf_exactly(qtype: str) -> None:
    rows, cols = 6, 512
    raw = random_blocks(qtype, rows, cols)
    m = _DECODERS[qtype](raw)
    expected = gguf.quants.dequantize(raw.reshape(rows, -1), Q[qtype]).reshape(rows, cols)
    assert m.shape == (rows, cols)
    assert m.scales.dtype == np.float32 and m.packed.dtype == np.uint8
    got, want = m.dequantize(), expected.astype(np.float32)
    if m.mins is None:
        np.testing.assert_array_equal(got, want)
    else:  # d*(q-8) + (m+8d) vs d*q + m: one extra rounding, a few ulps of the block's range
        ulp = np.spacing(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * ulp)
        assert m.zero == (8 if m.bits == 4 else 16)
    assert not np.array_equal(got, np.zeros_like(got))


def test_pack_roundtrip_and_layout() -> None:
    q = np.arange(32, dtype=np.uint8).reshape(1, 1, 32) % 16
    p = pack(q, 4)
    assert p.shape == (1, 1, 16) and p[0, 0, 0] == (0 | 1 << 4)  # element 0 low, 1 high
    np.testing.assert_array_equal(unpack(p, 4), q)
    np.testing.assert_array_equal(unpack(pack(q, 8), 8), q)


def test_stack_and_permute_keep_values() -> None:
    a, b = _DECODERS["Q4_1"](random_blocks("Q4_1", 4, 64, 1)), _DECODERS["Q4_1"](random_blocks("Q4_1", 3, 64, 2))
    c = _DECODERS["Q4_0"](random_blocks("Q4_0", 2, 64, 3))
    d = DenseMatrix(np.ones((2, 64), np.float32))
    stacked = stack_rows([a, b, c, d])
    assert [type(m).__name__ for m in stacked] == ["BlockMatrix", "BlockMatrix", "DenseMatrix"]
    np.testing.assert_array_equal(
        stacked[0].dequantize(), np.concatenate([a.dequantize(), b.dequantize()])
    )
    perm = np.array([3, 0, 2, 1])
    np.testing.assert_array_equal(permute_rows(a, perm).dequantize(), a.dequantize()[perm])
    assert isinstance(stacked[1], BlockMatrix) and stacked[1].zero_points().shape == (2, 1)
