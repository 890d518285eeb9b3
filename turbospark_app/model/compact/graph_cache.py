"""The serialized forward graph, kept in the weight cache entry so a warm open skips building it.

Building the graph (`graph.build_model_proto`) imports `onnx` (~0.5-0.9 s here, most of it its
`ml_dtypes` extension) and walks every layer in Python; a warm open then paid ~1 s before ONNX
Runtime even started. The proto holds no weights (they are external data in the entry's .npy
files) and depends only on the entry's content (content-keyed: config and layout), the kernel
mode, the local-RoPE flag and the graph code, so it is saved once per mode under
`<entry>/graphs/<key>.onnx` and read back on later opens.

Never silently wrong: each file carries a BLAKE2b digest of the proto in its first bytes and is
checked on every read (the proto is ~100-300 KB: microseconds); a file that fails the check, is
truncated or unreadable is removed and the graph built again. It lives in a subfolder because the
entry's own `checksums.json` lists its top-level files and counts an extra one as damage.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

FOLDER = "graphs"
_MAGIC = b"TSG1"
_DIGEST = 32
_SOURCES = ("graph.py",)  # the code that decides the proto's bytes (besides the entry's layout)


def _code_digest() -> str:
    """What the graph code is: the builder's source (a frozen app without sources: its version)."""
    h = hashlib.blake2b(digest_size=16)
    here = Path(__file__).resolve().parent
    for name in _SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            from ... import __version__

            h.update(f"{name}@{__version__}".encode())
    h.update(_onnx_version().encode())
    return h.hexdigest()


def _onnx_version() -> str:
    """onnx's version without importing it (~0.5 s) or scanning every installed distribution's
    metadata (`importlib.metadata`, ~25 ms of a warm open): its .dist-info folder's name."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("onnx")
        if spec is not None and spec.origin is not None:
            names = sorted(p.name for p in Path(spec.origin).parent.parent.glob("onnx-*.dist-info"))
            if names:
                return names[-1]
        from importlib.metadata import version

        return version("onnx")
    except Exception:  # a frozen app without metadata: the app version (in _code_digest) pins it
        return ""


_CODE: str | None = None


def graph_key(kernels: str, local_rope: bool) -> str:
    """The file name stem for one kernel mode's graph of an entry: `<code digest>-<mode>-<0|1>`."""
    global _CODE
    if _CODE is None:
        _CODE = _code_digest()
    return f"{_CODE[:16]}-{kernels}-{int(local_rope)}"


def _prune(folder: Path, keep: Path) -> None:
    """Remove graphs another version of the graph code wrote (other modes of this code stay)."""
    code = keep.name.split("-", 1)[0]
    for old in folder.glob("*.onnx"):
        if not old.name.startswith(code + "-"):
            old.unlink(missing_ok=True)


def _read(path: Path) -> bytes | None:
    """The proto in `path` when its digest holds; None when absent; a damaged file is removed."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cached graph %s is unreadable (%s); building it again", path, exc)
        return None
    head = len(_MAGIC) + _DIGEST
    proto = blob[head:]
    if blob[: len(_MAGIC)] == _MAGIC and blob[len(_MAGIC):head] == hashlib.blake2b(proto, digest_size=_DIGEST).digest():
        return proto
    log.warning("cached graph %s fails its checksum; building it again", path)
    path.unlink(missing_ok=True)
    return None


def _write(path: Path, proto: bytes) -> None:
    """Write atomically (temp file, rename): a reader sees a whole file or none. Best effort."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(_MAGIC + hashlib.blake2b(proto, digest_size=_DIGEST).digest() + proto)
        os.replace(tmp, path)
        _prune(path.parent, path)
    except OSError as exc:  # read-only or full cache: the next open builds it again
        log.info("cannot save the graph in %s (%s)", path.parent, exc)
        tmp.unlink(missing_ok=True)


def cached_proto(entry: Path | None, kernels: str, local_rope: bool,
                 build: Callable[[], bytes]) -> tuple[bytes, bool]:
    """(the serialized graph, whether it came from the cache): read from `entry` when saved and
    whole, else `build()` and save it (no entry: built every time)."""
    if entry is None:
        return build(), False
    path = entry / FOLDER / f"{graph_key(kernels, local_rope)}.onnx"
    proto = _read(path)
    if proto is not None:
        return proto, True
    proto = build()
    _write(path, proto)
    return proto, False
