"""Content checksums for weight-cache entries, checked in the background after a warm load.

A cache entry is a folder of files (whatever the weight format puts there). The cache layer
calls two things: `write_checksums(folder)` when an entry is complete, and `note_warm_load` when
it maps an entry it did not build; the model loader takes those entries (`take_warm_entries`)
and verifies them. `write_checksums` records every file's size and BLAKE2b digest in
`checksums.json`; the entry is then renamed into place, so the checksums always describe what
was written. A warm load maps the files at once (the quick checks, header and size, are the
weight loader's) and `verify_in_background` hashes them on a daemon thread: the user's first
reply does not wait for it. A mismatch (a zeroed or flipped payload, a missing or extra file, an
entry without checksums) sets the entry aside, so the next load rebuilds it, and calls
`on_problem(message)`: the app shows it and reloads the model, the CLI says so on stderr and
reloads. Format-agnostic on purpose: it hashes files, not arrays.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

CHECKSUM_FILE = "checksums.json"
_SKIP = {CHECKSUM_FILE, "usage.json"}  # bookkeeping (weight_cache.usage), rewritten on every use
ALGORITHM = "blake2b-128"
_CHUNK = 4 << 20


_warm: dict[str, list[Path]] = {}
_warm_lock = threading.Lock()


def _key(gguf: Path) -> str:
    return str(Path(gguf).resolve())


def note_warm_load(gguf: Path, entry: Path) -> None:
    """The cache layer mapped `entry` for `gguf` without building it: it is to be verified."""
    with _warm_lock:
        _warm.setdefault(_key(gguf), []).append(Path(entry))


def take_warm_entries(gguf: Path) -> list[Path]:
    """The entries warm-loaded for `gguf` since the last call (the loader verifies them)."""
    with _warm_lock:
        return _warm.pop(_key(gguf), [])


def file_digest(path: Path) -> str:
    """BLAKE2b-128 of a file's bytes, hashed from a memory map (no copies; the GIL is released
    for each 4 MiB slice, so the engine thread's Python keeps running beside it)."""
    h = hashlib.blake2b(digest_size=16)
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return h.hexdigest()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                for start in range(0, size, _CHUNK):
                    h.update(view[start : start + _CHUNK])
            finally:
                view.release()
    return h.hexdigest()


def _lower_priority() -> None:
    """Make the calling thread the CPU's last choice (Linux: a thread's own nice value), so the
    check yields to the first reply on a busy machine. Elsewhere a no-op."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _files(entry: Path) -> list[Path]:
    return sorted(p for p in entry.iterdir()
                  if p.is_file() and p.name not in _SKIP and not p.name.startswith("."))


def write_checksums(entry: Path) -> None:
    """Record the size and digest of every file in `entry` (call it when the entry is complete)."""
    files = {p.name: {"size": p.stat().st_size, "digest": file_digest(p)} for p in _files(entry)}
    doc = {"algorithm": ALGORITHM, "files": files}
    (entry / CHECKSUM_FILE).write_text(json.dumps(doc, indent=1), "utf-8")


def verify_entry(entry: Path) -> list[str]:
    """What is wrong with `entry`'s contents ([] when every file matches its checksum)."""
    try:
        doc = json.loads((entry / CHECKSUM_FILE).read_text("utf-8"))
        recorded = doc["files"]
        if doc.get("algorithm") != ALGORITHM or not isinstance(recorded, dict):
            return [f"{CHECKSUM_FILE}: unknown algorithm {doc.get('algorithm')!r}"]
    except FileNotFoundError:
        return [f"no {CHECKSUM_FILE} (an entry written without checksums)"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"{CHECKSUM_FILE} is unreadable ({exc})"]
    problems = []
    present = {p.name: p for p in _files(entry)}
    for name, meta in recorded.items():
        path = present.pop(name, None)
        try:
            if path is None:
                problems.append(f"{name} is missing")
            elif path.stat().st_size != meta["size"]:
                problems.append(f"{name} has {path.stat().st_size:,} bytes, not {meta['size']:,}")
            elif file_digest(path) != meta["digest"]:
                problems.append(f"{name} does not match its checksum (its content changed)")
        except (OSError, KeyError, TypeError) as exc:
            problems.append(f"{name} cannot be checked ({exc})")
    problems += [f"{name} is not part of the entry" for name in present]
    return problems


def set_aside(entry: Path) -> None:
    """Move a bad entry out of the way (rename is atomic) and delete it; the next load rebuilds.
    Files still mapped stay readable until unmapped (POSIX), so a running model is not hurt."""
    trash = entry.parent / f".trash-{entry.name}-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(entry, trash)
    except OSError:
        return  # already gone, or replaced by a fresh entry
    shutil.rmtree(trash, ignore_errors=True)


class CacheCheck:
    """A background verification of one entry: `state` is "pending", "ok" or "mismatch"."""

    def __init__(self, entry: Path, on_problem: Callable[[str], None] | None) -> None:
        self.entry = entry
        self.state = "pending"
        self.problems: list[str] = []
        self.seconds = 0.0
        self._on_problem = on_problem
        self._thread = threading.Thread(target=self._run, name="turbospark-cache-check", daemon=True)

    def start(self) -> "CacheCheck":
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the verdict; True when it is in."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        import time

        _lower_priority()
        start = time.perf_counter()
        self.problems = verify_entry(self.entry)
        self.seconds = time.perf_counter() - start
        if not self.problems:
            self.state = "ok"
            return
        set_aside(self.entry)
        self.state = "mismatch"
        message = (f"the weight cache {self.entry.name} failed its integrity check "
                   f"({'; '.join(self.problems)}): it was set aside and is rebuilt from the "
                   "GGUF as the model reloads")
        log.warning(message)
        if self._on_problem is not None:
            try:
                self._on_problem(message)
            except Exception:  # a failing reporter must not hide the problem from the log
                log.exception("cache problem callback failed")


def verify_in_background(entry: Path, on_problem: Callable[[str], None] | None = None) -> CacheCheck:
    """Start checking `entry` on a daemon thread; `on_problem(message)` runs there on a mismatch."""
    return CacheCheck(entry, on_problem).start()
