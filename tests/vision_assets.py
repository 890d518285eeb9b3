"""Images and projector files the vision tests share (not imported by the app): PNGs drawn with
Qt, hostile files built byte by byte, and the synthetic mmproj of benchmarks/synthetic_mmproj.py."""

from __future__ import annotations

import importlib.util
import struct
import zlib
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_mmproj", Path(__file__).parent.parent / "benchmarks" / "synthetic_mmproj.py")
synthetic_mmproj = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(synthetic_mmproj)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int = 48, height: int = 40, seed: int = 0) -> bytes:
    """An RGB gradient PNG (zlib only: the same bytes everywhere); `seed` shifts the colours."""
    rows = b"".join(
        b"\x00" + b"".join(bytes(((x * 5 + seed * 97) % 256, (y * 6 + seed * 31) % 256, (x * y + seed) % 256))
                           for x in range(width))
        for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b"")


def huge_declared_png() -> bytes:
    """A PNG header declaring 30,000 x 30,000 pixels (its data is a few bytes)."""
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + _chunk(b"IEND", b"")


def animated_gif() -> bytes:
    """A 1 x 1 GIF with two frames."""
    frame = (b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # graphic control: 0.1 s
             b"\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00"  # image descriptor 1 x 1
             b"\x02\x02\x44\x01\x00")  # LZW min size 2, one sub-block, end
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    return (b"GIF89a\x01\x00\x01\x00\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff" + loop
            + frame + frame + b"\x3b")


def mmproj_for(model: Path, out: Path, projector: str | None = None) -> Path:
    """The synthetic projector for `model` (its width; mlp, or gemma3 for a gemma3 model)."""
    args = [str(model), str(out)] + (["--projector", projector] if projector else [])
    synthetic_mmproj.main(args)
    return out


def vision_pair(folder: Path, model: Path) -> Path:
    """`folder` holding a link to `model` and its synthetic mmproj beside it; the link's path."""
    link = folder / model.name
    link.symlink_to(model)
    mmproj_for(model, folder / "mmproj-SmolLM2-135M-synthetic.gguf")
    return link
