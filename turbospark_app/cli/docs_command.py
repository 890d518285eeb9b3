"""`turbospark docs`: document collections from the command line.

    docs index FOLDER|FILE... --name NAME   index (or bring up to date) a collection, with a
                                            progress bar on stderr
    docs list [NAME]                        the collections, or one collection's files and errors
    docs search NAME QUESTION               the ranked chunks (both scores) for a question
    docs remove NAME                        forget a collection (the files stay)
    docs fetch-embedder                     fetch and convert the default embedding model

The index lives in `<data dir>/documents.db` (TURBOSPARK_DATA_DIR moves it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..documents.indexer import IndexProgress
    from ..documents.store import DocumentStore


def add_docs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["index", "list", "search", "remove", "fetch-embedder"])
    p.add_argument("operands", nargs="*", metavar="ARG",
                   help="index: folders or files; list: [NAME]; search: NAME QUESTION; remove: NAME")
    p.add_argument("--name", help="index: the collection's name (default: the first folder's name)")
    p.add_argument("--embedder", metavar="GGUF", default=None,
                   help="an embedding GGUF (default: TURBOSPARK_EMBEDDER, else all-MiniLM-L6-v2)")
    p.add_argument("--top", type=int, default=4, help="search: how many chunks (default 4)")


def index_db_path() -> Path:
    from ..documents.store import default_index_path

    return default_index_path()


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = width * done // total if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class IndexBar:
    """`[#####.....] 12/40 files · 230 chunks · 2.7k tok/s · ~14 s left · report.pdf` on stderr,
    rewritten in place on a terminal, a line per file in a log."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._last = ""

    def __call__(self, p: IndexProgress) -> None:
        left = p.seconds_left
        text = (f"{_bar(p.files_done, p.files_total)} {p.files_done}/{p.files_total} files · "
                f"{p.chunks:,} chunks · {p.tokens_per_s / 1000:.1f}k tok/s"
                + (f" · ~{left:.0f} s left" if left is not None and p.files_done < p.files_total else "")
                + (f" · {p.current}" if p.current else ""))
        if text == self._last:
            return
        self._last = text
        tty = self.stream.isatty()
        print(("\r\x1b[K" if tty else "") + text, end="" if tty else "\n", file=self.stream, flush=True)

    def finish(self) -> None:
        if self.stream.isatty():
            print(file=self.stream)


def docs_command(args: argparse.Namespace) -> int:
    from ..model.fetch import FetchError

    ops = list(args.operands)
    try:
        if args.action == "fetch-embedder":
            from ..model.embedder_fetch import ensure_embedder

            print(ensure_embedder())
            return 0
        from ..documents.store import DocumentStore

        store = DocumentStore(index_db_path())
        if args.action == "list":
            return _list(store, ops)
        if args.action == "remove":
            if len(ops) != 1:
                print("turbospark: `docs remove` takes one NAME", file=sys.stderr)
                return 2
            if not store.delete_collection(ops[0]):
                print(f"turbospark: no collection named {ops[0]!r}", file=sys.stderr)
                return 1
            return 0
        if args.action == "index":
            return _index(store, ops, args)
        return _search(store, ops, args)
    except FetchError as e:
        print(f"turbospark: {e}", file=sys.stderr)
        return 1


def _open_embedder(args: argparse.Namespace) -> object:
    from ..documents.embedder import open_embedder
    from ..model.choice.threads import choose_threads

    return open_embedder(args.embedder, threads=choose_threads(getattr(args, "threads", None)).count)


def _index(store: DocumentStore, ops: list[str], args: argparse.Namespace) -> int:
    from ..documents.indexer import Indexer

    if not ops:
        print("turbospark: `docs index` takes the folders or files to index", file=sys.stderr)
        return 2
    sources = [Path(o).expanduser() for o in ops]
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        print(f"turbospark: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    name = args.name or sources[0].resolve().name
    embedder = _open_embedder(args)
    bar = IndexBar()
    result = Indexer(store, embedder).index(name, sources, root=str(sources[0].resolve()),
                                            on_progress=bar)
    bar.finish()
    for error in result.errors:
        print(f"turbospark: skipped {error}", file=sys.stderr)
    print(f"{name}: {result.files_done - len(result.errors)} of {result.files_total} files indexed "
          f"({result.skipped} unchanged), {result.chunks:,} new chunks, {result.tokens:,} tokens in "
          f"{result.elapsed:.1f} s ({result.tokens_per_s:,.0f} tokens/s)")
    return 0 if not result.errors else 1


def _list(store: DocumentStore, ops: list[str]) -> int:
    if not ops:
        for c in store.collections():
            docs = store.documents(c.id)
            bad = sum(d.status == "error" for d in docs)
            print(f"{c.name}\t{len(docs)} files\t{sum(d.chunks for d in docs)} chunks"
                  + (f"\t{bad} errors" if bad else "") + f"\t{c.root or ''}")
        return 0
    coll = store.collection(ops[0])
    if coll is None:
        print(f"turbospark: no collection named {ops[0]!r}", file=sys.stderr)
        return 1
    for d in store.documents(coll.id):
        detail = d.error if d.status == "error" else (
            f"{d.chunks} chunks, {d.tokens:,} tokens" + (f", {d.pages} pages" if d.pages else ""))
        print(f"{d.status}\t{d.path}\t{detail}")
    return 0


def _search(store: DocumentStore, ops: list[str], args: argparse.Namespace) -> int:
    from ..documents.retrieve import Retriever

    if len(ops) != 2:
        print("turbospark: `docs search` takes NAME QUESTION", file=sys.stderr)
        return 2
    if store.collection(ops[0]) is None:
        print(f"turbospark: no collection named {ops[0]!r}", file=sys.stderr)
        return 1
    result = Retriever(store, _open_embedder(args)).search(ops[0], ops[1], k=args.top)
    print(f"{len(result.hits)} of {result.candidates} chunks in {result.seconds * 1000:.1f} ms")
    for i, h in enumerate(result.hits, 1):
        where = Path(h.chunk.path).name + (f", page {h.chunk.page}" if h.chunk.page else "")
        cos = f"{h.cosine:.3f} (#{h.cosine_rank})" if h.cosine is not None else "-"
        bm = f"{h.bm25:.2f} (#{h.bm25_rank})" if h.bm25 is not None else "-"
        print(f"[{i}] {where}  rrf {h.score:.4f}  cosine {cos}  bm25 {bm}")
        print("    " + " ".join(h.chunk.text.split())[:200])
    return 0
