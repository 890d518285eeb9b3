"""What documents add to a turn: the numbered sources in the prompt, and the Sources list shown
under the reply (file, page), which does not depend on the model citing them.

Attachments go in **whole** when together they fit the context with room for the reply (the
chat model's tokens), else they are chunked, indexed in memory and **retrieved** per question;
each attachment can be forced either way (the chip's switch). A collection is always retrieved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence
from xml.sax.saxutils import quoteattr

from .embedder import EmbedderLike
from .extract import Extracted, extract
from .indexer import Indexer
from .pages import ExtractError
from .retrieve import Retriever, SearchResult
from .store import DocumentStore

CountTokens = Callable[[str], int]
TOP_K = 4

INSTRUCTION = ("Answer the question using the sources below. Cite the sources you use as [n]. "
               "If the sources do not hold the answer, say so.")


@dataclass(frozen=True)
class Source:
    n: int
    path: str
    page: int | None
    text: str
    mode: str  # "whole" or "retrieved"
    pages: int | None = None  # a whole PDF's page count

    def label(self) -> str:
        """`file.pdf, page 3` / `notes.md` / `file.pdf (whole, 12 pages)`."""
        name = Path(self.path).name
        if self.mode == "whole":
            return f"{name} (whole{f', {self.pages} pages' if self.pages else ''})"
        return f"{name}, page {self.page}" if self.page is not None else name


@dataclass
class Prepared:
    """A turn's text with its sources, and the figures a reply shows."""

    text: str
    sources: list[Source]
    retrieved: int = 0
    seconds: float = 0.0
    added_tokens: int = 0
    search: list[SearchResult] = field(default_factory=list)


def source_block(s: Source) -> str:
    page = f" page={quoteattr(str(s.page))}" if s.page is not None else ""
    return f"<source id=\"{s.n}\" file={quoteattr(Path(s.path).name)}{page}>\n{s.text.strip()}\n</source>"


def prompt_with_sources(question: str, sources: Sequence[Source]) -> str:
    """The user message a turn with documents sends: instruction, sources, question."""
    if not sources:
        return question
    blocks = "\n\n".join(source_block(s) for s in sources)
    return f"{INSTRUCTION}\n\n{blocks}\n\nQuestion: {question}"


def sources_footer(sources: Sequence[Source]) -> str:
    """The Sources list printed under a reply."""
    if not sources:
        return ""
    return "Sources:\n" + "\n".join(f"  [{s.n}] {s.label()}" for s in sources)


def whole_text(doc: Extracted) -> str:
    """A document's text as it goes in whole (a PDF's pages marked `[page n]`)."""
    if doc.kind != "pdf":
        return doc.text
    return "\n\n".join(f"[page {p.number}]\n{p.text.strip()}" for p in doc.pages)


@dataclass
class Attachment:
    """A file attached to a conversation: its chip's figures, or the error on it."""

    path: Path
    doc: Extracted | None = None
    error: str | None = None
    tokens: int = 0  # the chat model's tokens of the whole text
    mode: str = "auto"  # "auto", "whole", "retrieved" (the user's choice)
    resolved: str = ""  # what auto became
    chunks: int = 0  # chunks when retrieved
    used: int = 0  # chunks retrieved for the last question

    def chip(self) -> str:
        """`report.pdf · 12 pages · 8,412 tokens · whole` / `... · retrieved: 4 of 212 chunks`."""
        if self.error:
            return f"{self.path.name} · {self.error}"
        parts = [self.path.name]
        if self.doc is not None and self.doc.n_pages:
            parts.append(f"{self.doc.n_pages} pages")
        parts.append(f"{self.tokens:,} tokens")
        if self.resolved == "whole":
            parts.append("whole")
        elif self.used:
            parts.append(f"retrieved: {self.used} of {self.chunks} chunks")
        else:  # no question asked yet
            parts.append(f"retrieved ({self.chunks} chunks)")
        return " · ".join(parts)


