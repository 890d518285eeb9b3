"""Where the counts, lengths, types and offsets of a GGUF header are, for mutation tests.

`header_sites(path)` reads a *good* file with gguf's own `GGUFReader` (not the code under test)
and lists every integer field of the header a hostile file could lie in: `Site(offset, fmt,
kind, label)`. `mutated(data, site, value)` returns the file's bytes with that field replaced.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import gguf
import numpy as np

_FMT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


@dataclass(frozen=True)
class Site:
    offset: int
    fmt: str  # struct format of the field ("<I" u32, "<Q" u64)
    kind: str  # "count" (a length / count / dimension), "type" or "offset"
    label: str


def header_sites(path: str) -> list[Site]:
    """Every count, length, type and offset in the header of the GGUF at `path`."""
    reader = gguf.GGUFReader(path, "r")
    base = reader.data.ctypes.data
    sites: list[Site] = []

    def add(part: np.ndarray, kind: str, label: str, index: int = 0) -> None:
        size = part.dtype.itemsize
        sites.append(Site(part.ctypes.data - base + index * size, _FMT[size], kind, label))

    sites.append(Site(4, "<I", "type", "GGUF version"))
    sites.append(Site(8, "<Q", "count", "tensor count"))
    sites.append(Site(16, "<Q", "count", "metadata count"))
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        parts = field.parts
        add(parts[0], "count", f"{name}: key length")
        add(parts[2], "type", f"{name}: value type")
        if field.types[0] == gguf.GGUFValueType.STRING:
            add(parts[3], "count", f"{name}: string length")
        elif field.types[0] == gguf.GGUFValueType.ARRAY:
            add(parts[3], "type", f"{name}: array item type")
            add(parts[4], "count", f"{name}: array length")
            if field.types[-1] == gguf.GGUFValueType.STRING:
                for i in (5, len(parts) - 2):  # first and last string lengths
                    add(parts[i], "count", f"{name}: string length in array")
    for t in reader.tensors:
        name_len, _name, n_dims, dims, dtype, offset = t.field.parts
        add(name_len, "count", f"{t.name}: name length")
        add(n_dims, "count", f"{t.name}: dimension count")
        for i in range(len(dims)):
            add(dims, "count", f"{t.name}: dimension {i}", i)
        add(dtype, "type", f"{t.name}: tensor type")
        add(offset, "offset", f"{t.name}: data offset")
    return sites


def mutated(data: bytes, site: Site, value: int) -> bytes:
    """`data` with the field at `site` set to `value` (wrapped to the field's width)."""
    width = struct.calcsize(site.fmt)
    packed = struct.pack(site.fmt, value % (1 << (8 * width)))
    return data[: site.offset] + packed + data[site.offset + width :]


def site_named(sites: list[Site], label: str) -> Site:
    return next(s for s in sites if s.label == label)
