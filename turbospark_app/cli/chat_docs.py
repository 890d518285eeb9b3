"""`turbospark chat --attach FILE` / `--collection NAME`: each question goes to the model with
its sources (attachments whole when they fit the context with room for the reply, else the
chunks retrieved for it; a collection's chunks retrieved), and the reply is followed on stdout
by its Sources list (file, page)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..documents.sources import Attachments, Prepared, prepare_turn, sources_footer

ROOM = 96  # tokens kept for the template's own text and the question's wrapping


class DocsTurns:
    """The documents of a headless chat; `prepare(question)` gives a turn's text and sources."""

    def __init__(self, backend: Any, attachments: Attachments | None, retriever: Any,
                 collections: list[str], max_new: int = 256) -> None:
        self.backend = backend
        self.max_new = max_new
        self.attachments = attachments
        self.retriever = retriever
        self.collections = collections

    def count(self, text: str) -> int:
        return len(self.backend.tokenizer.encode(text))

    def prepare(self, question: str) -> Prepared:
        budget = self.backend.max_context - self.max_new - ROOM - self.count(question)
        return prepare_turn(question, self.attachments, self.retriever, self.collections, self.count,
                            budget=max(0, budget))

    def chips(self) -> list[str]:
        return [a.chip() for a in self.attachments.items] if self.attachments else []


def open_documents(args: argparse.Namespace, backend: Any) -> DocsTurns | None:
    """The documents the flags name, or None after saying what is wrong (exit 2)."""
    from ..documents.embedder import open_embedder
    from ..documents.retrieve import Retriever
    from ..documents.store import DocumentStore
    from ..engine import EngineError
    from ..model.fetch import FetchError
    from .docs_command import index_db_path

    attach = [Path(p).expanduser() for p in (args.attach or [])]
    missing = [str(p) for p in attach if not p.is_file()]
    if missing:
        print(f"turbospark: --attach: no such file: {', '.join(missing)}", file=sys.stderr)
        return None
    try:
        embedder = open_embedder(getattr(args, "embedder", None), threads=2)
    except (FetchError, EngineError, OSError) as e:
        print(f"turbospark: the embedding model: {e}", file=sys.stderr)
        return None
    retriever = None
    names = list(args.collection or [])
    if names:
        store = DocumentStore(index_db_path())
        unknown = [n for n in names if store.collection(n) is None]
        if unknown:
            known = ", ".join(c.name for c in store.collections()) or "none yet"
            print(f"turbospark: --collection: no collection named {', '.join(unknown)} (collections: {known}; "
                  "`turbospark docs index FOLDER --name NAME` makes one)", file=sys.stderr)
            return None
        retriever = Retriever(store, embedder)
    attachments = None
    docs = DocsTurns(backend, None, retriever, names, args.max_new)
    if attach:
        budget = backend.max_context - args.max_new - ROOM
        attachments = Attachments(attach, embedder, docs.count, budget)
        docs.attachments = attachments
        for chip in docs.chips():
            print(f"turbospark: attached {chip}", file=sys.stderr)
        if attachments.errors and len(attachments.errors) == len(attach) and not names:
            return None
    return docs


def figures_line(p: Prepared) -> str:
    """`[documents: 4 chunks from a.pdf, b.md | retrieval 12 ms | +1,830 tokens]` (stderr)."""
    files = sorted({Path(s.path).name for s in p.sources})
    return (f"[documents: {len(p.sources)} sources ({p.retrieved} retrieved) from {', '.join(files)} | "
            f"retrieval {p.seconds * 1000:.0f} ms | +{p.added_tokens:,} tokens]")


__all__ = ["DocsTurns", "open_documents", "figures_line", "sources_footer"]
