"""Content checksums for weight-cache entries, verified before a warm-loaded model's first token.

A cache entry is a folder of files (whatever the weight format puts there; a compact entry's
saved ONNX Runtime sessions are folders inside it with checksums of their own). The cache layer
calls `write_checksums(folder)` when a folder is complete, and `note_warm_load` /
`note_warm_part` when it maps one it did not build; the loader takes those (`take_warm_entries`)
and verifies them on a daemon thread (`verify_in_background`) while the first prompt is read;
the chat backend holds the first token back until the verdict (chat.backend), so no reply is
shown from bytes that fail it. `write_checksums` records every file's size and sha256 (SHA-NI:
~1.5x BLAKE2b's speed on this machine; entries written with BLAKE2b-128 still verify) in `checksums.json`;
the folder is then renamed into place, so the checksums always describe what was written. A
mismatch (a zeroed or flipped payload, a missing, truncated or extra file, a folder without
checksums) sets the folder aside, so the next load rebuilds it, and calls `on_problem(message)`.
Format-agnostic on purpose: it hashes files, not arrays; `usage.json` (bookkeeping) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

CHECKSUM_FILE = "checksums.json"
ALGORITHM = "sha256"
_HASHERS: dict[str, Callable[[], Any]] = {
    "sha256": hashlib.sha256,
    "blake2b-128": lambda: hashlib.blake2b(digest_size=16),  # entries written before sha256
}
_SKIP = {CHECKSUM_FILE, "usage.json"}  # bookkeeping, rewritten on every use
_CHUNK = 4 << 20


_warm: dict[str, list[Path]] = {}
_warm_lock = threading.Lock()


def _key(gguf: Path) -> str:
    return str(Path(gguf).resolve())


def note_warm_load(gguf: Path, entry: Path) -> None:
    """The cache layer mapped `entry` for `gguf` without building it: it is to be verified."""
    with _warm_lock:
        _warm.setdefault(_key(gguf), []).append(Path(entry))


def note_warm_part(entry: Path, part: Path) -> None:
    """A folder inside `entry` (a saved session) was mapped without being built: verify it
    with the entry (under the GGUF the entry was noted for, else on its own)."""
    with _warm_lock:
        for folders in _warm.values():
            if Path(entry) in folders:
                folders.append(Path(part))
                return
        _warm.setdefault(str(Path(entry)), []).append(Path(part))


def take_warm_entries(gguf: Path) -> list[Path]:
    """The entries warm-loaded for `gguf` since the last call (the loader verifies them)."""
    with _warm_lock:
        return _warm.pop(_key(gguf), [])


def file_digest(path: Path, algorithm: str = ALGORITHM) -> str:
    """The digest of a file's bytes, read in 4 MiB slices into one buffer (the GIL is released
    for each read and each hash update, so the engine thread's Python keeps running beside it).
    Read, not memory-mapped: a file truncated under a map would kill the process (SIGBUS)."""
    h = _HASHERS[algorithm]()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
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
        algorithm = doc.get("algorithm")
        if algorithm not in _HASHERS or not isinstance(recorded, dict):
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
            elif file_digest(path, algorithm) != meta["digest"]:
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
    """A background verification of the folders a warm load mapped: `state` is "pending",
    "ok" or "mismatch" (`problems` says what, `bad` which folders were set aside)."""

    def __init__(self, entries: list[Path], on_problem: Callable[[str], None] | None) -> None:
        self.entries = list(entries)
        self.state = "pending"
        self.problems: list[str] = []
        self.bad: list[Path] = []
        self.message = ""
        self.seconds = 0.0
        self._on_problem = on_problem
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turbospark-cache-check", daemon=True)

    @property
    def entry(self) -> Path:
        """The first folder checked (the weight entry)."""
        return self.entries[0]

    def start(self) -> "CacheCheck":
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the verdict; True when it is in."""
        return self._done.wait(timeout)

    def _run(self) -> None:
        import time

        _lower_priority()
        start = time.perf_counter()
        try:
            for entry in self.entries:
                problems = verify_entry(entry)
                if problems:
                    self.bad.append(entry)
                    self.problems += [f"{entry.name}: {p}" for p in problems]
        except Exception as exc:  # a check that cannot run is a failed check, never a pass
            self.problems.append(f"the check failed ({exc})")
            self.bad = list(self.entries)
        self.seconds = time.perf_counter() - start
        if not self.problems:
            self.state = "ok"
            self._done.set()
            return
        for entry in self.bad:
            set_aside(entry)
        self.message = (f"the weight cache failed its integrity check ({'; '.join(self.problems)}): "
                        "it was set aside and is rebuilt from the GGUF; no reply uses it")
        self.state = "mismatch"
        self._done.set()
        log.warning(self.message)
        if self._on_problem is not None:
            try:
                self._on_problem(self.message)
            except Exception:  # a failing reporter must not hide the problem from the log
                log.exception("cache problem callback failed")


def verify_in_background(entries: Path | list[Path],
                         on_problem: Callable[[str], None] | None = None) -> CacheCheck:
    """Start checking `entries` on a daemon thread; `on_problem(message)` runs there on a mismatch."""
    return CacheCheck([entries] if isinstance(entries, Path) else entries, on_problem).start()
