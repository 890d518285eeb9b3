"""A bounded reader of the GGUF header: metadata and tensor infos, checked before anything trusts them.

Every count and length in the file is checked against the bytes left *before* it is used, so a
hostile file (an array claiming 2^40 elements, a string longer than the file, a tensor of absurd
dimensions or offset) is refused at once with a `ModelFileError` that names the field or tensor
and what it claims. Nothing is allocated per claimed element: numeric arrays are copied in one
`numpy.frombuffer`, strings are read one by one from the memory map, so memory stays within a
small multiple of the file's size and time within a few seconds (`MAX_METADATA_STRINGS`).

This replaces `gguf.GGUFReader` for the header: that reader builds several numpy views per array
element (3 s and ~100 MB for SmolLM2's 147k tokenizer entries) and trusts every count it reads.
The `gguf` package still supplies the tensor types and their block sizes. It runs before
llama.cpp sees a file (`model.llamacpp.model`), which then reads the weights itself.
"""

from __future__ import annotations

import mmap
import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...engine.errors import EngineError
from .ggml_types import constants

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 2
MAX_METADATA_STRINGS = 1 << 22  # Llama-3 has ~410k (tokens + merges); 4M strings read in ~2 s

# GGUF value type -> (struct code, size); 8 = string, 9 = array
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
    6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8),
}
_NP_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
               10: "<u8", 11: "<i8", 12: "<f8"}
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
              6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
              12: "float64"}
_STRING, _ARRAY = 8, 9
_ABSURD_BYTES = 1 << 38  # 256 GiB: no GGUF TurboSpark could load is that large
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset


class ModelFileError(EngineError):
    """The model file cannot be used. `path` is the file, `reason` says why in plain words."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot load model file {self.path}: {reason}")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry; `dims` in GGUF order (innermost first), `offset` from data start."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int
    n_elements: int
    n_bytes: int

    @property
    def type_name(self) -> str:
        GGMLQuantizationType = constants().GGMLQuantizationType

        return GGMLQuantizationType(self.type_id).name


@dataclass
class GGUFHeader:
    """A validated GGUF header: metadata values, tensor infos, where the tensor data starts."""

    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int
    fields: dict[str, Any] = field(default_factory=dict)  # numeric arrays as numpy arrays
    field_types: dict[str, str] = field(default_factory=dict)  # e.g. "uint32", "array[string]"
    tensors: list[TensorInfo] = field(default_factory=list)

    def value(self, key: str, default: Any = None) -> Any:
        """A metadata value as str / int / float / bool, or a list for an array; `default` if absent."""
        if key not in self.fields:
            return default
        v = self.fields[key]
        if isinstance(v, LazyStrings):
            return list(v)
        return v.tolist() if isinstance(v, np.ndarray) else v


def _claim(count: int, what: str, per: int, left: int) -> str:
    """The message for a count or length that does not fit in the bytes left."""
    # A cut file and a corrupt count look alike, except when the claim is beyond any real file.
    kind = "corrupt header" if count * per > _ABSURD_BYTES else "truncated or corrupt header"
    unit = "bytes" if per == 1 else f"entries of at least {per} bytes"
    return f"{kind}: {what} claims {count:,} {unit}, but only {left:,} bytes are left in the file"


_U64 = struct.Struct("<Q")
_LAZY_STRINGS = 4096  # string arrays at least this long are decoded on first use


class LazyStrings(Sequence[str]):
    """A checked array of GGUF strings, decoded on first use (the whole list at once)."""

    def __init__(self, blob: bytes, offsets: "array[int]", base: int) -> None:
        self._blob, self._offsets, self._base = blob, offsets, base
        self._items: list[str] | None = None

    def _all(self) -> list[str]:
        if self._items is None:
            blob, base, offs = self._blob, self._base, self._offsets
            ends = [o - 8 - base for o in offs[1:]] + [len(blob)]
            self._items = [str(blob[o - base: e], "utf-8", "replace") for o, e in zip(offs, ends)]
            self._blob = b""
        return self._items

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, LazyStrings)) else NotImplemented

    def __repr__(self) -> str:
        return f"LazyStrings({len(self)} strings)"


class _Walk:
    """A cursor over the file's bytes; every read is checked against the end first."""

    def __init__(self, path: Path, data: Any, size: int) -> None:
        self.path, self.data, self.size, self.pos = path, data, size, 0
        self.where = "the file header"
        self.strings = 0

    def fail(self, reason: str) -> ModelFileError:
        return ModelFileError(self.path, reason)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int) -> int:
        """Advance by n bytes; return where they start."""
        if n > self.left:
            raise self.fail(f"truncated file: the header ends early, inside {self.where} "
                            f"({self.size:,} bytes)")
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, vtype: int) -> Any:
        code, n = _SCALARS[vtype]
        return struct.unpack_from("<" + code, self.data, self.take(n))[0]

    def count(self, what: str, per: int) -> int:
        """A u64 count of items at least `per` bytes each, checked against the bytes left."""
        n = self.scalar(10)
        if n * per > self.left:
            raise self.fail(_claim(n, what, per, self.left))
        return n

    def string(self, what: str) -> str:
        n = self.count(what, 1)
        start = self.take(n)
        return str(self.data[start : start + n], "utf-8", "replace")

    def skim_strings(self, n: int, what: str) -> "LazyStrings":
        """`n` strings checked as `string` checks each (lengths within the file), decoded only
        when asked: a vocabulary's 49k-256k tokens and merges were most of a header walk, and a
        warm open reads neither (its tokenizer comes from the cache)."""
        data, pos, size = self.data, self.pos, self.size
        unpack = _U64.unpack_from
        offsets = array("Q")
        add = offsets.append
        for i in range(n):
            if size - pos < 8:
                self.pos = pos
                self.where = f"{what} element {i}"
                self.take(8)  # raises: the header ends early
            (length,) = unpack(data, pos)
            pos += 8
            if length > size - pos:
                self.pos = pos
                raise self.fail(_claim(length, f"{what} element {i}", 1, size - pos))
            add(pos)
            pos += length
        start, self.pos = (offsets[0] - 8 if n else self.pos), pos
        blob = bytes(data[start:pos])
        return LazyStrings(blob, offsets, start)

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype == _STRING:
            return self.string(what)
        if vtype != _ARRAY:
            raise self.fail(f"corrupt header: {what} has unknown value type {vtype}")
        item = self.scalar(4)
        if item not in TYPE_NAMES:
            raise self.fail(f"corrupt header: {what} is an array of unknown value type {item}")
        if item == _ARRAY and depth + 1 >= MAX_ARRAY_NESTING:
            raise self.fail(f"corrupt header: {what} nests arrays deeper than {MAX_ARRAY_NESTING}")
        per = _SCALARS[item][1] if item in _SCALARS else 8 if item == _STRING else 12
        n = self.count(f"{what} (array of {TYPE_NAMES[item]})", per)
        if item in _SCALARS:
            start = self.take(n * per)
            return np.frombuffer(self.data, _NP_SCALARS[item], n, start).copy()
        if item == _STRING:
            self.strings += n
            if self.strings > MAX_METADATA_STRINGS:
                raise self.fail(f"corrupt header: {what} holds {n:,} strings; TurboSpark reads at "
                                f"most {MAX_METADATA_STRINGS:,} metadata strings in a file")
            if n >= _LAZY_STRINGS:
                return self.skim_strings(n, what)
            return [self.string(f"{what} element {i}") for i in range(n)]
        return [self.value(item, f"{what} element {i}", depth + 1) for i in range(n)]


