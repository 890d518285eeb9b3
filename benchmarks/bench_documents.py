"""Documents: indexing throughput (embedder tokens/s; the issue's bar: ~2.7k tokens/s with
all-MiniLM-L6-v2 on 2 cores) and retrieval (top-4 hit rate, ms per query) on the corpus the
tests write (Markdown and PDF files with known facts at known places).

    .venv/bin/python benchmarks/bench_documents.py [--markdown 24] [--pdf 12] [--threads 2]

Prints: files, chunks, tokens, the index time split into extraction+chunking and embedding,
embedding tokens/s, the top-4 hit rate and the p50/max query time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from docs_corpus import write_corpus  # noqa: E402

from turbospark_app.documents.indexer import Indexer  # noqa: E402
from turbospark_app.documents.retrieve import Retriever  # noqa: E402
from turbospark_app.documents.store import DocumentStore  # noqa: E402
from turbospark_app.model.embedder_fetch import ensure_embedder  # noqa: E402
from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder  # noqa: E402


class Timed:
    """The embedder, its time and tokens counted."""

    def __init__(self, inner: LlamaCppEmbedder) -> None:
        self.inner, self.seconds, self.tokens, self.cpu = inner, 0.0, 0, 0.0
        self.max_tokens, self.info = inner.max_tokens, inner.info

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def embed(self, texts):  # type: ignore[no-untyped-def]
        t, c = time.perf_counter(), time.process_time()
        out = self.inner.embed(texts)
        self.seconds += time.perf_counter() - t
        self.cpu += time.process_time() - c  # (the indexer runs nothing else meanwhile)
        self.tokens += sum(len(self.inner.capped(self.inner.tokenize(x))) for x in texts)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", type=int, default=24)
    ap.add_argument("--pdf", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ubatch", type=int, default=2048)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        facts = write_corpus(root / "corpus", args.markdown, args.pdf)
        embedder = LlamaCppEmbedder(ensure_embedder(), threads=args.threads, n_ubatch=args.ubatch)
        embedder.embed(["warm-up"])
        timed = Timed(embedder)
        store = DocumentStore(root / "index.db")
        t = time.perf_counter()
        result = Indexer(store, timed).index("corpus", [root / "corpus"])  # type: ignore[arg-type]
        total = time.perf_counter() - t
        print(f"indexed {result.files_done} files, {result.chunks} chunks, {timed.tokens:,} embedder tokens "
              f"in {total:.1f} s (extract+chunk+store {total - timed.seconds:.1f} s, embed {timed.seconds:.1f} s)")
        print(f"embedding throughput: {timed.tokens / timed.seconds:,.0f} tokens/s "
              f"({args.threads} threads, n_ubatch {args.ubatch}); whole index: {timed.tokens / total:,.0f} tokens/s")
        print(f"embedding CPU time: {timed.cpu:.1f} s, {timed.tokens / timed.cpu:,.0f} tokens per CPU-second "
              f"(on {args.threads} idle cores the wall rate would be up to {args.threads}x that; the load "
              f"now: {os.getloadavg()[0]:.1f})")
        retriever = Retriever(store, embedder)
        hits, times = 0, []
        for fact in facts:
            res = retriever.search("corpus", fact.question, k=4)
            times.append(res.seconds)
            hits += any(fact.found_in(h.chunk.path, h.chunk.page, h.chunk.text) for h in res.hits)
        print(f"retrieval: right passage in the top 4 for {hits}/{len(facts)} questions "
              f"({hits / len(facts):.0%}); query p50 {statistics.median(times) * 1000:.1f} ms, "
              f"max {max(times) * 1000:.1f} ms over {result.chunks} chunks")
        embedder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
