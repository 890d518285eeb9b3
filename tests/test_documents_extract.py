"""Extraction: real PDFs (written by Qt) with their page numbers, Markdown, code, HTML; and the
hostile inputs, each a clear error for that file: corrupt, encrypted, huge, binary named .txt,
a reader that hangs, a reader that crashes, a file that is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_corpus import write_encrypted_pdf, write_pdf
from turbospark_app.documents.chunking import chunk_pages
from turbospark_app.documents.extract import extract, html_to_text
from turbospark_app.documents.pages import ExtractError, Page
from turbospark_app.documents.pdf_worker import PdfWorker


def test_pdf_pages_keep_their_numbers(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "r.pdf", ["The first page speaks of apples.", "Page two: pears.",
                                          "Third: the plums ripen in August."])
    doc = extract(pdf)
    assert doc.kind == "pdf" and doc.n_pages == 3
    assert [p.number for p in doc.pages] == [1, 2, 3]
    assert "plums ripen in August" in doc.pages[2].text and "apples" in doc.pages[0].text


def test_markdown_code_and_text(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("\ufeff# Title\r\n\r\nBody text.", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    return 42\n")
    (tmp_path / "c.txt").write_bytes("héllo wörld".encode("utf-16"))
    assert extract(tmp_path / "a.md").text == "# Title\n\nBody text."
    assert "return 42" in extract(tmp_path / "b.py").text and extract(tmp_path / "b.py").kind == "code"
    assert extract(tmp_path / "c.txt").text == "héllo wörld"


def test_html_keeps_the_visible_text_and_marks_headings() -> None:
    text = html_to_text("<html><head><style>p{color:red}</style><script>var x = '<p>no</p>';</script>"
                        "</head><body><h2>Section &amp; more</h2><p>First   para.</p><div>Second</div>"
                        "</body></html>")
    assert text == "## Section & more\n\nFirst para.\n\nSecond"


@pytest.mark.parametrize("name,content,reason", [
    ("broken.pdf", b"%PDF-1.7\n" + b"\x8f garbage " * 50, "not a readable PDF"),
    ("empty.pdf", b"", "not a readable PDF"),
    ("program.txt", bytes(range(256)) * 40, "binary, not text"),
    ("latin1.md", "caf\xe9 ".encode("latin-1") * 500, "not UTF-8 text"),
    ("blank.md", b"   \n\n ", "is empty"),
    ("archive.zip", b"PK\x03\x04", "not a supported document type"),
])
def test_bad_files_get_a_clear_error(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ExtractError, match=reason) as info:
        extract(tmp_path / name)
    assert str(info.value).startswith(name + ": ")


def test_an_encrypted_pdf_says_so(tmp_path: Path) -> None:
    with pytest.raises(ExtractError, match="encrypted"):
        extract(write_encrypted_pdf(tmp_path / "secret.pdf"))


def test_a_pdf_without_text_says_so(tmp_path: Path) -> None:
    with pytest.raises(ExtractError, match="no text layer"):
        extract(write_pdf(tmp_path / "scan.pdf", ["", ""]))


def test_a_one_gigabyte_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    for name in ("huge.txt", "huge.pdf"):
        with (tmp_path / name).open("wb") as f:
            f.truncate(1 << 30)  # sparse: no gigabyte written
        with pytest.raises(ExtractError, match=r"too large.*1\.0 GB"):
            extract(tmp_path / name)


def test_a_file_that_is_gone(tmp_path: Path) -> None:
    for name in ("gone.md", "gone.pdf"):
        with pytest.raises(ExtractError, match="gone"):
            extract(tmp_path / name)


def test_a_hanging_reader_is_stopped_and_the_next_file_still_reads(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "good.pdf", ["fine text"])
    bad = write_pdf(tmp_path / "hang.pdf", ["never read"])
    with PdfWorker(target="docs_corpus:hang_on_marked") as worker:
        with pytest.raises(ExtractError, match="longer than 2 s"):
            worker.extract(bad, timeout=2)
        assert worker.extract(good, timeout=60)[0].text == "fine text"


def test_a_crashing_reader_is_replaced(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "good.pdf", ["fine text"])
    bad = write_pdf(tmp_path / "crash.pdf", ["boom"])
    with PdfWorker(target="docs_corpus:crash_on_marked") as worker:
        with pytest.raises(ExtractError, match="crashed"):
            worker.extract(bad, timeout=60)
        assert worker.extract(good, timeout=60)[0].text == "fine text"


def test_chunks_split_at_headings_and_never_exceed_the_target() -> None:
    words = lambda n, w: " ".join([w] * n) + "."  # noqa: E731
    text = f"# One\n\n{words(50, 'alpha')}\n\n# Two\n\n{words(30, 'beta')}\n\n" + \
        "\n\n".join(f"{words(40, 'gamma')} {words(40, 'delta')}" for _ in range(6))
    count = lambda t: len(t.split())  # noqa: E731
    chunks = chunk_pages([Page(None, text), Page(7, words(20, "page"))], count, target=100, overlap=20)
    assert all(c.n_tokens <= 100 for c in chunks)
    assert chunks[0].text.startswith("# One") and "beta" not in chunks[0].text
    assert chunks[-1].page == 7 and chunks[-1].text == words(20, "page")
    assert [c.ord for c in chunks] == list(range(len(chunks)))
    # consecutive chunks of one long section share their boundary sentence (the overlap)
    gamma = [c for c in chunks if "gamma" in c.text]
    assert any(a.text.split(". ")[-1] in b.text for a, b in zip(gamma, gamma[1:]))
