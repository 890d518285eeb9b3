"""Every tensor type TurboSpark claims, dequantized through a real GGUF file."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from model_reference import ref_dequantize
from tiny_gguf import encode_tensor

from turbospark_app.model.gguf.file import _supported_types
from turbospark_app.model.reference.weights import dequantize_tensor

CLAIMED = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


def test_claimed_types_are_the_supported_set() -> None:
    assert sorted(t.name for t in _supported_types()) == sorted(CLAIMED)


@pytest.mark.parametrize("qtype", CLAIMED)
def test_dequantize_matches_reference(qtype: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = rng.standard_normal((3, 512)).astype(np.float32)
    arr, raw_dtype = encode_tensor(values, qtype, rng)
    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("t", arr, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tensor = gguf.GGUFReader(path).tensors[0]
    assert tensor.tensor_type.name == qtype
    ours = dequantize_tensor(tensor)
    assert ours.dtype == np.float32 and ours.shape == (3, 512)
    raw = arr.view(np.uint8) if raw_dtype is not None else arr
    expected = ref_dequantize(raw, qtype, (3, 512)) if raw_dtype is not None else arr.astype(np.float64)
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-7)
    if qtype not in ("Q4_K", "Q5_K", "Q6_K"):  # quantized from `values`: close to them
        step = {"F32": 0, "F16": 1e-3, "BF16": 1e-2, "Q8_0": 0.03, "Q5_0": 0.2, "Q5_1": 0.2,
                "Q4_0": 0.4, "Q4_1": 0.4}[qtype]
        assert np.abs(ours - values).max() <= step * np.abs(values).max() + 1e-7


def _block(size: int, **fields: tuple[int, bytes]) -> np.ndarray:
    b = np.zeros(size, np.uint8)
    for offset, data in fields.values():
        b[offset : offset + len(data)] = np.frombuffer(data, np.uint8)
    return b


def _half(x: float) -> bytes:
    return np.float16(x).tobytes()


def test_k_quant_reference_known_answers() -> None:
    """The reference dequantizer itself, on hand-made blocks (the K-quants have no quantizer)."""
    # Q4_K: d=1, dmin=0.5; sub-block scale 1 and min 2 everywhere; nibbles lo=1, hi=2.
    scales = bytes([1, 1, 1, 1, 2, 2, 2, 2, 0x21, 0x21, 0x21, 0x21])
    q4k = _block(144, d=(0, _half(1.0)), dmin=(2, _half(0.5)), sc=(4, scales),
                 qs=(16, bytes([0x21]) * 128))
    y = ref_dequantize(q4k, "Q4_K", (256,))
    np.testing.assert_array_equal(y.reshape(4, 2, 32)[:, 0], 1 * 1 - 0.5 * 2)
    np.testing.assert_array_equal(y.reshape(4, 2, 32)[:, 1], 1 * 2 - 0.5 * 2)
    # Q5_K: as Q4_K plus the high bit set for the first sub-block pair only (qh bits 0 and 1).
    q5k = _block(176, d=(0, _half(1.0)), dmin=(2, _half(0.0)), sc=(4, scales),
                 qh=(16, bytes([0b11]) * 32), qs=(48, bytes([0x21]) * 128))
    y = ref_dequantize(q5k, "Q5_K", (256,)).reshape(4, 2, 32)
    np.testing.assert_array_equal(y[0, 0], 17)
    np.testing.assert_array_equal(y[0, 1], 18)
    np.testing.assert_array_equal(y[1:, 0], 1)
    # Q6_K: d=0.25, scales 2; 6-bit values 33 (ql nibble 1, qh bits 2 -> 1 + 32) -> (33-32)*2*0.25.
    q6k = _block(210, ql=(0, bytes([0x11]) * 128), qh=(128, bytes([0b10101010]) * 64),
                 sc=(192, bytes([2]) * 16), d=(208, _half(0.25)))
    np.testing.assert_array_equal(ref_dequantize(q6k, "Q6_K", (256,)), 0.5)
    # and gguf's dequantizer (what the app uses) agrees on these blocks
    from gguf.quants import dequantize

    for raw, name in ((q4k, "Q4_K"), (q5k, "Q5_K"), (q6k, "Q6_K")):
        got = dequantize(raw.reshape(1, -1), gguf.GGMLQuantizationType[name]).reshape(-1)
        np.testing.assert_array_equal(got, ref_dequantize(raw, name, (256,)))
