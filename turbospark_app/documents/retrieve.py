"""Hybrid retrieval: exact cosine over the collection's vectors (one numpy matrix product) and
BM25 from FTS5, fused by reciprocal rank (k = 60), GPT4All LocalDocs' design. Both scores are
kept on each hit for the QA panel.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from .embedder import EmbedderLike
from .store import ChunkRow, Collection, DocumentStore

RRF_K = 60
POOL = 20  # candidates from each ranking

_STOP = frozenset("""a an and are as at be by did do does for from had has have how i in is it its
of on or that the this to was were what when where which who whom why will with you your""".split())


@dataclass(frozen=True)
class Hit:
    chunk: ChunkRow
    score: float  # fused
    cosine: float | None
    cosine_rank: int | None  # 1-based, None when not among the vector candidates
    bm25: float | None
    bm25_rank: int | None


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]
    seconds: float
    candidates: int  # chunks in the collection


def fts_query(text: str) -> str:
    """An FTS5 query for a question: its content words, quoted, joined by OR."""
    words = [w for w in re.findall(r"\w+", text.lower()) if len(w) > 1 and w not in _STOP]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


class Retriever:
    """Search a store's collections; the vector matrix is cached until the store changes."""

    def __init__(self, store: DocumentStore, embedder: EmbedderLike) -> None:
        self.store = store
        self.embedder = embedder
        self._cache: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}

    def _matrix(self, coll: Collection) -> tuple[np.ndarray, np.ndarray]:
        cached = self._cache.get(coll.id)
        if cached is None or cached[0] != self.store.generation:
            ids, matrix = self.store.vectors(coll.id)
            cached = (self.store.generation, ids, matrix)
            self._cache[coll.id] = cached
        return cached[1], cached[2]

    def search(self, collection: str | Collection, query: str, k: int = 4, pool: int = POOL) -> SearchResult:
        """The `k` best chunks for `query`."""
        start = time.perf_counter()
        coll = self.store.collection(collection) if isinstance(collection, str) else collection
        if coll is None:
            raise KeyError(f"no collection named {collection!r}")
        ids, matrix = self._matrix(coll)
        cos_rank: dict[int, tuple[int, float]] = {}
        if len(ids):
            q = self.embedder.embed([query])[0]
            sims = matrix @ q
            top = np.argsort(-sims)[:pool]
            cos_rank = {int(ids[j]): (r + 1, float(sims[j])) for r, j in enumerate(top)}
        match = fts_query(query)
        bm = self.store.keyword_search(coll.id, match, pool) if match else []
        bm_rank = {cid: (r + 1, s) for r, (cid, s) in enumerate(bm)}
        fused: dict[int, float] = {}
        for ranks in (cos_rank, bm_rank):
            for cid, (r, _) in ranks.items():
                fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + r)
        best = sorted(fused, key=lambda c: (-fused[c], c))[:k]
        rows = self.store.chunks(best)
        hits = [Hit(rows[c], fused[c], cos_rank.get(c, (None, None))[1], cos_rank.get(c, (None, None))[0],
                    bm_rank.get(c, (None, None))[1], bm_rank.get(c, (None, None))[0]) for c in best if c in rows]
        return SearchResult(hits, time.perf_counter() - start, len(ids))
