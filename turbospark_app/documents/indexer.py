"""Index a folder (or files) into a collection: new and changed files extracted, chunked,
embedded and written; unchanged ones skipped (size + mtime, then the sha256 for a file that
was only touched); vanished ones removed. Each document lands in one transaction (`store`), so a
killed index resumes where it stopped with no duplicate chunk. A bad file gets its error row
(shown in the collection's list) and the rest goes on.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .chunking import TARGET_TOKENS, Chunk, chunk_pages
from .embedder import EmbedderLike, embedder_id
from .extract import Extracted, extract, kind_of
from .pages import ExtractError
from .pdf_worker import PdfWorker
from .store import DocumentRow, DocumentStore

EMBED_BATCH = 32  # chunks embedded together (across small documents)


@dataclass
class IndexProgress:
    """Where an index run is: files done of total, chunks and tokens written, time, errors."""

    files_total: int = 0
    files_done: int = 0
    skipped: int = 0
    chunks: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    current: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def seconds_left(self) -> float | None:
        work = self.files_done - self.skipped
        if work <= 0:
            return None
        return self.elapsed / work * (self.files_total - self.files_done)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0


Progress = Callable[[IndexProgress], None]
Cancel = Callable[[], bool]


def list_files(sources: Sequence[Path]) -> list[Path]:
    """The supported documents under `sources` (folders walked, hidden entries skipped)."""
    out: list[Path] = []
    for src in sources:
        src = Path(src).expanduser().resolve()
        if src.is_dir():
            for root, dirs, files in os.walk(src):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(Path(root) / f for f in sorted(files)
                           if not f.startswith(".") and kind_of(Path(f)) is not None)
        else:
            out.append(src)
    return out


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class _Pending:
    path: Path
    size: int
    mtime_ns: int
    sha256: str
    doc: Extracted
    chunks: list[Chunk]


class Indexer:
    """Index files into a `DocumentStore` with an embedder."""

    def __init__(self, store: DocumentStore, embedder: EmbedderLike, *, pdf_timeout: float = 60.0,
                 target_tokens: int = TARGET_TOKENS) -> None:
        self.store = store
        self.embedder = embedder
        self.pdf_timeout = pdf_timeout
        # the embedder's own cap, with room for its special tokens
        self.target_tokens = max(16, min(target_tokens, embedder.max_tokens - 2))

    def _count(self, text: str) -> int:
        return max(0, self.embedder.count_tokens(text) - 2)  # without [CLS] and [SEP]

    def index(self, name: str, sources: Sequence[Path], *, root: str | None = None,
              on_progress: Progress | None = None, cancel: Cancel | None = None,
              pdf: PdfWorker | None = None, extracted: Mapping[Path, Extracted] | None = None) -> IndexProgress:
        """Bring collection `name` in step with the files under `sources`. Returns the final
        progress (its `errors`: one line per file that could not be indexed). `extracted`: text
        the caller already read, by resolved path (not read again)."""
        model, dims = embedder_id(self.embedder)
        coll = self.store.ensure_collection(name, root, model, dims)
        files = list_files(sources)
        progress = IndexProgress(files_total=len(files))
        report = on_progress or (lambda p: None)
        cancelled = cancel or (lambda: False)
        known = {d.path: d for d in self.store.documents(coll.id)}
        gone = [p for p in known if p not in {str(f) for f in files}]
        if gone:
            self.store.remove_documents(coll.id, gone)
        pending: list[_Pending] = []
        own_pdf = pdf is None
        worker = pdf or PdfWorker()
        try:
            for path in files:
                if cancelled():
                    break
                progress.current = path.name
                report(progress)
                item = self._prepare(coll.id, path, known.get(str(path)), progress, worker,
                                     (extracted or {}).get(path))
                if item is not None:
                    pending.append(item)
                    if sum(len(p.chunks) for p in pending) >= EMBED_BATCH:
                        self._flush(coll.id, pending, progress)
                        report(progress)
                else:
                    progress.files_done += 1
            if not cancelled():
                self._flush(coll.id, pending, progress)
        finally:
            if own_pdf:
                worker.close()
        progress.current = ""
        report(progress)
        return progress

    def _error(self, coll_id: int, path: Path, message: str, progress: IndexProgress,
               size: int | None = None, mtime_ns: int | None = None) -> None:
        self.store.put_document(coll_id, str(path), size=size, mtime_ns=mtime_ns, sha256=None,
                                kind=kind_of(path), pages=None, error=message)
        progress.errors.append(message)

    def _prepare(self, coll_id: int, path: Path, row: DocumentRow | None, progress: IndexProgress,
                 worker: PdfWorker, doc: Extracted | None = None) -> _Pending | None:
        """A file to embed, or None when it was skipped or recorded as an error."""
        try:
            st = path.stat()
        except FileNotFoundError:
            self._error(coll_id, path, f"{path.name}: the file is gone (deleted or moved)", progress)
            return None
        if row is not None and (row.size, row.mtime_ns) == (st.st_size, st.st_mtime_ns):
            progress.skipped += 1
            return None
        try:
            sha = file_sha256(path)
        except FileNotFoundError:
            self._error(coll_id, path, f"{path.name}: the file is gone (deleted or moved)", progress)
            return None
        except OSError as exc:
            self._error(coll_id, path, f"{path.name}: cannot be read: {exc.strerror or exc}", progress)
            return None
        if row is not None and row.sha256 == sha and row.status == "indexed":
            self.store.touch_document(row.id, st.st_size, st.st_mtime_ns)
            progress.skipped += 1
            return None
        try:
            doc = doc or extract(path, pdf=worker, pdf_timeout=self.pdf_timeout)
        except ExtractError as exc:
            self._error(coll_id, path, str(exc), progress, st.st_size, st.st_mtime_ns)
            return None
        chunks = chunk_pages(doc.pages, self._count, target=self.target_tokens)
        return _Pending(path, st.st_size, st.st_mtime_ns, sha, doc, chunks)

    def _flush(self, coll_id: int, pending: list[_Pending], progress: IndexProgress) -> None:
        if not pending:
            return
        texts = [c.text for p in pending for c in p.chunks]
        vectors = self.embedder.embed(texts) if texts else np.zeros((0, 0), np.float32)
        at = 0
        for item in pending:
            n = len(item.chunks)
            self.store.put_document(coll_id, str(item.path), size=item.size, mtime_ns=item.mtime_ns,
                                    sha256=item.sha256, kind=item.doc.kind, pages=item.doc.n_pages,
                                    chunks=item.chunks, vectors=vectors[at:at + n])
            at += n
            progress.files_done += 1
            progress.chunks += n
            progress.tokens += sum(c.n_tokens for c in item.chunks)
        pending.clear()
