"""PDF text through PDFium (pypdfium2) in a child process, one file at a time, with a time limit.

PDFium is not thread-safe (not even across documents), can crash on a hostile file and can
spin on one: the child owns it, the parent waits at most `timeout` seconds per file, and a
child that crashed or ran out of time is killed and replaced for the next file. The child is
started with `spawn` (no fork of a process holding Qt and llama.cpp threads).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .pages import ExtractError, Page

DEFAULT_TARGET = "turbospark_app.documents.pdf_worker:pdf_pages"


def pdf_pages(path: str) -> list[tuple[int, str]]:
    """(page number from 1, text) of every page (runs in the child)."""
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        text = str(exc)
        if "password" in text.lower():
            raise ValueError("is encrypted (password-protected); TurboSpark cannot read it") from None
        if "format" in text.lower() or "data" in text.lower() or "file" in text.lower():
            raise ValueError(f"is not a readable PDF ({text})") from None
        raise ValueError(f"PDFium could not open it ({text})") from None
    try:
        out = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
            out.append((i + 1, text))
            textpage.close()
            page.close()
        return out
    finally:
        doc.close()


def _child(conn: Connection, target: str) -> None:
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    while True:
        try:
            path = conn.recv()
        except (EOFError, OSError):
            return
        if path is None:
            return
        try:
            conn.send(("ok", fn(path)))
        except ValueError as exc:
            conn.send(("error", str(exc)))
        except FileNotFoundError:
            conn.send(("error", "the file is gone (deleted or moved)"))
        except Exception as exc:  # anything else PDFium or the reader raised, said in one line
            conn.send(("error", f"could not be read: {type(exc).__name__}: {exc}"))


class PdfWorker:
    """A child process that extracts PDFs; `extract` raises ExtractError for a bad file and
    replaces a child that crashed or timed out. `target` ("module:function") is what the child
    runs on each path (tests give it a misbehaving one)."""

    def __init__(self, target: str = DEFAULT_TARGET) -> None:
        self.target = target
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(child, self.target), name="turbospark-pdf", daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.kill()
            proc.join(5)

    def extract(self, path: Path, timeout: float = 60.0) -> list[Page]:
        """The pages of the PDF at `path`. Raises ExtractError."""
        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        assert self._conn is not None
        try:
            self._conn.send(str(path))
            ready = self._conn.poll(timeout)
        except (OSError, EOFError):
            ready = None
        if not ready:
            crashed = ready is None or not self._proc.is_alive()
            self._kill()
            if crashed:
                raise ExtractError(path, "the PDF reader crashed on this file (a damaged or hostile PDF)")
            raise ExtractError(path, f"reading it took longer than {timeout:g} s and was stopped "
                               "(a damaged or hostile PDF?)")
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            self._kill()
            raise ExtractError(path, "the PDF reader crashed on this file (a damaged or hostile PDF)") from None
        if status != "ok":
            raise ExtractError(path, payload)
        return [Page(int(n), str(t)) for n, t in payload]

    def close(self) -> None:
        conn = self._conn
        if conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                conn.send(None)
                self._proc.join(2)
            except OSError:
                pass
        self._kill()

    def __enter__(self) -> "PdfWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
