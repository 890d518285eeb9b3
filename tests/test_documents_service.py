"""The background documents service without Qt: the index thread lowers its own priority (Linux:
nice 19, inherited by the threads it starts), embeds in slices that look at the yield gate
(one thread while a reply generates, or waiting in "pause" mode), a removal waits for the write
in flight, and retrieval runs on its own thread. Also the `[n]` finder and opening a source at
its page."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from turbospark_app.documents.service import (
    SLICE,
    DocumentsService,
    YieldGate,
    YieldingEmbedder,
    decode_sources,
    encode_sources,
)
from turbospark_app.documents.store import DocumentStore
from turbospark_app.ui.render.citations import citation_spans


class Info:
    name, pooling, dims = "fake", "mean", 8


class FakeEmbedder:
    """Bag-of-letters vectors; records the threads it was given and each batch's thread nice."""

    max_tokens = 512
    info = Info()

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.threads: list[int] = []
        self.batches: list[int] = []
        self.nice: list[int] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2

    def set_threads(self, n: int) -> None:
        self.threads.append(n)

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.batches.append(len(texts))
        if sys.platform.startswith("linux"):
            self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        time.sleep(self.delay)
        out = np.zeros((len(texts), 8), np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                out[i, ord(ch) % 8] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def test_slices_use_one_thread_while_a_reply_generates() -> None:
    inner = FakeEmbedder()
    gate = YieldGate("low")
    e = YieldingEmbedder(inner, gate, threads=2)
    texts = [f"text {i}" for i in range(SLICE * 3)]
    assert e.embed(texts).shape == (len(texts), 8)
    assert inner.batches == [SLICE] * 3 and inner.threads == []  # idle: its own threads, untouched
    gate.set_generating(1)
    e.embed(texts[:SLICE * 2])
    assert inner.threads == [1]
    gate.set_generating(0)
    e.embed(texts[:1])
    assert inner.threads == [1, 2]


def test_pause_mode_waits_for_the_reply_to_end() -> None:
    inner = FakeEmbedder()
    gate = YieldGate("pause")
    gate.set_generating(2)
    e = YieldingEmbedder(inner, gate)
    done = threading.Event()
    threading.Thread(target=lambda: (e.embed(["a", "b"]), done.set()), daemon=True).start()
    assert not done.wait(0.4) and inner.batches == []
    gate.set_generating(0)
    assert done.wait(5) and inner.batches == [2]
    with pytest.raises(ValueError):
        YieldGate("sometimes")


def test_the_service_indexes_at_low_priority_removes_and_retrieves(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(5):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nThe word of note {i} is {'xyzzy' if i == 3 else 'plain'}.\n")
    store = DocumentStore(tmp_path / "index.db")
    made: list[FakeEmbedder] = []
    done: list[tuple[str, object, object]] = []

    def open_embedder() -> FakeEmbedder:
        made.append(FakeEmbedder(0.01))
        return made[-1]

    service = DocumentsService(store, open_embedder, on_done=lambda n, p, e: done.append((n, p, e)))
    try:
        service.index("notes", [folder])
        service.index("notes", [folder])  # already waiting: not queued twice
        assert service.wait_idle(30)
        assert [d[0] for d in done] == ["notes"] and done[0][2] is None
        assert store.count_chunks() == 5
        coll = store.collection("notes")
        assert coll is not None and decode_sources(coll) == [folder.resolve()]
        if sys.platform.startswith("linux"):
            assert service.priority == "nice 19" and set(made[0].nice) == {19}
        prepared = service.prepare("which note says xyzzy?", ["notes", "missing"], lambda t: len(t.split())).result(10)
        assert prepared.sources and prepared.search[0].hits
        assert any("xyzzy" in s.text for s in prepared.sources)
        assert len(made) == 2  # the query thread has its own embedder
        if sys.platform.startswith("linux"):
            assert 0 in made[1].nice  # queries at normal priority
        service.remove("notes")
        assert service.wait_idle(10) and store.collection("notes") is None and store.count_chunks() == 0
        assert store.integrity() == []
    finally:
        service.close()
        store.close()


def test_sources_of_several_paths_round_trip(tmp_path: Path) -> None:
    from turbospark_app.documents.store import Collection

    a, b = tmp_path / "a.md", tmp_path / "b"
    one = encode_sources([a])
    two = encode_sources([a, b])
    assert one == str(a.resolve())
    assert decode_sources(Collection(1, "x", two, "e", 8)) == [a.resolve(), b.resolve()]
    assert decode_sources(Collection(1, "x", None, "e", 8)) == []


def test_citations_are_found_in_text_not_code_and_only_for_sources() -> None:
    text = "Zorro sleeps [1]. Also [2, 3] and [7]. Code `x[1]` and [a] and [1][2]."
    spans = citation_spans(text, 3)
    got = [(text[a:b], n) for a, b, n in spans]
    assert got == [("[1]", 1), ("2", 2), ("3", 3), ("[1]", 1), ("[2]", 2)]
    assert citation_spans(text, 0) == []


@given(st.text(alphabet="ab[]12,` 9", max_size=60), st.integers(0, 5))
def test_citation_spans_point_at_their_numbers(text: str, count: int) -> None:
    for a, b, n in citation_spans(text, count):
        assert 1 <= n <= count
        assert text[a:b].strip("[]") == str(n)


def test_a_pdf_source_opens_at_its_page_with_a_viewer_that_takes_one(tmp_path: Path, monkeypatch) -> None:
    import turbospark_app.ui.render.sources_view as sv

    pdf = tmp_path / "m.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    md = tmp_path / "n.md"
    md.write_text("x")
    launched: list[tuple[str, list[str]]] = []
    urls: list[str] = []
    monkeypatch.setattr(sv.shutil, "which", lambda name: f"/usr/bin/{name}" if name == "okular" else None)
    opener = lambda url: urls.append(url.toLocalFile()) or True  # noqa: E731
    said = sv.open_source(str(pdf), 3, launch=lambda exe, args: launched.append((exe, args)) or True,
                          open_url=opener)
    if sys.platform.startswith("linux"):
        assert said == "okular page 3" and launched == [("/usr/bin/okular", ["-p", "3", str(pdf)])]
    assert sv.open_source(str(md), None, open_url=opener) == "opened" and urls[-1] == str(md)
    assert "no longer" in sv.open_source(str(tmp_path / "gone.pdf"), 2, open_url=opener)


def test_a_removal_stops_the_run_within_a_slice(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i:02d}.md").write_text("\n\n".join(f"Paragraph {j} of note {i}. " * 30 for j in range(6)))
    store = DocumentStore(tmp_path / "index.db")
    made: list[FakeEmbedder] = []
    done: list[tuple[str, object, object]] = []
    service = DocumentsService(store, lambda: made.append(FakeEmbedder(0.4)) or made[-1],
                               on_done=lambda n, p, e: done.append((n, p, e)))
    try:
        service.index("big", [folder])
        deadline = time.monotonic() + 20
        while not (made and made[0].batches) and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        service.remove("big")
        assert service.wait_idle(10)
        assert time.monotonic() - start < 1.5  # one slice (0.4 s here), not a whole batch of files
        assert [(n, e) for n, _, e in done] == [("big", "stopped"), ("big", None)]
        assert store.collection("big") is None and store.integrity() == []
    finally:
        service.close()
        store.close()


def test_the_gate_asks_the_engine_too() -> None:
    turns = [1]
    gate = YieldGate("pause", probe=lambda: turns[0])
    assert gate.generating
    inner = FakeEmbedder()
    done = threading.Event()
    threading.Thread(target=lambda: (YieldingEmbedder(inner, gate).embed(["x"]), done.set()), daemon=True).start()
    assert not done.wait(0.5)
    turns[0] = 0  # the API's turn ended: no event says so, the probe does
    assert done.wait(5) and inner.batches == [1]


def test_a_sources_part_round_trips_and_never_reaches_a_prompt() -> None:
    from turbospark_app.conversations.parts import SOURCES, Part, chat_messages, parts_from_json, parts_json
    from turbospark_app.documents.sources import Prepared, Source
    from turbospark_app.ui.render.sources_view import figures_text, sources_meta, sources_part

    prepared = Prepared("q", [Source(1, "/d/manual.pdf", 3, "Hold the red button.", "retrieved"),
                              Source(2, "/d/notes.md", None, "Zorro sleeps.", "retrieved")],
                        retrieved=2, seconds=0.0123, added_tokens=87)
    part = sources_part(prepared, ["Home"])
    back = parts_from_json(parts_json([part]))
    assert back == (part,) and back[0].kind == SOURCES
    meta = sources_meta(back)
    assert meta is not None and meta["sources"][0]["page"] == 3 and meta["ms"] == 12.3
    assert figures_text(meta) == "2 chunks from manual.pdf, notes.md · retrieval 12 ms · +87 tokens"
    msgs = chat_messages("assistant", back, "The answer [1].", None)
    assert [m.content for m in msgs] == ["The answer [1]."]  # the passages stay out of the prompt
    assert Part(SOURCES).to_json() == {"kind": "sources"}


def test_nothing_is_read_while_a_reply_generates_in_pause_mode(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nText of note {i}.\n")
    store = DocumentStore(tmp_path / "index.db")
    service = DocumentsService(store, FakeEmbedder)
    try:
        service.set_generating(1)
        service.index("notes", [folder])
        time.sleep(0.6)
        coll = store.collection("notes")
        assert coll is not None and store.documents(coll.id) == [] and service.busy("notes")
        assert "notes" not in service.progress  # not one file read yet (no progress reported)
        service.set_generating(0)
        assert service.wait_idle(10) and len(store.documents(coll.id)) == 3
    finally:
        service.close()
        store.close()
