"""GGUF weight matrices as the blocks ONNX Runtime's `MatMulNBits` reads, without requantizing.

Every supported GGUF block format is, per sub-block b of `block_size` weights along a row,

    w[n, b*bs + j] = scales[n, b] * (q[n, b, j] - zero) + mins[n, b]

with small unsigned integers q. `MatMulNBits` (domain com.microsoft) computes the part before
`+ mins` exactly from packed q, float32 scales and uint8 zero points; the `mins` part is a
per-block correction `sum_b mins[n, b] * sum_j x[b*bs + j]` (see `ort_graph.py`). So:

    Q4_0  4 bits, zero 8              Q4_1  4 bits, zero 8, mins m + 8d
    Q4_K  4 bits, zero 8, scales d*sc, mins 8*d*sc - dmin*m (sub-blocks of 32)
    Q8_0  8 bits, zero 128 (q = int8 + 128)
    Q5_0  8 bits, zero 16             Q5_1  8 bits, zero 16, mins m + 16d
    Q5_K  8 bits, zero 16, mins       Q6_K  8 bits, zero 32, block 16, scales d*sc

Scales are float16 (or float16 times a small integer) in the GGUF, exact in float32. Formats
with minimums (`d*q + m`) are re-centred on the middle zero point (`d*(q - 8) + (m + 8d)`): the
kernel quantizes activations to int8 per block, and an uncentred q (all >= 0) would turn that
rounding error into a bias the exact-sum correction no longer cancels (measured: 1.5x the
product's error). The float32 weights are the same up to one rounding of `m + 8d`.
F32, F16 and BF16 matrices have no block form: they stay `DenseMatrix` (float32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

QK_K = 256


@dataclass
class BlockMatrix:
    """A (n, k) matrix as MatMulNBits blocks (see the module docstring)."""

    bits: int  # 4 or 8
    block_size: int  # 16 or 32
    zero: int  # the format's zero point, the same for every block
    packed: np.ndarray  # (n, k/bs, bs*bits/8) uint8; 4 bits: element 2i low nibble, 2i+1 high
    scales: np.ndarray  # (n, k/bs) float32
    mins: np.ndarray | None = None  # (n, k/bs) float32, or None when the format has none

    @property
    def shape(self) -> tuple[int, int]:
        n, nb, _ = self.packed.shape
        return n, nb * self.block_size

    @property
    def kind(self) -> tuple[int, int, int, bool]:
        """Matrices of the same kind can be stacked into one kernel call."""
        return self.bits, self.block_size, self.zero, self.mins is not None

    def zero_points(self) -> np.ndarray:
        """MatMulNBits' uint8 zero points: (n, ceil(k/bs * bits/8))."""
        n, nb, _ = self.packed.shape
        if self.bits == 8:
            return np.full((n, nb), self.zero, np.uint8)
        return np.full((n, (nb + 1) // 2), self.zero | (self.zero << 4), np.uint8)

    def dequantize(self) -> np.ndarray:
        """The float32 (n, k) matrix these blocks stand for (tests, and the exactness check)."""
        q = unpack(self.packed, self.bits).astype(np.float32)  # (n, nb, bs)
        w = (q - np.float32(self.zero)) * self.scales[..., None]
        if self.mins is not None:
            w += self.mins[..., None]
        return w.reshape(self.shape)


@dataclass
class DenseMatrix:
    """A (n, k) float32 matrix (types without a block form)."""

    weight: np.ndarray  # (n, k) float32

    @property
    def shape(self) -> tuple[int, int]:
        return self.weight.shape  # type: ignore[return-value]

    @property
    def kind(self) -> tuple[str]:
        return ("dense",)

    def dequantize(self) -> np.ndarray:
        return self.weight


Matrix = BlockMatrix | DenseMatrix


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """(.., bs) uint8 values -> MatMulNBits blob bytes (.., bs*bits/8)."""
    if bits == 8:
        return np.ascontiguousarray(q, np.uint8)
    return np.ascontiguousarray(q[..., 0::2] | (q[..., 1::2] << np.uint8(4)), np.uint8)


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of `pack`."""
    if bits == 8:
        return packed
    return np.stack([packed & np.uint8(15), packed >> np.uint8(4)], axis=-1).reshape(
        *packed.shape[:-1], packed.shape[-1] * 2
    )


def _f16(raw: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte `at` of each block, as float32: (..., 1)."""
    return np.ascontiguousarray(raw[..., at : at + 2]).view(np.float16).astype(np.float32)


def _nibbles_split(qs: np.ndarray) -> np.ndarray:
    """GGUF's 4-bit order (low nibbles = first half, high = second half): (.., 2*len)."""
    return np.concatenate([qs & np.uint8(15), qs >> np.uint8(4)], axis=-1)


def _high_bits(qh: np.ndarray, n: int) -> np.ndarray:
    """Bit i of the little-endian uint32 `qh` (..., 4) for i < n: (..., n) uint8."""
    bits = np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")
    return bits[..., :n]


# Each decoder: raw blocks (rows, n_blocks, type_size) uint8 -> BlockMatrix.
def _split_to_packed(qs: np.ndarray) -> np.ndarray:
    """GGUF's 4-bit split order (byte j: element j in the low nibble, element j + 2m in the
    high one) -> MatMulNBits blob bytes, without unpacking to a byte per element: (.., 2m).

    Element pairs (2i, 2i+1) of the first half are the low nibbles of bytes 2i and 2i+1; those of
    the second half their high nibbles. Same bytes out as `pack(_nibbles_split(qs), 4)`.
    """
    even, odd = qs[..., 0::2], qs[..., 1::2]
    out = np.empty(qs.shape, np.uint8)
    half = qs.shape[-1] // 2
    lo, hi = out[..., :half], out[..., half:]
    np.left_shift(odd, 4, out=lo)
    lo |= even & np.uint8(15)
    np.right_shift(even, 4, out=hi)
    hi |= odd & np.uint8(0xF0)
    return out


def _q4_0(raw: np.ndarray) -> BlockMatrix:
    return BlockMatrix(4, 32, 8, _split_to_packed(raw[..., 2:18]), _f16(raw, 0)[..., 0])


def _centred(bits: int, bs: int, q: np.ndarray, scales: np.ndarray, mins: np.ndarray, zero: int) -> BlockMatrix:
    """d*q + m as d*(q - zero) + (m + zero*d) (see the module docstring)."""
    return BlockMatrix(bits, bs, zero, pack(q, bits), scales, mins + np.float32(zero) * scales)


def _q4_1(raw: np.ndarray) -> BlockMatrix:
    scales = _f16(raw, 0)[..., 0]
    return BlockMatrix(4, 32, 8, _split_to_packed(raw[..., 4:20]), scales,
                       _f16(raw, 2)[..., 0] + np.float32(8) * scales)


def _q8_0(raw: np.ndarray) -> BlockMatrix:
    q = (raw[..., 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return BlockMatrix(8, 32, 128, pack(q, 8), _f16(raw, 0)[..., 0])


def _q5_0(raw: np.ndarray) -> BlockMatrix:
    q = _nibbles_split(raw[..., 6:22]) | (_high_bits(raw[..., 2:6], 32) << np.uint8(4))
    return BlockMatrix(8, 32, 16, pack(q, 8), _f16(raw, 0)[..., 0])


def _q5_1(raw: np.ndarray) -> BlockMatrix:
    q = _nibbles_split(raw[..., 8:24]) | (_high_bits(raw[..., 4:8], 32) << np.uint8(4))
    return _centred(8, 32, q, _f16(raw, 0)[..., 0], _f16(raw, 2)[..., 0], 16)


def _k_scales(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: per-32 scales d*sc and mins -dmin*m: (rows, n_blocks*8) float32 each."""
    from gguf.quants import Q4_K

    rows, nsb, size = raw.shape
    sc, m = Q4_K.get_scale_min(np.ascontiguousarray(raw[..., 4:16]).reshape(-1, 12))
    d, dmin = _f16(raw, 0), _f16(raw, 2)  # (rows, nsb, 1)
    scales = d * sc.reshape(rows, nsb, 8).astype(np.float32)
    mins = -(dmin * m.reshape(rows, nsb, 8).astype(np.float32))
    return scales.reshape(rows, -1), mins.reshape(rows, -1)


def _q4_k_q(raw: np.ndarray, at: int) -> np.ndarray:
    """The 4-bit parts of a Q4_K/Q5_K super-block: (rows, nsb, 8, 32)."""
    qs = raw[..., at : at + 128].reshape(*raw.shape[:2], 4, 1, 32)
    q = (qs >> np.array([0, 4], np.uint8).reshape(2, 1)) & np.uint8(15)  # (r, nsb, 4, 2, 32)
    return q.reshape(*raw.shape[:2], 8, 32)


def _q4_k(raw: np.ndarray) -> BlockMatrix:
    scales, mins = _k_scales(raw)
    # Each 32-byte chunk holds sub-block 2c in its low nibbles and 2c+1 in its high ones: Q4_0's
    # split order over 64 elements, so the same repack yields sub-blocks 2c and 2c+1 in turn.
    rows, nsb, _ = raw.shape
    packed = _split_to_packed(raw[..., 16:144].reshape(rows, nsb, 4, 32))
    mins += np.float32(8) * scales  # re-centred on zero point 8 (see the module docstring)
    return BlockMatrix(4, 32, 8, packed.reshape(rows, nsb * 8, 16), scales, mins)


def _q5_k(raw: np.ndarray) -> BlockMatrix:
    scales, mins = _k_scales(raw)
    qh = raw[..., 16:48].reshape(*raw.shape[:2], 1, 32)
    hi = (qh >> np.arange(8, dtype=np.uint8).reshape(8, 1)) & np.uint8(1)  # (r, nsb, 8, 32)
    q = (_q4_k_q(raw, 48) | (hi << np.uint8(4))).reshape(raw.shape[0], -1, 32)
    return _centred(8, 32, q, scales, mins, 16)


def _q6_k(raw: np.ndarray) -> BlockMatrix:
    rows, nsb, _ = raw.shape
    ql = raw[..., 0:128].reshape(rows, nsb, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
    ql = (ql & np.uint8(15)).reshape(rows, nsb, 8, 32)
    qh = raw[..., 128:192].reshape(rows, nsb, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    qh = (qh & np.uint8(3)).reshape(rows, nsb, 8, 32)
    q = (ql | (qh << np.uint8(4))).reshape(rows, -1, 16)
    sc = raw[..., 192:208].view(np.int8).astype(np.float32)  # (rows, nsb, 16)
    scales = (_f16(raw, 208) * sc).reshape(rows, -1)
    return BlockMatrix(8, 16, 32, pack(q, 8), scales)


_DECODERS: dict[str, Callable[[np.ndarray], BlockMatrix]] = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q8_0": _q8_0, "Q5_0": _q5_0, "Q5_1": _q5_1,
    "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}
BLOCK_TYPES: tuple[str, ...] = tuple(_DECODERS)
"""GGUF types kept as blocks; every other supported type becomes a float32 DenseMatrix."""


_KINDS: dict[str, tuple[int, int, int, bool]] = {  # BlockMatrix.kind of each decoder's output
    "Q4_0": (4, 32, 8, False), "Q4_1": (4, 32, 8, True), "Q8_0": (8, 32, 128, False),
    "Q5_0": (8, 32, 16, False), "Q5_1": (8, 32, 16, True), "Q4_K": (4, 32, 8, True),
    "Q5_K": (8, 32, 16, True), "Q6_K": (8, 16, 32, False),
}


def tensor_kind(tensor: Any) -> tuple:
    """The `kind` the tensor's Matrix will have, without decoding it."""
    return _KINDS.get(tensor.tensor_type.name, ("dense",))


def tensor_rows(tensor: Any) -> int:
    """The number of rows (output features) of a GGUF 2-D weight tensor."""
    return int(tensor.shape.tolist()[-1])


def matrix_from_tensor(tensor: Any, rows: slice | np.ndarray = slice(None)) -> Matrix:
    """A GGUF 2-D weight tensor (rows = output features) as a BlockMatrix or DenseMatrix; only
    `rows` of it (a slice or index array) when given, so a big one is decoded piece by piece."""
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    n_rows, cols = (int(d) for d in reversed(tensor.shape.tolist()))
    decoder = _DECODERS.get(tensor.tensor_type.name)
    data = np.asarray(tensor.data)
    if decoder is None:
        data = data.reshape(n_rows, -1)[rows]
        w = dequantize(data, tensor.tensor_type)
        return DenseMatrix(np.ascontiguousarray(np.asarray(w, np.float32).reshape(len(data), cols)))
    block, size = GGML_QUANT_SIZES[tensor.tensor_type]
    raw = data.view(np.uint8).reshape(n_rows, cols // block, size)[rows]
    return decoder(raw)


def stack_rows(parts: list[Matrix]) -> list[Matrix]:
    """Stack consecutive matrices of the same kind along the rows (one kernel call for q|k|v
    or gate|up when their formats agree)."""
    out: list[Matrix] = []
    for m in parts:
        prev = out[-1] if out else None
        if prev is None or prev.kind != m.kind:
            out.append(m)
        elif isinstance(m, DenseMatrix):
            out[-1] = DenseMatrix(np.concatenate([prev.weight, m.weight]))
        else:
            assert isinstance(prev, BlockMatrix)
            out[-1] = BlockMatrix(
                m.bits, m.block_size, m.zero,
                np.concatenate([prev.packed, m.packed]), np.concatenate([prev.scales, m.scales]),
                None if m.mins is None else np.concatenate([prev.mins, m.mins]),  # type: ignore[list-item]
            )
    return out


def permute_rows(m: Matrix, perm: np.ndarray) -> Matrix:
    """The same matrix with its rows reordered (whole rows: blocks stay exact)."""
    if isinstance(m, DenseMatrix):
        return DenseMatrix(np.ascontiguousarray(m.weight[perm]))
    return BlockMatrix(m.bits, m.block_size, m.zero, np.ascontiguousarray(m.packed[perm]),
                       np.ascontiguousarray(m.scales[perm]),
                       None if m.mins is None else np.ascontiguousarray(m.mins[perm]))