class Attachments:
    """The files attached to one conversation, whole or retrieved."""

    NAME = "attachments"

    def __init__(self, paths: Sequence[Path], embedder: EmbedderLike, count_chat: CountTokens,
                 budget: int, *, modes: dict[str, str] | None = None, pdf_timeout: float = 60.0,
                 docs: Mapping[str, Extracted] | None = None) -> None:
        """`budget`: the chat tokens the documents may take (the context minus the reply's room,
        the history and the question); `docs`: text already read, by path as given (the
        window's tray reads a file when it is attached: not read again here)."""
        self.items = [Attachment(Path(p), mode=(modes or {}).get(str(p), "auto")) for p in paths]
        self.embedder = embedder
        self.budget = budget
        for item in self.items:
            try:
                item.doc = (docs or {}).get(str(item.path)) or extract(item.path, pdf_timeout=pdf_timeout)
                item.tokens = count_chat(whole_text(item.doc))
            except ExtractError as exc:
                item.error = exc.reason
        self.store = DocumentStore(":memory:")
        self._retriever: Retriever | None = None
        self._resolve()

    def _resolve(self) -> None:
        good = [a for a in self.items if a.doc is not None]
        whole_forced = sum(a.tokens for a in good if a.mode == "whole")
        auto_tokens = sum(a.tokens for a in good if a.mode == "auto")
        auto_whole = whole_forced + auto_tokens <= self.budget
        for a in good:
            a.resolved = a.mode if a.mode != "auto" else ("whole" if auto_whole else "retrieved")
        retrieved = [a for a in good if a.resolved == "retrieved"]
        if retrieved:
            indexer = Indexer(self.store, self.embedder)
            indexer.index(self.NAME, [a.path for a in retrieved],
                          extracted={a.path.resolve(): a.doc for a in retrieved if a.doc is not None})
            coll = self.store.collection(self.NAME)
            assert coll is not None
            by_path = {d.path: d for d in self.store.documents(coll.id)}
            for a in retrieved:
                row = by_path.get(str(a.path.resolve()))
                a.chunks = row.chunks if row else 0
            self._retriever = Retriever(self.store, self.embedder)

    @property
    def errors(self) -> list[str]:
        return [f"{a.path.name}: {a.error}" for a in self.items if a.error]

    def prepare(self, question: str, k: int = TOP_K) -> Prepared:
        """The turn's text: whole attachments, then the chunks retrieved for `question`."""
        sources: list[Source] = []
        for a in self.items:
            if a.doc is not None and a.resolved == "whole":
                sources.append(Source(len(sources) + 1, str(a.path), None, whole_text(a.doc), "whole",
                                      a.doc.n_pages))
        prepared = Prepared(question, sources)
        if self._retriever is not None:
            result = self._retriever.search(self.NAME, question, k)
            prepared.search.append(result)
            prepared.seconds += result.seconds
            prepared.retrieved += len(result.hits)
            counts: dict[str, int] = {}
            for hit in result.hits:
                counts[hit.chunk.path] = counts.get(hit.chunk.path, 0) + 1
                sources.append(Source(len(sources) + 1, hit.chunk.path, hit.chunk.page, hit.chunk.text,
                                      "retrieved"))
            for a in self.items:
                a.used = counts.get(str(a.path.resolve()), 0)
        prepared.text = prompt_with_sources(question, sources)
        return prepared


def collection_sources(retriever: Retriever, collection: str, question: str, k: int = TOP_K,
                       first: int = 1) -> tuple[list[Source], SearchResult]:
    """The sources a collection gives a question, numbered from `first`."""
    result = retriever.search(collection, question, k)
    return ([Source(first + i, h.chunk.path, h.chunk.page, h.chunk.text, "retrieved")
             for i, h in enumerate(result.hits)], result)


def prepare_turn(question: str, attachments: Attachments | None, retriever: Retriever | None,
                 collections: Sequence[str], count_chat: CountTokens, k: int = TOP_K,
                 budget: int | None = None) -> Prepared:
    """The text and sources of a turn with attachments and/or collections; the last retrieved
    sources are dropped while the text is more than `budget` chat tokens over the question's."""
    start = time.perf_counter()
    prepared = attachments.prepare(question, k) if attachments is not None else Prepared(question, [])
    for name in collections:
        assert retriever is not None
        extra, result = collection_sources(retriever, name, question, k, len(prepared.sources) + 1)
        prepared.sources.extend(extra)
        prepared.search.append(result)
        prepared.retrieved += len(result.hits)
    prepared.text = prompt_with_sources(question, prepared.sources)
    if budget is not None:
        limit = budget + count_chat(question)
        while (prepared.sources and prepared.sources[-1].mode == "retrieved"
               and count_chat(prepared.text) > limit):
            prepared.sources.pop()
            prepared.retrieved -= 1
            prepared.text = prompt_with_sources(question, prepared.sources)
    prepared.seconds = time.perf_counter() - start
    prepared.added_tokens = count_chat(prepared.text) - count_chat(question) if prepared.sources else 0
    return prepared
