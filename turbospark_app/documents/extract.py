"""Text out of a file, page by page: Markdown, plain text, source code, HTML here; PDF through
`pdf_worker` (a child process). Every way a file can be bad ends in one `ExtractError` whose
message says what is wrong with that file; nothing else stops.
"""

from __future__ import annotations

import html.parser
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .pages import ExtractError, Page

if TYPE_CHECKING:
    from .pdf_worker import PdfWorker

MAX_TEXT_BYTES = 32 << 20  # a text file past this is refused (a 1 GB log is not a document)
MAX_PDF_BYTES = 512 << 20

MARKDOWN = frozenset({".md", ".markdown", ".mdx", ".rst"})
HTML = frozenset({".html", ".htm", ".xhtml"})
TEXT = frozenset({".txt", ".text", ".log", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml",
                  ".ini", ".cfg", ".xml", ".tex"})
CODE = frozenset({".py", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java", ".kt", ".js",
                  ".ts", ".tsx", ".jsx", ".swift", ".m", ".rb", ".php", ".sh", ".sql", ".lua",
                  ".cs", ".scala", ".r", ".jl", ".zig", ".css", ".mk", ".cmake"})
PDF = frozenset({".pdf"})
SUPPORTED = MARKDOWN | HTML | TEXT | CODE | PDF


@dataclass(frozen=True)
class Extracted:
    path: Path
    kind: str  # "pdf", "markdown", "html", "code", "text"
    pages: tuple[Page, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(p.text for p in self.pages)

    @property
    def n_pages(self) -> int | None:
        return len(self.pages) if self.kind == "pdf" else None


def kind_of(path: Path) -> str | None:
    """The extractor a file name asks for, or None (not a supported document)."""
    ext = path.suffix.lower()
    for kind, exts in (("pdf", PDF), ("markdown", MARKDOWN), ("html", HTML), ("code", CODE),
                       ("text", TEXT)):
        if ext in exts:
            return kind
    return None


def _human(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def read_text_file(path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    """A text file's content as str: UTF-8 (BOM stripped), else UTF-16 with a BOM; refused when
    larger than `limit`, binary (NUL bytes), or mostly not text."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ExtractError(path, f"too large to read as text ({_human(size)}; the limit is {_human(limit)})")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExtractError(path, "the file is gone (deleted or moved)") from None
    except IsADirectoryError:
        raise ExtractError(path, "is a folder, not a file") from None
    except OSError as exc:
        raise ExtractError(path, f"cannot be read: {exc.strerror or exc}") from None
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise ExtractError(path, "is not valid UTF-16 text") from None
    if b"\x00" in data[:65536]:
        raise ExtractError(path, "is binary, not text (it holds NUL bytes)")
    text = data.decode("utf-8-sig", errors="replace")
    bad = text.count("\ufffd")
    if text and bad > max(8, len(text) // 50):
        raise ExtractError(path, f"is not UTF-8 text ({bad:,} undecodable bytes)")
    controls = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if controls > max(8, min(len(text), 65536) // 20):
        raise ExtractError(path, "is binary, not text (control characters)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _HTMLText(html.parser.HTMLParser):
    """The visible text of an HTML page: scripts and styles dropped, blocks on their own lines,
    headings marked as Markdown headings (the chunker splits there)."""

    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "table", "section", "article", "pre", "blockquote",
                        "ul", "ol", "dl", "dt", "dd", "header", "footer", "nav", "main", "aside", "hr"})
    HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### ", "h5": "##### ", "h6": "###### "}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip += 1
        elif tag in self.HEADINGS:
            self.parts.append("\n\n" + self.HEADINGS[tag])
        elif tag in self.BLOCKS:
            self.parts.append("\n\n" if tag == "p" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip = max(0, self._skip - 1)
        elif tag in self.HEADINGS or tag == "p":
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        joined = "".join(self.parts)
        lines = [" ".join(line.split()) for line in joined.split("\n")]
        out, blank = [], 0
        for line in lines:
            blank = blank + 1 if not line else 0
            if blank <= 1:
                out.append(line)
        return "\n".join(out).strip()


def html_to_text(source: str) -> str:
    """The visible text of an HTML document."""
    parser = _HTMLText()
    parser.feed(source)
    parser.close()
    return parser.text()  # character references were decoded by the parser


def extract(path: Path | str, *, pdf: PdfWorker | None = None, pdf_timeout: float = 60.0) -> Extracted:
    """The text of `path`. `pdf`: a `pdf_worker.PdfWorker` to reuse (one is started and stopped
    for this file otherwise). Raises ExtractError."""
    path = Path(path)
    kind = kind_of(path)
    if kind is None:
        raise ExtractError(path, f"{path.suffix or 'a file without an extension'} is not a supported "
                           "document type (PDF, Markdown, text, code, HTML)")
    if kind == "pdf":
        from .pdf_worker import PdfWorker  # noqa: F811 (the run-time import)

        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise ExtractError(path, "the file is gone (deleted or moved)") from None
        except OSError as exc:
            raise ExtractError(path, f"cannot be read: {exc.strerror or exc}") from None
        if size > MAX_PDF_BYTES:
            raise ExtractError(path, f"too large ({_human(size)}; the limit is {_human(MAX_PDF_BYTES)})")
        if pdf is not None:
            pages = pdf.extract(path, timeout=pdf_timeout)
        else:
            with PdfWorker() as worker:
                pages = worker.extract(path, timeout=pdf_timeout)
        if not any(p.text.strip() for p in pages):
            raise ExtractError(path, "has no text layer (a scanned PDF? text recognition is not built in)")
        return Extracted(path, kind, tuple(pages))
    text = read_text_file(path)
    if kind == "html":
        text = html_to_text(text)
    if not text.strip():
        raise ExtractError(path, "is empty")
    return Extracted(path, kind, (Page(None, text),))
