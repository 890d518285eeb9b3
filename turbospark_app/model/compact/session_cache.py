"""ONNX Runtime's prepacked weights, saved beside the weight cache and memory-mapped on load.

Making a session prepacks every weight matrix into the kernel library's own layout (most of a
warm load) on the heap. The first load of a cached model therefore also saves the session's
graph with its prepacked blobs (`session.save_external_prepacked_constant_initializers`) into
`<cache entry>/ort-<key>/`; later loads open that model, and ONNX Runtime memory-maps the blobs
instead of prepacking: a faster warm load, and weights as clean file-backed pages the system
can page out (as llama.cpp maps its GGUF) instead of private memory.

The blobs are specific to the ONNX Runtime version and to the CPU kernels it picked, so the
folder's key covers both, the kernel mode and the graph itself; anything that fails to load is
removed and the session is made from the graph again. Each saved session carries its own
`checksums.json` (model.onnx.data included): a mapped one is verified like the weights before
the first token (`cache_integrity`), is leased while the session lives and is evicted on its
own, least recently used first, under the cache budget (`weight_cache.store`). How many
sessions a model keeps is a setting (`weight_cache.budget.session_policy`): none (the default:
no session saved, a prepack on every load, ~1.1x the GGUF on disk instead of 3.6x per mode
kept; measured as fast here), the current kernel mode's, or every mode used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import uuid
from pathlib import Path
from typing import Any

from ..cache_integrity import (
    forget_early,
    note_warm_part,
    verify_early,
    write_checksums,
)
from ..weight_cache import budget, leases, store, usage
from .graph import make_session, session_options

log = logging.getLogger(__name__)

_MODEL = "model.onnx"
_DATA = "model.onnx.data"
_MANIFEST = "manifest.json"


def _cpu_identity() -> str:
    """The CPU as the kernel library sees it: model name and feature flags."""
    if platform.system() == "Linux":
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                lines = [ln for ln in fh if ln.startswith(("model name", "flags", "Features", "CPU part"))]
            return "".join(sorted(set(lines)))
        except OSError:
            pass
    return f"{platform.machine()} {platform.processor()} {platform.platform()}"


def cache_key(proto: bytes, kernels: str, threads: int) -> str:
    """What the saved session depends on: graph, kernel mode, threads, library version, CPU."""
    import onnxruntime

    h = hashlib.blake2b(digest_size=10)
    for part in (onnxruntime.__version__, kernels, str(threads), _cpu_identity()):
        h.update(part.encode() + b"\0")
    h.update(proto)
    return h.hexdigest()


def _load_saved(folder: Path, threads: int) -> Any | None:
    """The saved session in `folder`, or None when there is none or it is not whole."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if (folder / _DATA).stat().st_size != manifest["data_bytes"]:
            raise ValueError("data file size differs from the manifest")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import onnxruntime as ort

    so = session_options(None, threads)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # saved optimized
    return make_session(str(folder / _MODEL), None, so=so)


def _prune(entry: Path, keep: Path | None, count: int) -> None:
    """Keep `count` saved sessions of `entry` (`keep` and the newest), remove the rest; one a
    running model maps stays. `count` comes from the session policy (weight_cache.budget);
    the budget may evict more (they are the cache's biggest units)."""
    saved = sorted((p for p in entry.glob("ort-*") if p != keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in saved[max(0, count - (keep is not None)):]:
        if not leases.in_use(old):
            shutil.rmtree(old, ignore_errors=True)


def cached_session(proto: bytes, entry: Path | None, kernels: str, threads: int,
                   parallel_prepack: bool = True) -> tuple[Any, str]:
    """A session for `proto` and how it was made: "mapped" (saved blobs), "saved" (made now
    and saved for the next load) or "built" (no cache entry, or it cannot be written).
    `parallel_prepack`: see `graph.session_options`."""
    if entry is None:
        return make_session(proto, None, threads, parallel_prepack=parallel_prepack), "built"
    kept = budget.SESSION_POLICIES[budget.session_policy()]
    if kept == 0:  # policy "none": the smallest cache, a prepack on every load
        _prune(entry, None, 0)
        return make_session(proto, entry, threads, parallel_prepack=parallel_prepack), "built"
    folder = entry / f"ort-{cache_key(proto, kernels, threads)}"
    if folder.is_dir():
        verify_early(folder)  # hashed while ONNX Runtime maps it: the first token waits less
        try:
            session = _load_saved(folder, threads)
            if session is not None:
                note_warm_part(entry, folder)  # verified before the first token, like the weights
                _prune(entry, folder, kept)
                return _in_use(session, folder, kernels), "mapped"
        except Exception as exc:  # a damaged or foreign save: make it again
            log.warning("saved ONNX Runtime session in %s did not load (%s); rebuilding", folder, exc)
        forget_early(folder)
        shutil.rmtree(folder, ignore_errors=True)
    tmp = entry / f".ort-tmp-{uuid.uuid4().hex}"
    built = None
    try:
        tmp.mkdir()
        so = session_options(entry, threads, parallel_prepack)
        so.optimized_model_filepath = str(tmp / _MODEL)
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", _DATA)
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        so.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
        built = make_session(proto, entry, threads, so=so)
        (tmp / _MANIFEST).write_text(json.dumps({"data_bytes": (tmp / _DATA).stat().st_size}))
        write_checksums(tmp)  # model.onnx.data included: a damaged blob is never used silently
        os.replace(tmp, folder)
        _prune(entry, folder, kept)
    except OSError as exc:  # read-only cache, disk full, a racing writer: keep what we made
        log.info("cannot save the ONNX Runtime session in %s (%s)", entry, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        if built is None:
            built = make_session(proto, entry, threads, parallel_prepack=parallel_prepack)
        return built, "built"
    try:  # reopen from disk: the weights then live in mapped pages, not on the heap
        session = _load_saved(folder, threads)
    except Exception as exc:
        log.warning("the ONNX Runtime session saved in %s did not load (%s)", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        session = None
    if session is None:
        return built, "built"
    del built
    _in_use(session, folder, kernels)
    store.enforce_budget(entry.parent.parent)  # <cache>/weights/<entry>: the new one is leased
    return session, "saved"


def _in_use(session: Any, folder: Path, kernels: str) -> Any:
    """Lease the saved session's folder while `session` lives; note the use (for eviction)."""
    try:
        leases.hold(folder).tie_to([session])
    except TypeError:  # a session type without weak references: held for the process
        pass
    usage.record_use(folder, kind=f"prepacked {kernels}")
    return session
