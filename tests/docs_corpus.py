"""Documents for the documents tests and benchmark: real PDFs written with Qt's QPdfWriter (one
page per string, text laid out by Qt), an encrypted PDF by hand, and a corpus of Markdown and
PDF files with known facts at known files and pages, plus misbehaving PDF readers for the
child process."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path


def _app() -> None:
    from PySide6.QtGui import QGuiApplication

    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        _app.keep = QGuiApplication([])  # type: ignore[attr-defined]


def write_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF with one page per string (Qt draws the text, word-wrapped, as real text)."""
    from PySide6.QtCore import QMarginsF, QRectF, Qt
    from PySide6.QtGui import QFont, QPageLayout, QPageSize, QPainter, QPdfWriter

    _app()
    writer = QPdfWriter(str(path))
    writer.setPageSize(QPageSize(QPageSize.PageSizeId.A4))
    writer.setPageMargins(QMarginsF(15, 15, 15, 15), QPageLayout.Unit.Millimeter)
    writer.setResolution(72)
    painter = QPainter(writer)
    painter.setFont(QFont("DejaVu Sans", 9))
    rect = QRectF(painter.viewport())
    for i, text in enumerate(pages):
        if i:
            writer.newPage()
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap), text)
    painter.end()
    return path


def write_encrypted_pdf(path: Path) -> Path:
    """A PDF under the standard security handler (RC4, R2) whose user password is not empty:
    PDFium asks for a password it is not given."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
            b"<< /Filter /Standard /V 1 /R 2 /O <" + b"41" * 32 + b"> /U <" + b"5a" * 32 + b"> /P -4 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += (b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R /ID [<00112233445566778899aabbccddeeff>"
            b"<00112233445566778899aabbccddeeff>] >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref))
    path.write_bytes(bytes(out))
    return path


# --- misbehaving readers for the PDF child (PdfWorker(target=...)) ------------------------------

def hang_on_marked(path: str) -> list[tuple[int, str]]:
    """Hangs on a file whose name holds "hang", reads the others."""
    if "hang" in Path(path).name:
        time.sleep(3600)
    from turbospark_app.documents.pdf_worker import pdf_pages

    return pdf_pages(path)


def crash_on_marked(path: str) -> list[tuple[int, str]]:
    """Dies like a segfault on a file whose name holds "crash"."""
    if "crash" in Path(path).name:
        os.abort()
    from turbospark_app.documents.pdf_worker import pdf_pages

    return pdf_pages(path)


# --- the retrieval corpus --------------------------------------------------------------------

TOPICS = ["river shipping", "orchard pests", "bridge maintenance", "library archives", "railway timetables",
          "ceramic glazes", "beekeeping", "harbour tides", "mountain huts", "textile dyes", "telescope optics",
          "bread fermentation"]
VERBS = ["inspects", "records", "schedules", "compares", "repairs", "reviews", "measures", "catalogues"]
NOUNS = ["ledgers", "samples", "valves", "shipments", "reports", "permits", "gauges", "inventories",
         "routes", "budgets", "surveys", "manifests"]
PLACES = ["Arlen", "Brisk", "Corvale", "Dunmore", "Eskar", "Fallow", "Grintham", "Hollis", "Iverne",
          "Jasper Ford", "Kestrel Bay", "Lowmarch", "Mirefield", "Norrow", "Ostwick", "Pellam", "Quarry End",
          "Redwater", "Saltby", "Thornhill", "Upham", "Vellmoor", "Westerly", "Yarrow"]
OBJECTS = ["brass compass", "silver key", "oak chest", "copper kettle", "glass lantern", "iron anchor",
           "linen map", "clay seal", "bronze bell", "ivory chess set", "wool tapestry", "tin whistle"]
SPOTS = ["the north tower", "a cellar under the mill", "the chapel vestry", "the harbour office",
         "a locked drawer in the town hall", "the lighthouse keeper's cottage", "the school attic",
         "the bakery storeroom", "the signal box", "the museum basement", "the boathouse loft",
         "the observatory dome"]


@dataclass(frozen=True)
class Fact:
    file: str
    page: int | None  # PDFs: the page it is on
    question: str
    needle: str  # text the retrieved chunk must hold

    def found_in(self, path: str, page: int | None, text: str) -> bool:
        """Whether a retrieved chunk is this fact's passage (a PDF's lines may wrap anywhere)."""
        return (Path(path).name == self.file and (self.page is None or page == self.page)
                and self.needle in " ".join(text.split()))


def _filler(rng: random.Random, topic: str, n: int) -> str:
    out = []
    for _ in range(n):
        out.append(f"The committee on {topic} {rng.choice(VERBS)} the {rng.choice(NOUNS)} of "
                   f"{rng.choice(['each district', 'the coastal towns', 'the valley', 'every member'])} "
                   f"{rng.choice(['every spring', 'twice a year', 'after each storm', 'when asked', 'at dawn'])}.")
    return " ".join(out)


def write_corpus(folder: Path, n_markdown: int = 24, n_pdf: int = 12, seed: int = 7) -> list[Fact]:
    """Markdown files (sections of filler, one fact each in a random section) and PDFs (several
    pages of filler, the fact on a random page): each fact names a unique town and object."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = [(p, o) for p in PLACES for o in OBJECTS]
    rng.shuffle(pairs)
    facts: list[Fact] = []

    def fact_sentence(i: int) -> tuple[str, str, str]:
        place, obj = pairs[i]
        spot = SPOTS[i % len(SPOTS)]
        year = 1700 + (i * 37) % 250
        sentence = f"The {obj} of {place} has been kept in {spot} since {year}."
        question = rng.choice([f"Where is the {obj} of {place} kept?",
                               f"Since when has {place}'s {obj} been kept where it is?",
                               f"In which place does {place} keep its {obj}?"])
        return sentence, question, f"{obj} of {place}"

    for i in range(n_markdown):
        topic = TOPICS[i % len(TOPICS)]
        sentence, question, needle = fact_sentence(i)
        sections = [f"## {t.title()}\n\n{_filler(rng, t, rng.randint(4, 14))}"
                    for t in rng.sample(TOPICS, 4)]
        at = rng.randrange(len(sections))
        sections[at] += f"\n\n{_filler(rng, topic, 2)} {sentence} {_filler(rng, topic, 2)}"
        name = f"notes-{i:02d}.md"
        (folder / name).write_text(f"# Notes on {topic}\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
        facts.append(Fact(name, None, question, needle))
    for j in range(n_pdf):
        i = n_markdown + j
        topic = TOPICS[j % len(TOPICS)]
        sentence, question, needle = fact_sentence(i)
        pages = [_filler(rng, topic, rng.randint(6, 14)) for _ in range(rng.randint(3, 5))]
        page = rng.randrange(len(pages))
        pages[page] += " " + sentence + " " + _filler(rng, topic, 3)
        name = f"report-{j:02d}.pdf"
        write_pdf(folder / name, pages)
        facts.append(Fact(name, page + 1, question, needle))
    return facts
