"""Content checksums for weight-cache entries, verified before a warm-loaded model's first token.

A cache entry is a folder of files (whatever the weight format puts there; a compact entry's
saved ONNX Runtime sessions are folders inside it with checksums of their own). The cache layer
calls `write_checksums(folder)` when a folder is complete, and `note_warm_load` /
`note_warm_part` when it maps one it did not build: inside a `verifying_load()` (the chat
backend's loads) its verification starts right then, on daemon threads beside the rest of the load; the loader takes those folders
(`take_warm_entries`) and collects the verdict (`verify_in_background`), and the chat backend
holds the first token back until it is in (chat.cache_gate), so no reply is shown from bytes
that fail it. `write_checksums` records every file's size and a sha256 per 32 MiB piece (SHA-NI:
~1.5x BLAKE2b's speed here; pieces let one big file, the saved session's model.onnx.data, be
hashed on both cores; entries with one BLAKE2b-128 digest per file still verify) in
`checksums.json`; the folder is then renamed into place, so the checksums describe what was written. A
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
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

CHECKSUM_FILE = "checksums.json"
ALGORITHM = "sha256"
_HASHERS: dict[str, Callable[[], Any]] = {
    "sha256": hashlib.sha256,
    "blake2b-128": lambda: hashlib.blake2b(digest_size=16),  # entries written before sha256
}
_SKIP = {CHECKSUM_FILE, "usage.json"}  # bookkeeping, rewritten on every use
_CHUNK = 4 << 20
PIECE_BYTES = 32 << 20  # a digest per 32 MiB piece: a big file is verified on both cores
WORKERS = 2


_warm: dict[str, list[Path]] = {}
_early: dict[Path, "Future[list[str]]"] = {}  # verifications started as a folder was mapped
_warm_lock = threading.Lock()


_eager = 0  # loads inside `verifying_load()`: only they start hashing at once


@contextmanager
def verifying_load() -> Iterator[None]:
    """Around a load whose replies wait for the check (the chat backend's): folders mapped
    meanwhile start verifying at once. Other loads (benchmarks, tools) only note them, so no
    hashing runs beside what they measure unless someone asks for the verdict."""
    global _eager
    with _warm_lock:
        _eager += 1
    try:
        yield
    finally:
        with _warm_lock:
            _eager -= 1


def _start_early(folder: Path) -> None:
    """Begin verifying `folder` now, while the rest of the model loads (the first token waits
    for the verdict, so every second the check overlaps the load is a second off it)."""
    if Path(folder) in _early or _eager <= 0:  # already started, or nobody will wait for it
        return
    future: Future[list[str]] = Future()

    def run() -> None:
        try:
            future.set_result(verify_entry(folder))
        except Exception as exc:  # a check that cannot run is a failed check
            future.set_result([f"the check failed ({exc})"])

    _early[Path(folder)] = future
    threading.Thread(target=run, name="turbospark-cache-verify", daemon=True).start()


def _key(gguf: Path) -> str:
    return str(Path(gguf).resolve())


def note_warm_load(gguf: Path, entry: Path) -> None:
    """The cache layer mapped `entry` for `gguf` without building it: it is to be verified."""
    with _warm_lock:
        _warm.setdefault(_key(gguf), []).append(Path(entry))
        _start_early(entry)


def verify_early(folder: Path) -> None:
    """Start verifying `folder` before it is even mapped (it is read while it loads); it counts
    only once `note_warm_part` notes it, and `forget_early` drops it when the load fails."""
    with _warm_lock:
        _start_early(folder)


def forget_early(folder: Path) -> None:
    """The folder did not load after all (it is rebuilt): its early verdict means nothing."""
    with _warm_lock:
        _early.pop(Path(folder), None)


def note_warm_part(entry: Path, part: Path) -> None:
    """A folder inside `entry` (a saved session) was mapped without being built: verify it
    with the entry (under the GGUF the entry was noted for, else on its own)."""
    with _warm_lock:
        _start_early(part)
        for folders in _warm.values():
            if Path(entry) in folders:
                folders.append(Path(part))
                return
        _warm.setdefault(str(Path(entry)), []).append(Path(part))


def take_warm_entries(gguf: Path) -> list[Path]:
    """The entries warm-loaded for `gguf` since the last call (the loader verifies them)."""
    with _warm_lock:
        return _warm.pop(_key(gguf), [])


def _take_early(folder: Path) -> "Future[list[str]] | None":
    with _warm_lock:
        return _early.pop(Path(folder), None)


def file_digest(path: Path, algorithm: str = ALGORITHM, offset: int = 0,
                length: int | None = None) -> str:
    """The digest of a file's bytes (or of `length` bytes from `offset`), read in 4 MiB slices
    into one buffer (the GIL is released for each read and each hash update, so the engine
    thread's Python keeps running beside it). Read, not memory-mapped: a file truncated under a
    map would kill the process (SIGBUS)."""
    h = _HASHERS[algorithm]()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    left = float("inf") if length is None else length
    with path.open("rb", buffering=0) as fh:
        fh.seek(offset)
        while left > 0 and (n := fh.readinto(view[: int(min(_CHUNK, left))])):
            h.update(view[:n])
            left -= n
    return h.hexdigest()


def _files(entry: Path) -> list[Path]:
    return sorted(p for p in entry.iterdir()
                  if p.is_file() and p.name not in _SKIP and not p.name.startswith("."))


def _pieces(size: int) -> list[tuple[int, int]]:
    return [(start, min(PIECE_BYTES, size - start)) for start in range(0, size, PIECE_BYTES)] or [(0, 0)]


def write_checksums(entry: Path) -> None:
    """Record the size of every file in `entry` and a digest per 32 MiB piece of it (call it
    when the entry is complete)."""
    files = {}
    for p in _files(entry):
        size = p.stat().st_size
        files[p.name] = {"size": size, "piece_bytes": PIECE_BYTES,
                         "pieces": [file_digest(p, ALGORITHM, o, n) for o, n in _pieces(size)]}
    doc = {"algorithm": ALGORITHM, "files": files}
    (entry / CHECKSUM_FILE).write_text(json.dumps(doc, indent=1), "utf-8")


def _piece_tasks(path: Path, meta: dict[str, Any], algorithm: str) -> list[tuple[int, int | None, str]]:
    """(offset, length, expected digest) to check: one per piece, or the whole file (entries
    written before pieces)."""
    if "pieces" not in meta:
        return [(0, None, str(meta["digest"]))]
    step = int(meta["piece_bytes"])
    size = int(meta["size"])
    return [(i * step, min(step, size - i * step) if size else 0, str(d))
            for i, d in enumerate(meta["pieces"])]


def verify_entry(entry: Path, workers: int = WORKERS) -> list[str]:
    """What is wrong with `entry`'s contents ([] when every file matches its checksum); the
    pieces are hashed on `workers` threads."""
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
    problems: dict[str, str] = {}
    tasks: list[tuple[str, Path, int, int | None, str]] = []
    present = {p.name: p for p in _files(entry)}
    for name, meta in recorded.items():
        path = present.pop(name, None)
        try:
            if path is None:
                problems[name] = f"{name} is missing"
            elif path.stat().st_size != meta["size"]:
                problems[name] = f"{name} has {path.stat().st_size:,} bytes, not {meta['size']:,}"
            else:
                tasks += [(name, path, o, n, d) for o, n, d in _piece_tasks(path, meta, algorithm)]
        except (OSError, KeyError, TypeError, ValueError) as exc:
            problems[name] = f"{name} cannot be checked ({exc})"

    def check(task: tuple[str, Path, int, int | None, str]) -> tuple[str, str | None]:
        name, path, offset, length, expected = task
        try:
            ok = file_digest(path, algorithm, offset, length) == expected
            return name, None if ok else f"{name} does not match its checksum (its content changed)"
        except OSError as exc:
            return name, f"{name} cannot be checked ({exc})"

    tasks.sort(key=lambda t: -(t[3] if t[3] is not None else 1 << 40))  # big pieces first
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for name, problem in pool.map(check, tasks):
            if problem is not None:
                problems.setdefault(name, problem)
    out = [problems[name] for name in recorded if name in problems]
    return out + [f"{name} is not part of the entry" for name in present]


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
    "ok" or "mismatch" (`problems` says what, `bad` which folders were set aside). `seconds`:
    from its start (the end of the load) to the verdict, i.e. what a first token may wait."""

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

        # Normal priority: the first token waits for this verdict.
        start = time.perf_counter()
        try:
            for entry in self.entries:
                early = _take_early(entry)
                problems = early.result() if early is not None else verify_entry(entry)
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
