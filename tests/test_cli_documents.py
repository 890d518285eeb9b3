"""`turbospark docs index` (progress, summary, errors listed, unchanged files skipped) and
`turbospark chat --attach / --collection` over the real default model: the reply followed by its
Sources (file, page) on stdout, the attachment whole when it fits and retrieved when it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_corpus import write_pdf
from turbospark_app.cli.main import main

FILLER = "The committee reviews the river shipping ledgers of each district every spring. " * 40


@pytest.fixture
def docs_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_dirs, embedder_path: Path) -> Path:
    monkeypatch.setenv("TURBOSPARK_EMBEDDER", str(embedder_path))
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "cats.md").write_text("# Cats\n\nThe cat named Zorro sleeps on the blue sofa.\n", encoding="utf-8")
    write_pdf(folder / "manual.pdf", [FILLER, FILLER + " To reset the router, hold the red button for "
                                      "ten seconds. " + FILLER, FILLER])
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    return folder


def test_docs_index_list_and_search(docs_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "index", str(docs_env), "--name", "kb"]) == 1  # one file could not be read
    out, err = capsys.readouterr()
    assert out.startswith("kb: 2 of 3 files indexed (0 unchanged)") and "tokens/s" in out
    assert "3/3 files" in err and "skipped broken.pdf: is not a readable PDF" in err
    assert main(["docs", "list"]) == 0
    assert capsys.readouterr().out.startswith("kb\t3 files\t")
    assert main(["docs", "search", "kb", "how do I reset the router?", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "[1] manual.pdf, page 2" in out and "cosine" in out and "bm25" in out
    (docs_env / "broken.pdf").unlink()
    assert main(["docs", "index", str(docs_env), "--name", "kb"]) == 0
    assert capsys.readouterr().out.startswith("kb: 2 of 2 files indexed (2 unchanged), 0 new chunks")
    assert main(["docs", "search", "nope", "q"]) == 1
    assert "no collection named 'nope'" in capsys.readouterr().err


@pytest.mark.real_model
def test_chat_attach_whole_then_retrieved(docs_env: Path, default_model_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    base = ["chat", "--model", str(default_model_path), "--max-new", "12", "--quiet-summary",
            "--prompt", "How long do I hold the red button to reset the router?"]
    assert main([*base, "--attach", str(docs_env / "manual.pdf"), "--attach", str(docs_env / "cats.md")]) == 0
    out, err = capsys.readouterr()
    assert "attached manual.pdf · 3 pages ·" in err and "· whole" in err
    assert out.rstrip().endswith("Sources:\n  [1] manual.pdf (whole, 3 pages)\n  [2] cats.md (whole)")

    # a context too small for the whole PDF: its chunks are retrieved, the page is named
    assert main([*base, "--ctx-size", "1024", "--attach", str(docs_env / "manual.pdf")]) == 0
    out, err = capsys.readouterr()
    assert "· retrieved (" in err
    sources = out[out.index("Sources:"):]
    assert "] manual.pdf, page 2\n" in sources
    assert "retrieved) from manual.pdf" in err


@pytest.mark.real_model
def test_chat_collection_and_bad_flags(docs_env: Path, default_model_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    base = ["chat", "--model", str(default_model_path), "--max-new", "8", "--quiet-summary",
            "--prompt", "Where does Zorro sleep?"]
    assert main([*base, "--collection", "missing"]) == 2
    assert "no collection named missing" in capsys.readouterr().err
    assert main([*base, "--attach", str(docs_env / "nothere.md")]) == 2
    assert "no such file" in capsys.readouterr().err
    main(["docs", "index", str(docs_env), "--name", "kb"])
    capsys.readouterr()
    assert main([*base, "--collection", "kb"]) == 0
    out = capsys.readouterr().out
    assert "Sources:\n  [1] cats.md\n" in out
