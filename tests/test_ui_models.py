"""Models: a GGUF is checked before switching, problems are explained, the info view."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QWidget

from tiny_gguf import write_tiny_gguf
from turbospark_app.ui.dialogs.models import (
    ModelInfoDialog,
    ModelOpener,
    check_model_file,
    explain_model_error,
    info_rows,
)


@pytest.fixture(scope="module")
def good_tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def problem(path: Path) -> tuple[str, str]:
    with pytest.raises(Exception) as info:
        check_model_file(path)
    return explain_model_error(info.value)


def test_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("just some text, not a model")
    title, text = problem(path)
    assert title == "This is not a GGUF model" and "bad magic" in text and ".gguf" in text


def test_truncated(good_tiny: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good_tiny.read_bytes()[: good_tiny.stat().st_size // 2])
    title, text = problem(path)
    assert title == "The model file is incomplete" and "Download the file again" in text


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "new.gguf"
    write_tiny_gguf(path, arch="brand-new-arch")
    title, text = problem(path)
    assert title == "This model's architecture is not supported"
    assert text.startswith("unknown model architecture: 'brand-new-arch'.")  # llama.cpp's words
    assert "keeps running" in text


def test_a_tensor_type_ggml_does_not_know(good_tiny: Path, tmp_path: Path) -> None:
    """Every type llama.cpp has loads (Q2_K, IQ4_NL, ...); an id it has never heard of is refused
    by the header reader before llama.cpp sees it."""
    from turbospark_app.model.gguf.header import read_header

    header = read_header(good_tiny)
    t = next(t for t in header.tensors if t.name == "blk.0.ffn_down.weight")
    data = bytearray(good_tiny.read_bytes())
    name = t.name.encode()
    at = data.index(name) + len(name)  # n_dims, dims, then the type id
    n_dims = int.from_bytes(data[at:at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    data[type_at:type_at + 4] = (250).to_bytes(4, "little")
    path = tmp_path / "type250.gguf"
    path.write_bytes(bytes(data))
    title, text = problem(path)
    assert title == "This quantization is not supported" and "250" in text


def test_missing_file_and_missing_tokenizer(tmp_path: Path) -> None:
    assert problem(tmp_path / "gone.gguf")[0] == "The file cannot be read"
    path = tmp_path / "novocab.gguf"  # weights but no vocabulary: llama.cpp refuses it
    write_tiny_gguf(path, tokenizer=False)
    title, text = problem(path)
    assert "tokenizer.ggml.model" in text


def test_the_real_model_passes_with_its_facts(default_model_path: Path) -> None:
    facts = check_model_file(default_model_path)
    assert facts["architecture"] == "llama" and facts["quantization"] == "Q4_1"
    assert facts["context_length"] == 8192 and facts["file_size_bytes"] == default_model_path.stat().st_size
    assert "<|im_start|>" in facts["chat_template"] and not facts["chat_template_is_fallback"]


def test_info_view_rows_and_template() -> None:
    info = {"name": "SmolLM2", "path": "/m/s.gguf", "architecture": "llama", "n_params": 134_515_008,
            "quantization": "Q4_1", "context_length": 8192, "max_context": 2048, "n_layers": 30, "dim": 576,
            "n_heads": 9, "n_kv_heads": 3, "vocab_size": 49152, "file_size_bytes": 98_362_432,
            "load_seconds": 1.234, "chat_template": "{{ messages }}", "chat_template_is_fallback": False,
            "vision_label": "no (no mmproj*.gguf beside the model in /m)"}
    rows = dict(info_rows(info))
    assert rows["Vision"] == "no (no mmproj*.gguf beside the model in /m)"
    assert rows["Parameters"] == "134.5 M (134,515,008)" and rows["Quantization"] == "Q4_1"
    assert rows["Context length"] == "8,192 tokens (this app uses 2,048)"
    assert rows["File size"] == "94 MB (98,362,432 bytes)" and rows["Loaded in"] == "1.23 s"
    assert rows["Shape"] == "30 layers · width 576 · 9 heads (3 KV)"
    sparse = dict(info_rows({"name": "fake-model"}))
    assert sparse["Name"] == "fake-model" and sparse["Architecture"] == "–"


def test_info_dialog_shows_the_template_text(qtbot) -> None:
    d = ModelInfoDialog({"name": "m", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
                         "chat_template_is_fallback": True})
    qtbot.addWidget(d)
    assert d.template.toPlainText().startswith("{% for m in messages %}") and d.template.isReadOnly()
    assert d.values["Name"].text() == "m"


class _Parent(QWidget):
    pass


def test_opener_switches_only_to_a_checked_file(qtbot, tmp_path: Path, good_tiny: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    switched: list[tuple[str, dict]] = []
    opener = ModelOpener(parent, lambda path, facts: switched.append((path, facts)),
                         check=lambda p: {"path": p, "architecture": "llama"},
                         choose=lambda _parent, _start: str(good_tiny))
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        opener.open_dialog()
    assert sig.args == [str(good_tiny), True] and switched == [(str(good_tiny), {"path": str(good_tiny),
                                                                                  "architecture": "llama"})]


def test_opener_explains_a_bad_file_and_does_not_switch(qtbot, tmp_path: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF")  # the magic and nothing else
    switched: list = []
    opener = ModelOpener(parent, lambda path, facts: switched.append(path))
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        opener.open_path(str(bad))
    assert sig.args == [str(bad), False] and switched == [] and not opener.checking
    box = parent.findChild(QMessageBox, "modelErrorBox")
    assert box is not None and box.isVisible()
    assert box.text() == opener.last_error[0] and "bad.gguf" in box.informativeText()
    assert box.text() == "The model file is incomplete"  # the header ends after the magic


# -- in the window: switching models -------------------------------------------------------------


def test_open_model_switches_cleanly_and_never_reuses_the_old_models_ids(ui, qtbot, tmp_path: Path) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory, send, wait_idle

    from turbospark_app.ui.dialogs.first_run import remembered_model
    from turbospark_app.ui.prefs.dialog import save_session_slots

    first = RecordingBackend(replies=("alpha beta",), model_name="first")
    second = RecordingBackend(replies=("gamma delta",), model_name="second")
    loaded: list[str] = []

    def model_factory(path: str):
        loaded.append(path)
        return fake_factory(second)

    w = issue6_window(ui, first, model_factory=model_factory)
    pane = w.area.current_pane()
    send(qtbot, pane, "hello")
    wait_idle(qtbot, pane)
    send(qtbot, pane, "again")
    wait_idle(qtbot, pane)
    reused = [m for m in first.prepared[-1][1] if m.role == "assistant"]
    assert reused and reused[0].token_ids is not None  # same model: the reply's ids are reused
    picked = tmp_path / "second.gguf"
    picked.write_bytes(b"GGUF")
    w.model_opener._check = lambda p: {"path": p}  # the file checks are tested above
    w.model_opener._choose = lambda _parent, _start: str(picked)
    save_session_slots(ui.settings(), 2)
    with qtbot.waitSignal(w.bridge.backendStateChanged, timeout=5000,
                          check_params_cb=lambda state: state == "ready"):
        w.findChild(type(w.open_model_action), "actionOpenModel").trigger()
    assert loaded == [str(picked)] and remembered_model(ui.settings()) == picked
    assert w.bridge.engine._max_active == 2  # the session-slot setting applies at the load
    assert w.bridge.model_info["name"] == "second" and "second" in w.status.text("model")
    assert [m.content for m in pane.messages][:2] == ["hello", "alpha beta"]  # the text stays
    send(qtbot, pane, "and you?")
    wait_idle(qtbot, pane)
    history = second.prepared[-1][1]
    assert [m.content for m in history] == ["hello", "alpha beta", "again", "alpha beta", "and you?"]
    assert all(m.token_ids is None for m in history)  # re-tokenized by the new model
    assert second.kv == {pane.conversation_id: second.kv[pane.conversation_id]}  # a fresh session
    assert pane.messages[-1].content == "gamma delta"


def test_switching_while_a_reply_streams_asks_first_and_keeps_it_as_stopped(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory, send, wait_idle

    first = RecordingBackend(replies=(" ".join(f"w{i}" for i in range(400)),), step_delay=0.005)
    w = issue6_window(ui, first, model_factory=lambda _p: fake_factory(RecordingBackend(model_name="b")))
    pane = w.area.current_pane()
    send(qtbot, pane, "long")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    w.switch_model("/models/b.gguf")
    box = w.findChild(QMessageBox, "switchModelBox")
    assert box is not None and box.isVisible() and "1 reply" in box.text()
    assert pane.busy  # nothing happens before the user agrees
    box.button(QMessageBox.StandardButton.Yes).click()
    wait_idle(qtbot, pane)
    assert pane.state == "stopped" and pane.messages[-1].stop_reason == "cancelled"
    qtbot.waitUntil(lambda: w.bridge.model_info.get("name") == "b", timeout=5000)


def test_model_info_dialog_from_the_help_menu(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window

    w = issue6_window(ui, RecordingBackend(model_name="infomodel"))
    w.findChild(type(w.open_model_action), "actionModelInfo").trigger()
    dialog = w.findChild(ModelInfoDialog)
    assert dialog is not None and dialog.isVisible()
    assert dialog.values["Name"].text() == "infomodel"
    assert dialog.values["File"].text() == "/models/infomodel.gguf"


def test_a_reply_stopped_by_a_model_switch_keeps_the_old_models_identity(ui, qtbot, tmp_path: Path) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory, send, wait_idle

    first = RecordingBackend(replies=(" ".join(f"w{i}" for i in range(400)),), model_name="first",
                             step_delay=0.005)
    second = RecordingBackend(replies=("gamma",), model_name="second", load_delay=1.0)
    w = issue6_window(ui, first, model_factory=lambda path: fake_factory(second))
    pane = w.area.current_pane()
    send(qtbot, pane, "hello")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    picked = tmp_path / "second.gguf"
    picked.write_bytes(b"GGUF")
    w.model_opener._check = lambda p: {"path": p}
    w.model_opener._choose = lambda _parent, _start: str(picked)
    w.findChild(type(w.open_model_action), "actionOpenModel").trigger()
    qtbot.waitUntil(lambda: w.findChild(QMessageBox, "switchModelBox") is not None, timeout=5000)
    w.findChild(QMessageBox, "switchModelBox").accept()  # "replies will be stopped": yes
    wait_idle(qtbot, pane)
    stopped = pane.messages[-1]
    assert stopped.role == "assistant" and stopped.stats["model_id"].startswith("first")
    send(qtbot, pane, "again")  # queued while the second model is still loading
    wait_idle(qtbot, pane)
    history = second.prepared[-1][1]
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert all(m.token_ids is None for m in history)  # never the first model's ids


def test_a_template_over_budget_is_refused_and_chatml_offered(ui, qtbot, tmp_path: Path) -> None:
    """Open Model on a GGUF whose template loops forever: refused with the reason, and the
    built-in ChatML offered (the model has ChatML's tokens); accepting loads with ChatML."""
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory

    picked = tmp_path / "loops.gguf"
    write_tiny_gguf(picked, tokenizer={"template": "{% for i in range(100000) %}{% for j in "
                                       "range(100000) %}{% endfor %}{% endfor %}"})
    second = RecordingBackend(replies=("ok",), model_name="second")
    loaded: list[tuple[str, dict]] = []

    def model_factory(path: str, **options):
        loaded.append((path, options))
        return fake_factory(second)

    w = issue6_window(ui, RecordingBackend(replies=("a",), model_name="first"), model_factory=model_factory)
    with qtbot.waitSignal(w.model_opener.checked, timeout=20000) as sig:
        w.model_opener.open_path(str(picked))  # the real check_model_file
    assert sig.args == [str(picked), False] and loaded == []
    box = w.findChild(QMessageBox, "modelErrorBox")
    assert box is not None and box.isVisible() and "budget" in box.informativeText()
    use = box.findChild(type(box.buttons()[0]), "useChatmlButton")
    assert use is not None and use.isVisible()
    with qtbot.waitSignal(w.bridge.backendStateChanged, timeout=20000,
                          check_params_cb=lambda state: state == "ready"):
        use.click()
    assert loaded == [(str(picked), {"chat_template": "chatml"})]
    assert w.bridge.model_info["name"] == "second"


def test_no_chatml_offer_for_other_errors(qtbot, tmp_path: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF")
    opener = ModelOpener(parent, lambda path, facts: None)
    with qtbot.waitSignal(opener.checked, timeout=5000):
        opener.open_path(str(bad))
    box = parent.findChild(QMessageBox, "modelErrorBox")
    assert box.findChild(type(box.buttons()[0]), "useChatmlButton") is None


def test_a_model_that_fails_to_load_gives_way_to_the_previous_one(ui, qtbot, tmp_path: Path) -> None:
    """The checks pass but the load fails (memory, a kernel refusing a tensor): the model that
    ran before is loaded again, one message says why, and it stays the remembered model."""
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory, send, wait_idle

    from turbospark_app.ui.dialogs.first_run import MODEL_PATH_KEY

    first = RecordingBackend(replies=("again ok",), model_name="first")
    loads: list[str] = []

    def model_factory(path: str):
        loads.append(Path(path).name)
        if path.endswith("big.gguf"):
            def fail():
                raise MemoryError("not enough memory for big.gguf")
            return fail
        return fake_factory(first)

    w = issue6_window(ui, first, model_factory=model_factory)
    pane = w.area.current_pane()
    w.model_opener._check = lambda p: {"path": p}
    w.model_opener.open_path(str(tmp_path / "big.gguf"))
    qtbot.waitUntil(lambda: w.models.failure_box is not None, timeout=5000)
    box = w.models.failure_box
    assert box.isVisible() and box.text() == "big.gguf could not be loaded"
    assert "not enough memory" in box.informativeText() and "first.gguf" in box.informativeText()
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready" and w.bridge.model_info.get("name") == "first",
                    timeout=5000)
    assert loads == ["big.gguf", "first.gguf"]
    assert ui.settings().value(MODEL_PATH_KEY) == "/models/first.gguf"
    assert not [b for b in w.findChildren(QMessageBox, "warningBox") if b.isVisible()]
    send(qtbot, pane, "still there?")
    wait_idle(qtbot, pane)
    assert pane.messages[-1].content == "again ok"


def test_a_base_model_opens_for_raw_completion_with_the_chatml_offer(ui, qtbot, tmp_path: Path) -> None:
    """Open Model on a GGUF without a chat template: not refused, not forced into ChatML; it is
    switched to at once (raw completion) and a note says so, offering ChatML (it has the tokens)."""
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import fake_factory

    picked = tmp_path / "base.gguf"
    write_tiny_gguf(picked, tokenizer={"template": None})
    loaded: list[tuple[str, dict]] = []

    def model_factory(path: str, **options):
        loaded.append((path, options))
        return fake_factory(RecordingBackend(replies=("ok",), model_name=f"m{len(loaded)}"))

    w = issue6_window(ui, RecordingBackend(replies=("a",), model_name="first"), model_factory=model_factory)
    with qtbot.waitSignal(w.model_opener.checked, timeout=20000) as sig:
        w.model_opener.open_path(str(picked))  # the real check_model_file
    assert sig.args == [str(picked), True] and loaded == [(str(picked), {})]
    assert w.findChild(QMessageBox, "modelErrorBox") is None
    box = w.model_opener.notice
    assert box is not None and box.isVisible() and box.text() == "This model has no chat template"
    assert "raw completion" in box.informativeText() and "base.gguf" in box.informativeText()
    use = box.findChild(type(box.buttons()[0]), "useChatmlButton")
    assert use is not None
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready", timeout=20000)
    with qtbot.waitSignal(w.model_opener.checked, timeout=20000):
        use.click()
    assert loaded[-1] == (str(picked), {"chat_template": "chatml"})


def test_a_base_model_without_chatml_tokens_gets_no_chatml_offer(qtbot, tmp_path: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    picked = tmp_path / "base.gguf"
    write_tiny_gguf(picked, tokenizer={"template": None, "specials": ["<s>", "</s>", "<unk>"]})
    switched: list = []
    opener = ModelOpener(parent, lambda path, facts: switched.append(facts))
    with qtbot.waitSignal(opener.checked, timeout=20000):
        opener.open_path(str(picked))
    assert switched and switched[0]["has_chat_template"] is False and not switched[0]["chatml_available"]
    box = parent.findChild(QMessageBox, "rawModelBox")
    assert box is not None and box.isVisible()
    assert box.findChild(type(box.buttons()[0]), "useChatmlButton") is None
