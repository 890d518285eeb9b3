"""Models › Find Models… and My Models (pytest-qt, offscreen) against the stand-in Hub
(tests/hub_standin.py): search → pick → size-up → download (progress in the dialog and the
status bar) → the model opens and answers, through the app's own model factory; cancel and
resume; an architecture llama.cpp does not run; My Models open / reveal / delete (asks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from hub_standin import HubStandin, standard_hub
from real_window import real_window, tiny_chat  # noqa: F401 (fixture)
from turbospark_app.catalog import config, library

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> HubStandin:
    server = standard_hub(tmp_path_factory.mktemp("hub"), default_model_path).start()
    yield server
    server.stop()


@pytest.fixture
def hub_env(standin: HubStandin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HubStandin:
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    monkeypatch.setenv("TURBOSPARK_CONFIG_DIR", str(tmp_path / "config"))
    standin.requests.clear()
    standin.served.clear()
    standin.slow.clear()
    return standin


def _search(qtbot, dialog, text: str) -> None:
    dialog.search_edit.setText(text)
    qtbot.keyClick(dialog.search_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not dialog.busy and dialog.repos.count() > 0, timeout=15000)


def _pick_repo(qtbot, dialog, repo_id: str) -> None:
    item = next(dialog.repos.item(i) for i in range(dialog.repos.count())
                if dialog.repos.item(i).data(Qt.ItemDataRole.UserRole) == repo_id)
    dialog.repos.setCurrentItem(item)
    qtbot.waitUntil(lambda: not dialog.busy and dialog.files.rowCount() > 0, timeout=30000)


def test_search_pick_download_and_the_model_answers(ui, qtbot, hub_env: HubStandin, tiny_chat: Path) -> None:
    from ui_fakes import send, wait_idle

    w = real_window(ui, tiny_chat)
    assert hub_env.requests == []  # nothing contacts the Hub before the dialog is used
    action = w.findChild(type(w.open_model_action), "actionFindModels")
    assert action.shortcut().toString() == "Ctrl+Shift+M"
    action.trigger()
    dialog = w.catalog.find_dialog
    assert dialog.isVisible() and hub_env.requests == []
    _search(qtbot, dialog, "smollm2")
    _pick_repo(qtbot, dialog, SMOL)
    assert "llama" in dialog.repo_info.text() and "context 8,192" in dialog.repo_info.text()
    assert dialog.files.item(0, 0).text() == "Q4_1"
    assert dialog.files.item(0, 2).text().startswith("fits — needs 0.29 GB")
    assert "KV cache (4,096 tokens, f16): 0.09 GB" in dialog.details.text()  # the numbers, shown
    dialog.context.setValue(32768)
    assert dialog.files.item(0, 2).text().startswith("fits — needs 0.96 GB")
    dialog.context.setValue(4096)
    hub_env.slow["smollm2-135m-instruct-q4_1.gguf"] = 0.005  # long enough to see the progress
    status: list[str] = []
    dialog.statusText.connect(status.append)
    with qtbot.waitSignal(w.bridge.backendStateChanged, timeout=60000,
                          check_params_cb=lambda state: state == "ready"):
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.progress.isVisible(), timeout=5000)
        qtbot.waitUntil(lambda: w.catalog.status_label is not None and "MB/s" in w.catalog.status_label.text(),
                        timeout=10000)
        assert w.catalog.status_label.text().startswith("↓ SmolLM2-135M-Instruct-GGUF:Q4_1 ")
    path = config.models_folder() / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF" / "smollm2-135m-instruct-q4_1.gguf"
    assert w.bridge.model_info["path"] == str(path)
    assert any(s.startswith(f"Downloading {SMOL}:Q4_1: ") and "MB/s" in s for s in status)
    assert status[-1] == ""  # the status bar item goes at the end
    assert w.catalog.status_label.isHidden() and w.status.text("model").startswith("smollm2")
    assert dialog.progress_label.text() == f"Downloaded to {path}"
    pane = w.area.current_pane()
    send(qtbot, pane, "What is the capital of France?")
    # the model answers: its first words are saved as they stream (a busy machine decodes
    # slowly, so the reply is stopped there rather than waited for to its end)
    cid = pane.conversation_id
    qtbot.waitUntil(lambda: not pane.busy or any(m.role == "assistant" and m.content.strip()
                                                 for m in w.store.messages(cid)), timeout=120000)
    pane.stop()
    wait_idle(qtbot, pane, timeout=30000)
    assert pane.messages[-1].role == "assistant" and pane.messages[-1].content.strip()
    # My Models lists it, open now, with its last use
    w.catalog.open_my_models()
    mine = w.catalog.my_models
    assert mine.models[0].path == path and mine.models[0].last_used
    assert "(open now)" in mine.table.item(0, 0).text()


def test_cancel_keeps_the_part_and_a_second_download_resumes(ui, qtbot, hub_env: HubStandin, tiny_chat: Path) -> None:
    w = real_window(ui, tiny_chat)
    w.catalog.open_find()
    dialog = w.catalog.find_dialog
    dialog.search_edit.setText(SMOL)  # a pasted repo id opens the repo directly
    qtbot.keyClick(dialog.search_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: dialog.files.rowCount() == 1 and dialog.download_button.isEnabled(), timeout=30000)
    assert dialog.repos.count() == 0 and not any(p == "/api/models" for _m, p, _q, _h in hub_env.requests)
    hub_env.slow["smollm2-135m-instruct-q4_1.gguf"] = 0.05
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.progress.value() > 100, timeout=30000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.download_task is None, timeout=60000)
    assert "download cancelled" in dialog.progress_label.text()
    folder = config.models_folder() / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    assert not (folder / "smollm2-135m-instruct-q4_1.gguf").exists()
    kept = (folder / ".smollm2-135m-instruct-q4_1.gguf.part").stat().st_size
    hub_env.slow.clear()
    hub_env.settle()
    hub_env.served.clear()
    opened: list[str] = []
    dialog._open_model = opened.append
    assert dialog.download_button.text() == "Resume Download"
    # My Models lists the incomplete download; Open there brings Find Models back on it
    w.catalog.open_my_models()
    mine = w.catalog.my_models
    [partial] = mine.partials
    assert partial.have == kept and "incomplete" in mine.table.item(len(mine.models), 0).text()
    mine.table.selectRow(len(mine.models))
    mine.open_selected()
    qtbot.waitUntil(lambda: not dialog.busy and dialog.download_button.text() == "Resume Download", timeout=30000)
    hub_env.served.clear()  # (reopening the repo read its header's first MBs again)
    dialog.download_button.click()
    assert "resuming" in dialog.progress_label.text()
    qtbot.waitUntil(lambda: dialog.download_task is None, timeout=180000)  # 98 MB fetched and hashed
    size = hub_env.repos[SMOL].files[0].size
    assert hub_env.served["smollm2-135m-instruct-q4_1.gguf"] == size - kept
    assert opened == [str(folder / "smollm2-135m-instruct-q4_1.gguf")]
    mine.refresh()
    assert mine.partials == [] and dialog.download_button.text() == "Open"


def test_an_unrunnable_architecture_is_marked_and_cannot_be_downloaded(ui, qtbot, hub_env: HubStandin, tiny_chat: Path) -> None:
    w = real_window(ui, tiny_chat)
    w.catalog.open_find()
    dialog = w.catalog.find_dialog
    _search(qtbot, dialog, "brand-new")
    _pick_repo(qtbot, dialog, "turbospark-test/brand-new-arch-GGUF")
    assert "llama.cpp cannot run this model" in dialog.repo_info.text()
    assert "unknown model architecture: 'brand-new-arch'" in dialog.repo_info.text()
    assert dialog.files.item(0, 2).text() == "cannot run"
    assert not dialog.download_button.isEnabled()


def test_my_models_open_reveal_delete_asks(ui, qtbot, hub_env: HubStandin, tiny_chat: Path) -> None:
    from turbospark_app.catalog import download, hub

    listing = hub.repo_listing("turbospark-test/tiny-vision-GGUF")
    path = download.run(download.plan(listing, listing.groups[0], config.models_folder()))
    w = real_window(ui, tiny_chat)
    w.catalog.open_my_models()
    mine = w.catalog.my_models
    names = [m.name for m in mine.models]
    assert "turbospark-test/tiny-vision-GGUF:Q8_0" in names
    row = names.index("turbospark-test/tiny-vision-GGUF:Q8_0")
    assert mine.table.item(row, 0).text().endswith("+ projector")
    mine.table.selectRow(row)
    revealed: list[Path] = []
    mine._reveal = revealed.append
    mine.reveal_selected()
    assert revealed == [path]
    mine.delete_selected()
    box = mine.confirm
    assert box.objectName() == "deleteModelBox" and "mmproj-F16.gguf" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert path.exists()
    mine.delete_selected()
    mine.confirm.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: not path.exists(), timeout=5000)
    assert "turbospark-test/tiny-vision-GGUF:Q8_0" not in [m.name for m in mine.models]
    assert library.list_models() == mine.models


def test_picking_another_quantization_reads_its_own_header(ui, qtbot, hub_env: HubStandin, tiny_chat: Path) -> None:
    w = real_window(ui, tiny_chat)
    w.catalog.open_find()
    dialog = w.catalog.find_dialog
    _search(qtbot, dialog, "tiny-llama")
    _pick_repo(qtbot, dialog, "turbospark-test/tiny-llama-GGUF")
    groups = dialog._report.listing.groups
    read_first = dialog._report.shape_file
    other = next(i for i, g in enumerate(groups) if g.first.path != read_first)
    hub_env.requests.clear()
    dialog.files.selectRow(other)
    path = groups[other].first.path
    qtbot.waitUntil(lambda: dialog._exact.get(path) is not None and dialog._exact[path].shape_file == path,
                    timeout=15000)
    ranged = [h.get("range") for m, p, _q, h in hub_env.requests if p.endswith(path) and m == "GET"]
    assert ranged and ranged[0].startswith("bytes=0-")
    assert dialog.files.item(other, 2).text().startswith("fits — needs")
