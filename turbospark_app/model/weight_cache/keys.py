"""The content key of a GGUF: what its cache entries are named by, independent of its path.

A full hash of a 700 MB file costs ~1 s with sha256 (SHA-NI; 2.9 s with BLAKE2b) on this
machine's loaded cores, on every load, before a single weight is mapped; and more when the file
is not in the page cache. The key hashes instead the file size, its first and last 4 MiB (the
GGUF header: every metadata value and tensor info for typical models, and the last tensors) and
256 samples of 16 KiB spread evenly over the rest: ~12 MiB read, ~20 ms. Two different models
(another fine-tune, another quantization) differ in the header or in nearly every block of
their tensors, so they differ in the samples; only a file edited in place between the samples
at the same size would collide. `benchmarks/bench_cache.py` prints both timings.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

EDGE_BYTES = 4 << 20
SAMPLES = 256
SAMPLE_BYTES = 16 << 10
KEY_VERSION = b"turbospark-gguf-key-1"


def sample_offsets(size: int) -> list[int]:
    """Where the samples are read: evenly spaced between the two edges (empty for small files)."""
    lo, hi = EDGE_BYTES, size - EDGE_BYTES - SAMPLE_BYTES
    if hi <= lo:
        return []
    step = (hi - lo) / (SAMPLES - 1)
    return [lo + int(i * step) for i in range(SAMPLES)]


def content_key(path: str | os.PathLike[str]) -> str:
    """A 24-hex-digit key of the GGUF's content (see the module docstring for what it reads)."""
    h = hashlib.sha256(KEY_VERSION)
    with Path(path).open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h.update(size.to_bytes(8, "little"))
        if size <= 2 * EDGE_BYTES:
            h.update(fh.read())  # a small file is hashed whole
            return h.hexdigest()[:24]
        h.update(fh.read(EDGE_BYTES))
        for offset in sample_offsets(size):
            fh.seek(offset)
            h.update(fh.read(SAMPLE_BYTES))
        fh.seek(size - EDGE_BYTES)
        h.update(fh.read(EDGE_BYTES))
    return h.hexdigest()[:24]


def full_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of the whole file (what a complete content key would cost; the benchmark's
    comparison)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()
