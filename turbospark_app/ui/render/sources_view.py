"""A reply's Sources in the transcript: the list under it (file, page; the passage on hover;
click opens the file, at the page where the viewer allows) with the figures of its retrieval,
and its `[n]` drawn as small chips that link to the same source.

The list comes from the reply's `sources` part (what the prompt was given), so it is there
whether or not the model cited anything, and after a restart or in an export. Links:
`ts:source:<message id>-<n>` (the list) and `ts:cite:<message id>-<n>` (a chip).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from PySide6.QtCore import QProcess, QUrl
from PySide6.QtGui import QDesktopServices, QFont, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor

from ...conversations.parts import SOURCES, Part
from ...documents.sources import Prepared
from .citations import citation_spans

PASSAGE_CHARS = 700  # of a passage in a tooltip


def sources_part(prepared: Prepared, collections: Sequence[str]) -> Part:
    """The part a reply keeps of its turn's sources and their figures."""
    return Part(SOURCES, meta={
        "sources": [{"n": s.n, "path": s.path, "page": s.page, "text": s.text, "mode": s.mode}
                    for s in prepared.sources],
        "retrieved": prepared.retrieved, "ms": round(prepared.seconds * 1000, 1),
        "added_tokens": prepared.added_tokens, "collections": list(collections)})


def sources_meta(parts: Sequence[Part]) -> Mapping[str, Any] | None:
    """The meta of a message's sources part, if it has one."""
    return next((p.meta for p in parts if p.kind == SOURCES), None)


def source_label(s: Mapping[str, Any]) -> str:
    """`manual.pdf, page 3` / `notes.md`."""
    name = Path(str(s.get("path", ""))).name
    page = s.get("page")
    return f"{name}, page {page}" if page is not None else name


def figures_text(meta: Mapping[str, Any]) -> str:
    """`4 chunks from a.md, manual.pdf · retrieval 12 ms · +830 tokens`."""
    srcs = meta.get("sources") or []
    files = sorted({Path(str(s.get("path", ""))).name for s in srcs})
    n = int(meta.get("retrieved") or len(srcs))
    return (f"{n} chunk{'s' if n != 1 else ''} from {', '.join(files) or 'no file'} · "
            f"retrieval {float(meta.get('ms') or 0):.0f} ms · +{int(meta.get('added_tokens') or 0):,} tokens")


def apply_sources(entry: Any, parts: Sequence[Part]) -> None:
    """Give an assistant entry its sources (and their figures) from the message's parts."""
    meta = sources_meta(parts)
    if meta is None:
        return
    entry.sources = tuple(dict(s) for s in meta.get("sources") or ())
    entry.sources_figures = figures_text(meta)


def _passage(s: Mapping[str, Any]) -> str:
    text = " ".join(str(s.get("text", "")).split())
    return text if len(text) <= PASSAGE_CHARS else text[:PASSAGE_CHARS].rstrip() + " …"


def insert_sources(view: Any, cursor: QTextCursor, entry: Any) -> None:
    """"Sources · <figures>" then one link per source, in new blocks at `cursor`."""
    fmt = view.small_format()  # the transcript's own small, muted text
    block = QTextBlockFormat()
    block.setTopMargin(6)
    cursor.insertBlock(block, fmt)
    bold = QTextCharFormat(fmt)
    bold.setFontWeight(QFont.Weight.Bold)
    cursor.insertText("Sources", bold)
    if entry.sources_figures:
        cursor.insertText(f"  ·  {entry.sources_figures}", fmt)
    for s in entry.sources:
        cursor.insertBlock(QTextBlockFormat(), fmt)
        link = QTextCharFormat(fmt)
        link.setAnchor(True)
        link.setAnchorHref(f"ts:source:{entry.message_id}-{s.get('n')}")
        link.setForeground(view.palette().color(QPalette.ColorRole.Link))
        link.setToolTip(_passage(s))
        cursor.insertText(f"[{s.get('n')}] {source_label(s)}", link)


def mark_citations(view: Any, start: int, end: int, entry: Any) -> int:
    """Draw each `[n]` of the rendered reply in [start, end) as a chip linking to source n
    (code left alone). Returns how many were marked."""
    if not entry.sources:
        return 0
    by_n = {int(s.get("n", 0)): s for s in entry.sources}
    document = view.document()
    palette = view.palette()
    marked = 0
    block = document.findBlock(start)
    while block.isValid() and block.position() < end:
        for a, b, n in citation_spans(block.text(), max(by_n, default=0)):
            if n not in by_n:
                continue
            c = QTextCursor(document)
            c.setPosition(block.position() + a)
            c.setPosition(block.position() + b, QTextCursor.MoveMode.KeepAnchor)
            if c.charFormat().fontFixedPitch():  # inside code
                continue
            chip = QTextCharFormat()
            chip.setAnchor(True)
            chip.setAnchorHref(f"ts:cite:{entry.message_id}-{n}")
            chip.setForeground(palette.color(QPalette.ColorRole.Link))
            chip.setBackground(view._tint(0.14, palette.color(QPalette.ColorRole.Link)))  # noqa: SLF001
            chip.setFontWeight(QFont.Weight.DemiBold)
            chip.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignSuperScript)
            chip.setToolTip(f"{source_label(by_n[n])}\n\n{_passage(by_n[n])}")
            c.mergeCharFormat(chip)
            marked += 1
        block = block.next()
    return marked


Launcher = Callable[[str, list[str]], bool]
PAGE_VIEWERS = (("evince", lambda p: ["-i", str(p)]), ("okular", lambda p: ["-p", str(p)]),
                ("zathura", lambda p: ["-P", str(p)]))


def open_source(path: str, page: int | None, *, launch: Launcher | None = None,
                open_url: Callable[[QUrl], bool] | None = None) -> str:
    """Open a source's file (a PDF at its page with a viewer that takes one: evince, okular,
    zathura; else the system's default application). Returns what was done, or the problem."""
    p = Path(path)
    if not p.is_file():
        return f"{p.name} is no longer at {p.parent}"
    start = launch or (lambda exe, args: bool(QProcess.startDetached(exe, args)[0]))
    if page and p.suffix.lower() == ".pdf" and sys.platform.startswith("linux"):
        for name, args in PAGE_VIEWERS:
            exe = shutil.which(name)
            if exe and start(exe, [*args(page), str(p)]):
                return f"{name} page {page}"
    opener = open_url or QDesktopServices.openUrl
    return "opened" if opener(QUrl.fromLocalFile(str(p))) else f"no application opens {p.name}"


def handle_source_link(view: Any, rest: str) -> str:
    """A click on `ts:source|cite:<message id>-<n>`: open that source (a problem is said in the
    status tip of the view). Returns what `open_source` said."""
    mid, _, n = rest.partition("-")
    if not (mid.isdigit() and n.isdigit()):
        return ""
    entry = view.entry_for_message(int(mid))
    found = next((s for s in getattr(entry, "sources", ()) if int(s.get("n", 0)) == int(n)), None)
    if found is None:
        return ""
    said = open_source(str(found.get("path", "")), found.get("page"))
    view.setToolTip("" if said.startswith(("opened", "evince", "okular", "zathura")) else said)
    return said
