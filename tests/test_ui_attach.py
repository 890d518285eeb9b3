"""Attachments in the window's composer (pytest-qt, offscreen): the Image / Attach buttons, drop
and paste fill the tray; hostile images and documents are an error on their chip and nothing
else changes; a sent message keeps its images (content-addressed on disk) and attachments as
parts, shows them after a restart, sends them again in later prompts, exports them; a model
without vision greys the Image button. The real model's side is tests/test_ui_attach_vision.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from attach_fakes import VisionFake
from docs_corpus import write_encrypted_pdf
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage
from PySide6.QtWidgets import QApplication, QFileDialog
from ui_fakes import send, wait_idle
from vision_assets import animated_gif, huge_declared_png, png

from turbospark_app.conversations.export import conversation_markdown
from turbospark_app.conversations.parts import ATTACHMENT, IMAGE

FACT = "The lighthouse keeper's cat is named Bartholomew."


def ready(qtbot, pane, n: int | None = None) -> list:
    """Wait until every tray item is read; the items."""
    qtbot.waitUntil(lambda: pane.attach_tray.items() and all(
        i.state != "reading" for i in pane.attach_tray.items()), timeout=30000)
    items = pane.attach_tray.items()
    if n is not None:
        assert len(items) == n
    return items


def drop(widget, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = QPointF(10, 10)
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    event = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)


def test_buttons_drop_and_paste_fill_the_tray(ui, qtbot, tmp_path: Path, monkeypatch) -> None:
    w = ui.window(VisionFake())
    pane = w.area.current_pane()
    assert not pane.attach_tray.isVisible() and pane.image_button.isEnabled()
    (tmp_path / "a.png").write_bytes(png(48, 40))
    (tmp_path / "notes.md").write_text("# Notes\n\n" + FACT + "\n")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(tmp_path / "a.png")], ""))
    qtbot.mouseClick(pane.image_button, Qt.MouseButton.LeftButton)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(tmp_path / "notes.md")], ""))
    qtbot.mouseClick(pane.attach_button, Qt.MouseButton.LeftButton)
    image, doc = ready(qtbot, pane, 2)
    assert image.kind == "image" and image.state == "ready" and image.thumb is not None
    assert (image.image.width, image.image.height) == (48, 40)
    assert doc.kind == "document" and doc.state == "ready" and doc.tokens == len(("# Notes\n\n" + FACT + "\n").encode())
    assert pane.attach_tray.isVisible()
    chip = pane.attach_tray.chip(doc.id)
    assert chip.label.text() == f"notes.md · {doc.tokens:,} tokens" and chip.mode_button.isVisible()
    # Drop onto the transcript: by content, a PNG without its suffix is still an image.
    (tmp_path / "picture").write_bytes(png(20, 10, seed=3))
    drop(pane.transcript.viewport(), [tmp_path / "picture"])
    assert ready(qtbot, pane, 3)[2].kind == "image"
    # Paste: an image, a long text (an attachment), a short text (into the input).
    QGuiApplication.clipboard().setImage(_qimage(16, 16))
    pane.input.paste()
    assert ready(qtbot, pane, 4)[3].name == "pasted image.png"
    QGuiApplication.clipboard().setText("word " * 1000)
    pane.input.paste()
    pasted = ready(qtbot, pane, 5)[4]
    assert pasted.kind == "document" and pasted.name.startswith("pasted-") and pasted.tokens == 5000
    QGuiApplication.clipboard().setText("short words")
    pane.input.paste()
    assert pane.input.toPlainText() == "short words" and len(pane.attach_tray.items()) == 5
    # Each is removable.
    qtbot.mouseClick(pane.attach_tray.chip(pasted.id).remove_button, Qt.MouseButton.LeftButton)
    assert len(pane.attach_tray.items()) == 4


def _qimage(w: int, h: int) -> QImage:
    image = QImage(w, h, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.darkCyan)
    return image


HOSTILE = [
    ("cut.png", png()[:200], "damaged or cut short"),
    ("huge.png", huge_declared_png(), "30,000 x 30,000"),
    ("fake.png", b"%PDF-1.4 this is not a picture at all", "not an image"),
    ("anim.gif", animated_gif(), "animation (2 frames)"),
    ("empty.png", b"", "empty"),
    ("big.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * (21 << 20), "over 20 MiB"),
    ("broken.pdf", b"%PDF-1.7\n1 0 obj garbage", "PDF"),
    ("binary.txt", bytes(range(256)) * 64, "binary"),
    ("tool.exe", b"MZ\x90\x00", "not a supported type"),
]


def test_hostile_files_are_an_error_on_their_chip_and_nothing_else_changes(ui, qtbot, tmp_path: Path) -> None:
    backend = VisionFake()
    w = ui.window(backend)
    pane = w.area.current_pane()
    pane.input.setPlainText("my carefully typed question")
    paths = []
    for name, data, _ in HOSTILE:
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    paths.append(write_encrypted_pdf(tmp_path / "locked.pdf"))
    expected = [*HOSTILE, ("locked.pdf", b"", "password")]
    drop(pane.input.viewport(), paths)
    items = ready(qtbot, pane, len(expected))
    for item, (name, _, words) in zip(items, expected):
        assert item.state == "error" and words.lower() in item.error.lower(), (name, item.error)
        assert name in pane.attach_tray.chip(item.id).label.text()
    assert pane.input.toPlainText() == "my carefully typed question"
    # Send refuses while a chip is in error: it says so, nothing is sent or lost.
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    assert "remove what could not be attached" in pane.state_label.toolTip()
    assert not w.store.messages(pane.conversation_id) and backend.turns_started == 0
    assert pane.input.toPlainText() == "my carefully typed question"
    for item in items:
        pane.attach_tray.remove(item.id)
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    wait_idle(qtbot, pane)
    assert [m.content for m in w.store.messages(pane.conversation_id)][0] == "my carefully typed question"


def test_a_model_without_vision_greys_the_image_button(ui, qtbot, tmp_path: Path) -> None:
    w = ui.window(VisionFake(vision=False))
    pane = w.area.current_pane()
    assert not pane.image_button.isEnabled()
    assert "fake.gguf takes no images: no mmproj*.gguf beside the model" in pane.image_button.toolTip()
    assert pane.attach_button.isEnabled()
    (tmp_path / "a.png").write_bytes(png())
    drop(pane.transcript.viewport(), [tmp_path / "a.png"])
    (item,) = pane.attach_tray.items()
    assert item.state == "error" and "takes no images" in pane.attach_tray.chip(item.id).label.text()


def test_an_image_and_a_document_are_sent_stored_shown_and_exported(ui, qtbot, tmp_path: Path) -> None:
    backend = VisionFake(replies=("A gradient.", "Bartholomew."))
    w = ui.window(backend)
    pane = w.area.current_pane()
    (tmp_path / "a.png").write_bytes(png(48, 40))
    (tmp_path / "notes.md").write_text("# Notes\n\n" + FACT + "\n")
    pane.add_files([tmp_path / "a.png", tmp_path / "notes.md"])
    ready(qtbot, pane, 2)
    send(qtbot, pane, "What is the cat called?")
    wait_idle(qtbot, pane)
    assert not pane.attach_tray.items() and not pane.attach_tray.isVisible()
    user, reply = w.store.messages(pane.conversation_id)
    assert user.content == "What is the cat called?" and reply.content == "A gradient."
    image, doc = user.parts
    assert image.kind == IMAGE and image.name == "a.png" and image.meta["width"] == 48
    stored = Path(ui.data_dir) / "images" / image.meta["file"]
    assert stored.read_bytes() == png(48, 40) and stored.stem == image.meta["sha256"]
    assert doc.kind == ATTACHMENT and doc.meta["mode"] == "whole" and FACT in doc.text
    # The prompt had the image and the document as a numbered source before the question.
    prompt_user = backend.seen[0][-1]
    assert [i.sha256 for i in prompt_user.images] == [image.meta["sha256"]]
    assert f'<source id="1" file="notes.md">' in prompt_user.content and FACT in prompt_user.content
    assert prompt_user.content.endswith("Question: What is the cat called?")
    assert reply.stats["document_tokens"] == doc.meta["tokens"] > 0
    assert f"documents +{doc.meta['tokens']} tok" in pane.transcript.entries[1].footer
    entry = pane.transcript.entries[0]
    assert [m.kind for m in entry.media] == ["image", "attachment"]
    assert entry.media[1].label == f"notes.md · {doc.meta['tokens']:,} tokens · whole"
    assert "▤ notes.md" in pane.transcript.document().toPlainText()
    # A click on the thumbnail opens the viewer on that image, at its size.
    pane.transcript._anchor_clicked(QUrl(f"ts:image:{user.id}#0"))
    assert pane.viewer is not None and pane.viewer.isVisible()
    assert pane.viewer.picture.pixmap().size().toTuple() == (48, 40)
    pane.viewer.close()
    # The same picture attached again is stored once.
    pane.add_files([tmp_path / "a.png"])
    ready(qtbot, pane, 1)
    send(qtbot, pane, "Again?")
    wait_idle(qtbot, pane)
    stored_files = sorted(p.name for p in (Path(ui.data_dir) / "images").iterdir())
    assert stored_files == [stored.name, f"{stored.stem}.thumb.png"]  # the image once, its thumbnail
    # Export: the image links to its stored file, the attachment is named.
    md = conversation_markdown(w.store, pane.conversation_id)
    assert f"![a.png]({stored.resolve().as_uri()})" in md and "**Attachment:** `notes.md`" in md
    from turbospark_app.ui.render.html_export import conversation_html

    page = conversation_html("t", pane.transcript.entries, pane.transcript.palette())
    assert 'src="data:image/png;base64,' in page and "tsthumb:" not in page and "notes.md" in page
    cid = pane.conversation_id
    ui.close(w)

    # Restart: the message shows its thumbnail and chip; the next turn sends them again,
    # rendered exactly as before (the KV prefix is reused past the first message).
    backend2 = VisionFake(replies=("Still a cat.",))
    backend2.kv = backend.kv
    w2 = ui.window(backend2)
    pane2 = w2.area.open(cid)
    entry = pane2.transcript.entries[0]
    assert [m.kind for m in entry.media] == ["image", "attachment"] and entry.media[0].path == str(stored)
    assert entry.media[0].thumb == str(stored.with_name(f"{stored.stem}.thumb.png"))
    send(qtbot, pane2, "And now?")
    wait_idle(qtbot, pane2)
    again = backend2.seen[0]
    assert again[0] == backend.seen[0][-1]  # the first message, images and sources, as first sent
    last = w2.store.messages(cid)[-1]
    assert last.stats["reused_prefix_tokens"] >= 4 + len(again[0].content.encode())  # past the first message


def sent_with_image(ui, qtbot, tmp_path: Path, backend: VisionFake, text: str):
    """A window over `backend` whose pane sent `text` with a.png; (window, pane)."""
    w = ui.window(backend)
    pane = w.area.current_pane()
    (tmp_path / "a.png").write_bytes(png())
    pane.add_files([tmp_path / "a.png"])
    ready(qtbot, pane, 1)
    send(qtbot, pane, text)
    wait_idle(qtbot, pane)
    return w, pane


def test_a_failed_turn_gives_the_attachments_back(ui, qtbot, tmp_path: Path) -> None:
    w, pane = sent_with_image(ui, qtbot, tmp_path, VisionFake(fail_on_step=0), "describe")
    assert pane.input.toPlainText() == "describe"
    assert [i.name for i in pane.attach_tray.items()] == ["a.png"] and pane.attach_tray.isVisible()
    assert not w.store.messages(pane.conversation_id)


def test_edit_and_regenerate_keep_the_parts(ui, qtbot, tmp_path: Path) -> None:
    backend = VisionFake(replies=("one", "two", "three"))
    w, pane = sent_with_image(ui, qtbot, tmp_path, backend, "describe")
    pane.regenerate()
    wait_idle(qtbot, pane)
    assert len(backend.seen[1][-1].images) == 1  # the regenerated prompt still has the image
    user = w.store.messages(pane.conversation_id)[0]
    pane.begin_edit(user.id)
    pane.input.setPlainText("describe it again")
    pane.send()
    wait_idle(qtbot, pane)
    edited = w.store.messages(pane.conversation_id)[0]
    assert edited.id != user.id and edited.content == "describe it again"
    assert [p.kind for p in edited.parts] == [IMAGE] and len(backend.seen[2][-1].images) == 1


def test_a_document_in_the_prompt_suspends_always_allow(ui, qtbot, tmp_path: Path) -> None:
    w = ui.window(VisionFake())
    pane = w.area.current_pane()
    send(qtbot, pane, "plain")
    wait_idle(qtbot, pane)
    assert pane._untrusted_turn is False
    (tmp_path / "n.md").write_text(FACT)
    pane.add_files([tmp_path / "n.md"])
    ready(qtbot, pane, 1)
    send(qtbot, pane, "with a document")
    wait_idle(qtbot, pane)
    assert pane._untrusted_turn is True
    send(qtbot, pane, "later: the document is still in the prompt")
    wait_idle(qtbot, pane)
    assert pane._untrusted_turn is True


def test_a_long_document_goes_retrieved(ui, qtbot, tmp_path: Path, embedder_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TURBOSPARK_EMBEDDER", str(embedder_path))
    backend = VisionFake(max_context=1024)
    w = ui.window(backend)
    pane = w.area.current_pane()
    filler = "\n\n".join(f"## Section {i}\n\nThe weather report number {i} says rain and wind." for i in range(120))
    (tmp_path / "long.md").write_text(filler + "\n\n## Cats\n\n" + FACT + "\n")
    pane.add_files([tmp_path / "long.md"])
    (item,) = ready(qtbot, pane, 1)
    assert item.tokens > 1024
    assert pane.attach_tray.chip(item.id).mode_button.text() == "auto: retrieved"
    from turbospark_app.documents import extract as extract_module, indexer, sources

    read_again = []
    real = extract_module.extract
    for module in (extract_module, indexer, sources):  # (the tray read it when it was attached)
        monkeypatch.setattr(module, "extract", lambda path, **kw: read_again.append(path) or real(path, **kw))
    send(qtbot, pane, "What is the lighthouse keeper's cat named?")
    wait_idle(qtbot, pane, timeout=60000)
    assert read_again == []
    user = w.store.messages(pane.conversation_id)[0]
    (doc,) = user.parts
    assert doc.meta["mode"] == "retrieved" and doc.meta["chunks"] > 4 and doc.meta["used"] == len(doc.meta["sources"])
    assert any("Bartholomew" in s["text"] for s in doc.meta["sources"])
    assert "Bartholomew" in backend.seen[0][-1].content
    reply = w.store.messages(pane.conversation_id)[1]
    assert 0 < reply.stats["document_tokens"] == doc.meta["prompt_tokens"] < item.tokens
    label = pane.transcript.entries[0].media[0].label
    assert f"retrieved: {doc.meta['used']} of {doc.meta['chunks']} chunks" in label


def test_an_image_alone_is_sent_without_text(ui, qtbot, tmp_path: Path) -> None:
    backend = VisionFake()
    w = ui.window(backend)
    pane = w.area.current_pane()
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)  # nothing typed, nothing attached: nothing sent
    assert backend.turns_started == 0
    (tmp_path / "a.png").write_bytes(png())
    pane.add_files([tmp_path / "a.png"])
    ready(qtbot, pane, 1)
    pane.input.setFocus()
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    wait_idle(qtbot, pane)
    user, reply = w.store.messages(pane.conversation_id)
    assert user.content == "" and [p.kind for p in user.parts] == [IMAGE] and reply.content
    assert w.store.conversation(pane.conversation_id).title == "New conversation"


def test_whole_or_retrieved_follows_the_budget_and_the_chip(ui, qtbot, tmp_path: Path) -> None:
    from turbospark_app.ui.pane.attach_items import TrayItem, resolve_modes

    a, b = TrayItem("document", "a.md", tokens=600), TrayItem("document", "b.md", tokens=500)
    assert set(resolve_modes([a, b], 1200).values()) == {"whole"}
    assert set(resolve_modes([a, b], 1000).values()) == {"retrieved"}  # together they do not fit
    b.mode = "whole"
    assert resolve_modes([a, b], 1000) == {a.id: "retrieved", b.id: "whole"}
    w = ui.window(VisionFake())
    pane = w.area.current_pane()
    (tmp_path / "n.md").write_text(FACT)
    pane.add_files([tmp_path / "n.md"])
    (item,) = ready(qtbot, pane, 1)
    chip = pane.attach_tray.chip(item.id)
    assert chip.mode_button.text() == "auto: whole"  # it fits: auto would send it whole
    qtbot.mouseClick(chip.mode_button, Qt.MouseButton.LeftButton)
    assert chip.mode_button.text() == "whole" and pane.attach_tray.items()[0].mode == "whole"
    qtbot.mouseClick(chip.mode_button, Qt.MouseButton.LeftButton)
    assert pane.attach_tray.items()[0].mode == "retrieved"


def test_a_stored_image_gone_from_disk_is_said_and_nothing_is_sent(ui, qtbot, tmp_path: Path) -> None:
    backend = VisionFake()
    w, pane = sent_with_image(ui, qtbot, tmp_path, backend, "describe")
    user = w.store.messages(pane.conversation_id)[0]
    cid = pane.conversation_id
    ui.close(w)
    (Path(ui.data_dir) / "images" / user.parts[0].meta["file"]).unlink()
    w2 = ui.window(VisionFake())
    pane2 = w2.area.open(cid)
    assert "no longer stored" in pane2.transcript.document().toPlainText()
    send(qtbot, pane2, "and now?")
    wait_idle(qtbot, pane2)
    assert "is no longer stored" in pane2.transcript.document().toPlainText()
    assert len(w2.store.messages(cid)) == 2 and pane2.input.toPlainText() == "and now?"


def test_stop_while_the_documents_are_prepared_sends_nothing_and_keeps_everything(
        ui, qtbot, tmp_path: Path, monkeypatch) -> None:
    import threading

    from turbospark_app.ui.pane import attach as attach_pane

    release = threading.Event()
    real = attach_pane.prepare_documents

    def slow(*args):  # the worker waits until the test has pressed Stop
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(attach_pane, "prepare_documents", slow)
    backend = VisionFake()
    w = ui.window(backend)
    pane = w.area.current_pane()
    (tmp_path / "n.md").write_text(FACT)
    pane.add_files([tmp_path / "n.md"])
    ready(qtbot, pane, 1)
    send(qtbot, pane, "the cat?")
    assert pane.busy and pane.send_button.text() == "Stop" and "reading the attachments" in pane.state_label.text()
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    assert not pane.busy and pane.state == "stopped"
    release.set()
    qtbot.wait(300)  # the worker's late answer is ignored
    assert backend.turns_started == 0 and not w.store.messages(pane.conversation_id)
    assert pane.input.toPlainText() == "the cat?" and len(pane.attach_tray.items()) == 1