_NP_NAMES = {np.dtype(code): TYPE_NAMES[vtype] for vtype, code in _NP_SCALARS.items()}


def _type_label(vtype: int, v: Any) -> str:
    if vtype != _ARRAY:
        return TYPE_NAMES[vtype]
    if isinstance(v, np.ndarray):
        return f"array[{_NP_NAMES[v.dtype]}]"
    if isinstance(v, LazyStrings):
        return "array[string]"
    return "array[string]" if v and isinstance(v[0], str) else "array"


def _tensor_info(w: _Walk, index: int) -> TensorInfo:
    GGML_QUANT_SIZES, GGMLQuantizationType = constants().GGML_QUANT_SIZES, constants().GGMLQuantizationType

    w.where = f"tensor info #{index}"
    name = w.string(f"the name of tensor #{index}")
    w.where = f"tensor info {name!r}"
    n_dims = w.scalar(4)
    if not 1 <= n_dims <= MAX_DIMS:
        raise w.fail(f"corrupt header: tensor {name!r} claims {n_dims:,} dimensions "
                     f"(GGUF allows 1 to {MAX_DIMS})")
    dims = tuple(w.scalar(10) for _ in range(n_dims))
    type_id, offset = w.scalar(4), w.scalar(10)
    try:
        qtype = GGMLQuantizationType(type_id)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise w.fail(f"unsupported tensor type (unknown GGML type id {type_id} for {name!r})") from None
    if 0 in dims:
        raise w.fail(f"corrupt header: tensor {name!r} has a zero dimension {list(dims)}")
    if dims[0] % block:
        raise w.fail(f"corrupt header: tensor {name!r} has first dimension {dims[0]:,}, not a "
                     f"multiple of {qtype.name}'s block of {block}")
    n_elements = 1
    for d in dims:
        n_elements *= d
    n_bytes = n_elements // block * type_size
    if n_bytes > _ABSURD_BYTES:
        raise w.fail(f"corrupt header: tensor {name!r} claims dimensions {list(dims)} of "
                     f"{qtype.name} = {n_bytes:,} bytes, far more than any model file "
                     f"(this one has {w.size:,} bytes)")
    return TensorInfo(name, dims, type_id, offset, n_elements, n_bytes)


