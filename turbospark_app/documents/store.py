"""The documents index: its own SQLite file (WAL), apart from the conversations' store.

    collections  a name, the folder or files it links, the embedder its vectors came from
    documents    one row per file: size, mtime, sha256 (what says "changed"), its status
                 ("indexed" or "error" with the message), pages, tokens, chunks
    chunks       the text of each chunk, its page and offsets, its vector (float32 BLOB)
    chunks_fts   FTS5 over chunks.text (external content, kept in step by triggers): BM25

A document's chunks are replaced in ONE transaction with its row, so a process killed mid-index
leaves each document either as it was or fully re-indexed: never half, never twice.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .chunking import Chunk

SCHEMA_VERSION = 1
INDEX_FILENAME = "documents.db"


def default_index_path() -> Path:
    """`<per-user data folder>/documents.db`: the collections' index (CLI and window share it)."""
    from ..host import folders

    return folders.data_dir() / INDEX_FILENAME

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, root TEXT, embedder TEXT NOT NULL,
    dims INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS documents(
    id INTEGER PRIMARY KEY, collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL, size INTEGER, mtime_ns INTEGER, sha256 TEXT, status TEXT NOT NULL,
    error TEXT, kind TEXT, pages INTEGER, tokens INTEGER NOT NULL DEFAULT 0,
    chunks INTEGER NOT NULL DEFAULT 0, indexed_at REAL, UNIQUE(collection_id, path));
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY, document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, page INTEGER, char_start INTEGER, char_end INTEGER,
    n_tokens INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, UNIQUE(document_id, ord));
