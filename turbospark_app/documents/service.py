"""Collections indexed in the background, and retrieval for a turn, off the GUI thread.

Two threads, each with its own embedder context (all-MiniLM-L6-v2 is 45 MB: two copies cost
less than a question waiting behind a batch of 32 chunks being embedded):

    index thread   one collection at a time, from a queue. It lowers its own CPU priority
                   first (`host.priority`: nice 19 on Linux, the background band on macOS), so
                   the compute threads llama.cpp starts from it inherit that. It embeds in
                   slices of `SLICE` chunks and asks the `YieldGate` before each slice: while
                   a reply generates it waits for the reply to end ("pause", the default) or
                   goes on with 1 thread ("low"; "none": no yielding, for the benchmark).
                   Measured (benchmarks/bench_docs_yield.py, a loaded 2-core machine): "none"
                   cost a reply ~20% of its decode rate, "low" ~12% in one 3-round run, "pause"
                   nothing measurable; and a niced thread holding the GIL while the scheduler
                   passes it over could stall the GUI thread (a risk "pause" avoids: not
                   measured). Indexing goes on between replies.
    query thread   a turn's retrieval (`sources.prepare_turn`), at normal priority.

Callbacks run on those threads: the caller hands them over to its own (the window uses
queued Qt signals). The store is thread-safe (one connection behind a lock, WAL).
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..host.priority import lower_this_thread
from .embedder import EmbedderLike
from .indexer import Indexer, IndexProgress
from .retrieve import Retriever
from .sources import CountTokens, Prepared, prepare_turn
from .store import Collection, DocumentStore

SLICE = 4  # chunks embedded between two looks at the gate (~1k tokens: well under a second)
YIELD_MODES = ("low", "pause", "none")


def encode_sources(sources: Sequence[Path]) -> str:
    """A collection's `root` column: one path as is (the CLI's folder), several as JSON."""
    paths = [str(Path(p).expanduser().resolve()) for p in sources]
    return paths[0] if len(paths) == 1 else json.dumps(paths)


def decode_sources(coll: Collection) -> list[Path]:
    """The folders and files a collection links."""
    root = coll.root or ""
    if root.startswith("["):
        try:
            return [Path(p) for p in json.loads(root)]
        except (ValueError, TypeError):
            return []
    return [Path(root)] if root else []


class IndexStopped(Exception):
    """The index run was cancelled (a removal, the app closing) between two slices."""


class YieldGate:
    """Whether a reply is generating, and what background embedding does meanwhile."""

    def __init__(self, mode: str = "pause", probe: Callable[[], int] | None = None) -> None:
        """`probe`: how many turns the engine runs or queues (read before every slice, so a
        turn from any source counts: the window's panes, the local API)."""
        if mode not in YIELD_MODES:
            raise ValueError(f"yield mode {mode!r}: one of {', '.join(YIELD_MODES)}")
        self.mode = mode
        self.probe = probe
        self._active = 0
        self._cv = threading.Condition()

    @property
    def generating(self) -> bool:
        return self._active > 0 or (self.probe is not None and self.probe() > 0)

    def pending(self) -> list[str]:
        """The collections waiting to index (not the one indexing now)."""
        with self._lock:
            return list(self._queued)

    def set_generating(self, active: int) -> None:
        """How many replies are generating now (0: none)."""
        with self._cv:
            self._active = max(0, int(active))
            self._cv.notify_all()

    def wait(self, cancelled: Callable[[], bool], poll: float = 0.2) -> None:
        """In "pause" mode: return once no reply generates (or the work is cancelled)."""
        if self.mode != "pause":
            return
        with self._cv:
            while self.generating and not cancelled():
                self._cv.wait(poll)


class YieldingEmbedder:
    """An embedder that embeds in slices and asks the gate before each (see the module)."""

    def __init__(self, inner: EmbedderLike, gate: YieldGate, threads: int = 2,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.inner = inner
        self.gate = gate
        self.threads = threads
        self.cancelled = cancelled
        self.max_tokens = inner.max_tokens
        self._threads_now = threads
        self.embedded = 0  # texts embedded so far (a benchmark reads it while a reply runs)

    @property
    def info(self) -> object:
        return self.inner.info

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def _set_threads(self, n: int) -> None:
        setter = getattr(self.inner, "set_threads", None)
        if setter is not None and n != self._threads_now:
            setter(n)
            self._threads_now = n

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        parts = []
        for at in range(0, len(texts), SLICE):
            self.gate.wait(self.cancelled)
            if self.cancelled():  # stop within a slice, not a batch: the embedder may be closed next
                raise IndexStopped()
            yielding = self.gate.generating and self.gate.mode == "low"
            self._set_threads(1 if yielding else self.threads)
            parts.append(self.inner.embed(texts[at:at + SLICE]))
            self.embedded += len(parts[-1])
        if not parts:
            return self.inner.embed(texts)
        return np.concatenate(parts)


@dataclass
class _Job:
    name: str
    sources: list[Path]
    remove: bool = False


ProgressFn = Callable[[str, IndexProgress], None]
DoneFn = Callable[[str, IndexProgress | None, str | None], None]  # name, final progress, error


class DocumentsService:
    """See the module docstring. `open_embedder()` is called once on each thread."""

    def __init__(self, store: DocumentStore, open_embedder: Callable[[], EmbedderLike], *,
                 on_progress: ProgressFn | None = None, on_done: DoneFn | None = None,
                 yield_mode: str = "pause", threads: int = 2, lower_priority: bool = True) -> None:
        self.store = store
        self._open = open_embedder
        self.on_progress = on_progress or (lambda n, p: None)
        self.on_done = on_done or (lambda n, p, e: None)
        self.gate = YieldGate(yield_mode)
        self.threads = threads
        self.lower_priority = lower_priority
        self.priority = ""  # what lowering the index thread's priority did
        self._jobs: "queue.Queue[_Job | None]" = queue.Queue()
        self._queued: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._current: str | None = None
        self._cancel: set[str] = set()
        self._closed = False
        self._index_embedder: EmbedderLike | None = None
        self._query_embedder: EmbedderLike | None = None
        self._retriever: Retriever | None = None
        self.progress: dict[str, IndexProgress] = {}  # the last of each collection's runs
        self.embedding: YieldingEmbedder | None = None  # the running job's (its `embedded` count)
        self._thread = threading.Thread(target=self._run, name="documents-index", daemon=True)
        self._thread.start()
        self._queries = ThreadPoolExecutor(1, thread_name_prefix="documents-query")

    # -- collections ------------------------------------------------------------------------------

    def index(self, name: str, sources: Sequence[Path] | None = None) -> None:
        """Bring collection `name` in step with `sources` (None: the ones it links), in the
        background. A collection already waiting is not queued twice."""
        if sources is None:
            coll = self.store.collection(name)
            sources = decode_sources(coll) if coll is not None else []
        job = _Job(name, [Path(s) for s in sources])
        with self._lock:
            self._cancel.discard(name)
            if name in self._queued:
                self._queued[name].sources = job.sources
                return
            self._queued[name] = job
        self._jobs.put(job)

    def index_all(self) -> None:
        """Look at every collection's files again (a changed file is re-indexed, the rest skipped)."""
        for coll in self.store.collections():
            self.index(coll.name)

    def remove(self, name: str) -> None:
        """Stop indexing `name` and delete it (on the index thread: after any write in flight)."""
        with self._lock:
            self._cancel.add(name)
            self._queued.pop(name, None)
        self._jobs.put(_Job(name, [], remove=True))

    def cancel(self, name: str) -> None:
        with self._lock:
            self._cancel.add(name)

    def busy(self, name: str) -> bool:
        """True while `name` is indexing or waiting to."""
        with self._lock:
            return name == self._current or name in self._queued

    def pending(self) -> list[str]:
        """The collections waiting to index (not the one indexing now)."""
        with self._lock:
            return list(self._queued)

    def set_generating(self, active: int) -> None:
        self.gate.set_generating(active)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no job is queued or running (tests, benchmarks)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if self._current is None and not self._queued and self._jobs.empty():
                    return True
            time.sleep(0.02)
        return False

    def _run(self) -> None:
        if self.lower_priority:
            self.priority = lower_this_thread()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            with self._lock:
                if not job.remove and self._queued.get(job.name) is not job:
                    continue  # superseded or removed
                self._queued.pop(job.name, None)
                self._current = job.name
            try:
                if job.remove:
                    self.store.delete_collection(job.name)
                    self.progress.pop(job.name, None)
                    self.on_done(job.name, None, None)
                else:
                    self._index(job)
            except Exception as exc:  # noqa: BLE001 - said in the list; the thread goes on
                self.on_done(job.name, None, f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._current = None

    def _index(self, job: _Job) -> None:
        if self._index_embedder is None:
            self._index_embedder = self._open()
        cancelled = lambda: self._closed or job.name in self._cancel  # noqa: E731
        embedder = YieldingEmbedder(self._index_embedder, self.gate, self.threads, cancelled)
        self.embedding = embedder
        indexer = Indexer(self.store, embedder)

        def report(p: IndexProgress) -> None:
            snap = dataclasses.replace(p, errors=list(p.errors))
            self.progress[job.name] = snap
            self.on_progress(job.name, snap)

        def between_files() -> bool:  # reading and chunking wait for a reply too ("pause")
            self.gate.wait(cancelled)
            return cancelled()

        try:
            result = indexer.index(job.name, job.sources, root=encode_sources(job.sources) if job.sources else None,
                                   on_progress=report, cancel=between_files)
        except IndexStopped:  # the documents not yet written are indexed on the next run
            self.on_done(job.name, self.progress.get(job.name), "stopped")
            return
        self.progress[job.name] = result
        self.on_done(job.name, result, "stopped" if cancelled() else None)

    # -- retrieval -------------------------------------------------------------------------------

    def prepare(self, question: str, collections: Sequence[str], count_chat: CountTokens,
                budget: int | None = None) -> "Future[Prepared]":
        """A turn's sources from `collections`, on the query thread."""
        names = [n for n in collections if self.store.collection(n) is not None]
        return self._queries.submit(self._prepare, question, names, count_chat, budget)

    def _prepare(self, question: str, names: list[str], count_chat: CountTokens,
                 budget: int | None) -> Prepared:
        if self._retriever is None:
            self._query_embedder = self._open()
            self._retriever = Retriever(self.store, self._query_embedder)
        return prepare_turn(question, None, self._retriever, names, count_chat, budget=budget)

    # -- the end --------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the write in flight; free both embedders."""
        self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout)
        self._queries.shutdown(wait=True)
        for e in (self._index_embedder, self._query_embedder):
            closer: Any = getattr(e, "close", None)
            if closer is not None:
                closer()
        self._index_embedder = self._query_embedder = None