def _check_layout(w: _Walk, header: GGUFHeader) -> None:
    """Tensor data: aligned, inside the file, not overlapping. Tensors written back to back that
    run past the end mean a cut file; one that jumps past the end claims an absurd offset."""
    room = header.file_size - header.data_offset
    end, prev, align = 0, None, header.alignment
    for t in sorted(header.tensors, key=lambda t: t.offset):
        if t.offset % header.alignment:
            raise w.fail(f"corrupt header: tensor {t.name!r} offset {t.offset:,} is not a "
                         f"multiple of the alignment {header.alignment}")
        if prev is not None and t.offset < end:
            raise w.fail(f"corrupt header: tensors {prev.name!r} and {t.name!r} overlap "
                         f"(offset {t.offset:,} < {end:,})")
        if t.offset + t.n_bytes > room and t.offset > -(-end // align) * align:
            raise w.fail(f"corrupt header: tensor {t.name!r} claims offset {t.offset:,}, past the "
                         f"end of the {header.file_size:,}-byte file (the tensor before it ends at "
                         f"{end:,})")
        if t.offset + t.n_bytes > room:
            raise w.fail(f"truncated file: tensor {t.name!r} ({t.n_bytes:,} bytes at offset "
                         f"{t.offset:,}) ends past the end of the tensor data ({max(room, 0):,} "
                         f"bytes in a {header.file_size:,}-byte file)")
        end, prev = t.offset + t.n_bytes, t


def check_magic(path: Path) -> int:
    """Raise ModelFileError unless `path` is a readable file starting with b"GGUF"; return its size."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError:
        raise ModelFileError(path, "file not found") from None
    except IsADirectoryError:
        raise ModelFileError(path, "is a directory, not a GGUF file") from None
    except OSError as exc:
        raise ModelFileError(path, f"cannot read the file ({exc.strerror or exc})") from None
    if len(magic) < 4:
        raise ModelFileError(path, f"not a GGUF file: only {size} bytes (truncated or empty)")
    if magic != GGUF_MAGIC:
        raise ModelFileError(path, f"not a GGUF file (bad magic {magic!r}, expected b'GGUF')")
    return size


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read and check the header of a GGUF file; raises ModelFileError naming what is wrong."""
    path = Path(path)
    size = check_magic(path)
    try:
        with path.open("rb") as fh:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise ModelFileError(path, f"cannot read the file ({exc})") from None
    try:
        return _walk(path, data, size)
    finally:
        data.close()


def read_header_prefix(name: str, data: bytes, file_size: int) -> GGUFHeader:
    """Read the header of a GGUF of `file_size` bytes from its first bytes `data` (a ranged
    download: nothing else of the file is here). The same checks as `read_header`, each count
    bounded by the bytes at hand; the tensor layout is checked against `file_size`. A prefix that
    ends inside the header raises ModelFileError "truncated file: the header ends early" (the
    caller fetches more)."""
    if data[:4] != GGUF_MAGIC:
        raise ModelFileError(name, f"not a GGUF file (bad magic {bytes(data[:4])!r}, expected b'GGUF')")
    return _walk(Path(name), data, len(data), file_size)


def _walk(path: Path, data: Any, size: int, file_size: int | None = None) -> GGUFHeader:
    w = _Walk(path, data, size)
    w.take(4)
    version = w.scalar(4)
    if version not in SUPPORTED_VERSIONS:
        raise w.fail(f"unsupported GGUF version {version} (TurboSpark reads versions 2 and 3)")
    n_tensors = w.scalar(10)
    n_kv = w.count("the metadata count", _MIN_KV_BYTES)
    if n_tensors * _MIN_TENSOR_BYTES > w.left:
        raise w.fail(_claim(n_tensors, "the tensor count", _MIN_TENSOR_BYTES, w.left))
    header = GGUFHeader(path, size if file_size is None else file_size, version, DEFAULT_ALIGNMENT, 0)
    for i in range(n_kv):
        w.where = f"metadata entry #{i}"
        key = w.string(f"the key of metadata entry #{i}")
        w.where = f"metadata {key!r}"
        if key in header.fields:
            raise w.fail(f"corrupt header: metadata key {key!r} appears twice")
        vtype = w.scalar(4)
        value = w.value(vtype, f"metadata {key!r}")
        header.fields[key] = value
        header.field_types[key] = _type_label(vtype, value)
    if n_tensors * _MIN_TENSOR_BYTES > w.left:
        raise w.fail(_claim(n_tensors, "the tensor count", _MIN_TENSOR_BYTES, w.left))
    names: set[str] = set()
    for i in range(n_tensors):
        info = _tensor_info(w, i)
        if info.name in names:
            raise w.fail(f"corrupt header: tensor {info.name!r} appears twice")
        names.add(info.name)
        header.tensors.append(info)
    if "general.alignment" in header.fields:
        align = header.fields["general.alignment"]
        if header.field_types["general.alignment"] != "uint32" or align <= 0 or align & (align - 1):
            raise w.fail(f"corrupt header: 'general.alignment' = {align!r} "
                         "(must be a power of two, as uint32)")
        header.alignment = int(align)
    header.data_offset = -(-w.pos // header.alignment) * header.alignment
    _check_layout(w, header)
    return header
