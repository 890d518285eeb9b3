"""The index: re-indexing on change (size + mtime + sha256), a file deleted mid-index, kill -9
mid-index then resume with no duplicate chunk, and the retrieval target on a corpus of Markdown
and PDF files with known facts at known places (the right passage in the top 4 for >= 90%)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docs_corpus import write_corpus, write_pdf
from turbospark_app.documents.chunking import chunk_pages
from turbospark_app.documents.extract import extract
from turbospark_app.documents.indexer import Indexer
from turbospark_app.documents.retrieve import Retriever, fts_query
from turbospark_app.documents.store import DocumentStore
from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def embedder(embedder_path: Path):
    with LlamaCppEmbedder(embedder_path, threads=2) as e:
        yield e


def _write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cats.md").write_text("# Cats\n\nThe cat named Zorro sleeps on the blue sofa.\n", encoding="utf-8")
    (folder / "planets.txt").write_text("The capital of the planet Xylo is Quartzburg.\n", encoding="utf-8")
    write_pdf(folder / "manual.pdf", ["Setup: plug the cable in.", "Reset: hold the red button for ten seconds."])
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "page.html").write_text("<h1>Tea</h1><p>Green tea steeps for two minutes.</p>")
    (folder / ".hidden.md").write_text("never indexed")


def test_index_search_and_reindex_on_change(tmp_path: Path, embedder) -> None:
    docs = tmp_path / "docs"
    _write(docs)
    store = DocumentStore(tmp_path / "index.db")
    indexer = Indexer(store, embedder)
    first = indexer.index("mine", [docs])
    assert (first.files_total, first.files_done, first.errors, first.skipped) == (4, 4, [], 0)
    retriever = Retriever(store, embedder)
    hit = retriever.search("mine", "How long do I hold the reset button?", k=1).hits[0]
    assert (Path(hit.chunk.path).name, hit.chunk.page) == ("manual.pdf", 2)
    assert hit.cosine is not None and hit.bm25 is not None

    again = indexer.index("mine", [docs])  # nothing changed: nothing re-read
    assert (again.skipped, again.chunks) == (4, 0)
    os.utime(docs / "cats.md", ns=(1, 1))  # touched only: the hash says unchanged
    touched = indexer.index("mine", [docs])
    assert (touched.skipped, touched.chunks) == (4, 0)

    (docs / "cats.md").write_text("# Cats\n\nZorro now sleeps in the green basket.\n", encoding="utf-8")
    (docs / "planets.txt").unlink()
    changed = indexer.index("mine", [docs])
    assert (changed.skipped, changed.chunks, changed.files_total) == (2, 1, 3)
    coll = store.collection("mine")
    assert sorted(Path(d.path).name for d in store.documents(coll.id)) == ["cats.md", "manual.pdf", "page.html"]
    hit = retriever.search("mine", "Where does Zorro sleep?", k=1).hits[0]
    assert "green basket" in hit.chunk.text  # the new text, the matrix cache refreshed
    assert store.integrity() == []


def test_bad_files_are_listed_and_the_rest_indexes(tmp_path: Path, embedder) -> None:
    docs = tmp_path / "docs"
    _write(docs)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 nonsense")
    (docs / "data.txt").write_bytes(b"\x00\x01" * 100)
    store = DocumentStore(tmp_path / "index.db")
    deleted = []

    def on_progress(p) -> None:  # the file after cats.md disappears while cats.md is read
        if p.current == "cats.md" and not deleted:
            (docs / "data.txt").unlink()
            deleted.append(True)

    result = Indexer(store, embedder).index("mine", [docs], on_progress=on_progress)
    assert sorted(result.errors) == ["broken.pdf: is not a readable PDF (Failed to load document "
                                     "(PDFium: Data format error).)",
                                     "data.txt: the file is gone (deleted or moved)"]
    rows = {Path(d.path).name: d for d in store.documents(store.collection("mine").id)}
    assert rows["broken.pdf"].status == "error" and rows["cats.md"].status == "indexed"
    assert store.count_chunks() == sum(d.chunks for d in rows.values()) > 0


_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from turbospark_app.documents.chunking import chunk_pages
from turbospark_app.documents.extract import extract
from turbospark_app.documents.indexer import Indexer
from turbospark_app.documents.store import DocumentStore
from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder

class Slow(LlamaCppEmbedder):
    def embed(self, texts):
        time.sleep(0.3)  # time for the kill to land mid-index
        return super().embed(texts)

e = Slow({model!r}, threads=1)
Indexer(DocumentStore({db!r}), e).index("c", [{docs!r}])
print("finished")
"""


def test_kill_9_mid_index_then_resume_without_duplicates(tmp_path: Path, embedder, embedder_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"d{i:02d}.md").write_text(f"# Doc {i}\n\n" + f"Paragraph {i} about item {i * 7}. " * 60)
    db = tmp_path / "index.db"
    code = _CHILD.format(tests=str(TESTS), model=str(embedder_path), db=str(db), docs=str(docs))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)
        if db.exists():
            probe = DocumentStore(db)
            coll = probe.collection("c")
            done = len(probe.documents(coll.id)) if coll else 0
            probe.close()
            if done >= 5:
                break
    assert child.poll() is None, "the indexer finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert 5 <= done < 40

    store = DocumentStore(db)
    assert store.integrity() == []
    kept = len(store.documents(store.collection("c").id))
    resumed = Indexer(store, embedder).index("c", [docs])
    assert resumed.skipped >= kept >= 5  # what landed before the kill is not redone
    rows = store.documents(store.collection("c").id)
    assert len(rows) == 40 and all(r.status == "indexed" for r in rows)
    assert store.integrity() == []
    # each document holds exactly the chunks one clean pass makes of it, once
    indexer = Indexer(store, embedder)
    expected = {str(p): len(chunk_pages(extract(p).pages, indexer._count, target=indexer.target_tokens))
                for p in sorted(docs.iterdir())}
    assert {r.path: r.chunks for r in rows} == expected
    assert store.count_chunks() == sum(expected.values())


def test_retrieval_finds_the_right_passage_in_the_top_4(tmp_path: Path, embedder) -> None:
    facts = write_corpus(tmp_path / "corpus", n_markdown=24, n_pdf=12)
    store = DocumentStore(tmp_path / "index.db")
    result = Indexer(store, embedder).index("corpus", [tmp_path / "corpus"])
    assert result.errors == [] and result.files_done == 36
    retriever = Retriever(store, embedder)
    found, misses = 0, []
    for fact in facts:
        hits = retriever.search("corpus", fact.question, k=4).hits
        ok = any(fact.found_in(h.chunk.path, h.chunk.page, h.chunk.text) for h in hits)
        found += ok
        if not ok:
            misses.append(fact.question)
    assert found / len(facts) >= 0.9, misses


def test_fts_query_keeps_content_words_only() -> None:
    assert fts_query('Where is the "brass" compass of Arlen kept?') == '"brass" OR "compass" OR "arlen" OR "kept"'
    assert fts_query("is it?") == ""