CREATE INDEX IF NOT EXISTS chunks_document ON chunks(document_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, content='chunks', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END;
"""


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    root: str | None
    embedder: str
    dims: int


@dataclass(frozen=True)
class DocumentRow:
    id: int
    collection_id: int
    path: str
    size: int | None
    mtime_ns: int | None
    sha256: str | None
    status: str
    error: str | None
    kind: str | None
    pages: int | None
    tokens: int
    chunks: int


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    page: int | None
    ord: int
    text: str
    n_tokens: int


class DocumentStore:
    """The index in one SQLite file (":memory:" for a conversation's attachments). Thread-safe:
    one connection behind a lock (an indexer thread writes while the window reads)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA foreign_keys = ON")
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
        self._lock = threading.RLock()
        self.generation = 0  # bumped on every write: the retriever's matrix cache key
        with self._lock:
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # -- collections ----------------------------------------------------------------------------

    def collection(self, name: str) -> Collection | None:
        with self._lock:
            row = self._db.execute("SELECT id, name, root, embedder, dims FROM collections WHERE name = ?",
                                   (name,)).fetchone()
        return Collection(*row) if row else None

    def collections(self) -> list[Collection]:
        with self._lock:
            rows = self._db.execute("SELECT id, name, root, embedder, dims FROM collections ORDER BY name")
            return [Collection(*r) for r in rows]

    def ensure_collection(self, name: str, root: str | None, embedder: str, dims: int) -> Collection:
        """The collection `name`, created when new. An existing one made by another embedder has
        its documents dropped (their vectors cannot be compared with the new model's)."""
        with self._lock, self._tx():
            found = self.collection(name)
            if found is None:
                self._db.execute("INSERT INTO collections(name, root, embedder, dims, created) "
                                 "VALUES (?, ?, ?, ?, ?)", (name, root, embedder, dims, time.time()))
            else:
                if (found.embedder, found.dims) != (embedder, dims):
                    self._db.execute("DELETE FROM documents WHERE collection_id = ?", (found.id,))
                self._db.execute("UPDATE collections SET root = COALESCE(?, root), embedder = ?, dims = ? "
                                 "WHERE id = ?", (root, embedder, dims, found.id))
            self.generation += 1
        result = self.collection(name)
        assert result is not None
        return result

    def delete_collection(self, name: str) -> bool:
        with self._lock, self._tx():
            cur = self._db.execute("DELETE FROM collections WHERE name = ?", (name,))
            self.generation += 1
            return cur.rowcount > 0

    # -- documents ------------------------------------------------------------------------------

    def documents(self, collection_id: int) -> list[DocumentRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, collection_id, path, size, mtime_ns, sha256, status, error, kind, pages, "
                "tokens, chunks FROM documents WHERE collection_id = ? ORDER BY path", (collection_id,))
            return [DocumentRow(*r) for r in rows]

    def document(self, collection_id: int, path: str) -> DocumentRow | None:
        return next((d for d in self.documents(collection_id) if d.path == path), None)

    def put_document(self, collection_id: int, path: str, *, size: int | None, mtime_ns: int | None,
                     sha256: str | None, kind: str | None, pages: int | None,
                     chunks: Sequence[Chunk] = (), vectors: np.ndarray | None = None,
                     error: str | None = None) -> int:
        """Replace `path`'s row and chunks in one transaction; `error` records a file that could
        not be indexed (no chunks). Returns the document's id."""
        if vectors is not None and len(vectors) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        with self._lock, self._tx():
            self._db.execute("DELETE FROM documents WHERE collection_id = ? AND path = ?",
                             (collection_id, path))
            cur = self._db.execute(
                "INSERT INTO documents(collection_id, path, size, mtime_ns, sha256, status, error, kind, "
                "pages, tokens, chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (collection_id, path, size, mtime_ns, sha256, "error" if error else "indexed", error, kind,
                 pages, sum(c.n_tokens for c in chunks), len(chunks), time.time()))
            doc_id = int(cur.lastrowid)
            if chunks:
                assert vectors is not None
                blobs = np.ascontiguousarray(vectors, np.float32)
                self._db.executemany(
                    "INSERT INTO chunks(document_id, ord, page, char_start, char_end, n_tokens, text, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(doc_id, c.ord, c.page, c.char_start, c.char_end, c.n_tokens, c.text, blobs[i].tobytes())
                     for i, c in enumerate(chunks)])
            self.generation += 1
            return doc_id

    def touch_document(self, doc_id: int, size: int, mtime_ns: int) -> None:
        """Same content, new mtime (a `touch`, a copy): remember it, keep the chunks."""
        with self._lock:
            self._db.execute("UPDATE documents SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, doc_id))

    def remove_documents(self, collection_id: int, paths: Sequence[str]) -> None:
        with self._lock, self._tx():
            self._db.executemany("DELETE FROM documents WHERE collection_id = ? AND path = ?",
                                 [(collection_id, p) for p in paths])
            self.generation += 1

    # -- chunks ---------------------------------------------------------------------------------

    def vectors(self, collection_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, float32 matrix) of every chunk of the collection."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.id, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.collection_id = ? ORDER BY c.id", (collection_id,)).fetchall()
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        if not rows:
            return ids, np.zeros((0, 0), np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), np.float32).reshape(len(rows), -1)
        return ids, matrix

    def keyword_search(self, collection_id: int, match: str, limit: int) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first (FTS5's bm25 is lower = better)."""
        with self._lock:
            try:
                return [(int(i), float(s)) for i, s in self._db.execute(
                    "SELECT c.id, bm25(chunks_fts) AS s FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                    "JOIN documents d ON d.id = c.document_id WHERE chunks_fts MATCH ? AND d.collection_id = ? "
                    "ORDER BY s LIMIT ?", (match, collection_id, limit))]
            except sqlite3.OperationalError:  # a query FTS5 cannot parse finds nothing
                return []

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(
                f"SELECT c.id, d.path, c.page, c.ord, c.text, c.n_tokens FROM chunks c "
                f"JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks})", list(ids))
            return {r[0]: ChunkRow(*r) for r in rows}

    def count_chunks(self, collection_id: int | None = None) -> int:
        with self._lock:
            if collection_id is None:
                return int(self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            return int(self._db.execute(
                "SELECT COUNT(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.collection_id = ?", (collection_id,)).fetchone()[0])

    def integrity(self) -> list[str]:
        """Problems found: FTS5 out of step with chunks, chunks without a document, duplicates."""
        problems = []
        with self._lock:
            try:
                self._db.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                problems.append(f"fts: {exc}")
            orphans = self._db.execute(
                "SELECT COUNT(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM documents)").fetchone()[0]
            if orphans:
                problems.append(f"{orphans} chunks without a document")
            dup = self._db.execute("SELECT COUNT(*) FROM (SELECT collection_id, path FROM documents "
                                   "GROUP BY collection_id, path HAVING COUNT(*) > 1)").fetchone()[0]
            if dup:
                problems.append(f"{dup} documents indexed twice")
        return problems

    # -- the rest -------------------------------------------------------------------------------

    def _tx(self) -> "_Transaction":
        return _Transaction(self._db)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception (nested use joins the outer one)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._outer = False

    def __enter__(self) -> None:
        self._outer = not self._db.in_transaction
        if self._outer:
            self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if not self._outer:
            return
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


