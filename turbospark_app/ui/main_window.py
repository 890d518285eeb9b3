"""The main window: sidebar | conversation panes (tabs + splits), menus, status bar.

Layout (which conversations are open, how they are grouped, splitter sizes, window geometry)
lives in QSettings and is restored at start; conversations and messages live in the Store.
Closing the window stops every running turn (the stopped replies are still saved), then
stops the engine thread and closes the store.

Issue 6 adds: File > Open Model… (checked, then the engine switches backends), the Settings
dialog (Conversation > Settings…), the pacing / cancellation QA dock (View > QA Panel),
keyboard navigation between panes, Model Info and About dialogs.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QPalette
from PySide6.QtWidgets import QMainWindow, QMessageBox, QSplitter, QWidget

from ..conversations.store import Store
from .dialogs.about import AboutDialog
from .services.api_server import install_api_server
from .services.bridge import EngineBridge
from .catalog_menu import ModelsMenu
from .pane.conversation_pane import ConversationPane
from .documents_menu import install_documents
from .prefs.endpoints import EndpointsDialog
from .dialogs.gguf_info import FileDescriber
from .dialogs.models import ModelInfoDialog
from .services.model_switch import ModelFactory, ModelSwitcher
from .navigation import focus_input
from .pane_area import PaneArea
from .qa.panel import QAPanel
from .pane.remote_source import PaneEngine, RemoteHub
from .prefs.store import read_json, write_json
from .prefs.speculation import SPECULATION_SETTING
from .prefs.stream_gap import STREAM_GAP_SETTING, stream_gap_ms
from .prefs.dialog import (
    SettingsDialog,
    load_defaults,
    load_cache_ram,
    load_session_slots,
    save_defaults,
    save_cache_ram,
    save_session_slots,
)
from .sidebar import Sidebar, dot_icon
from .pane.source_picker import SourcePicker
from .status_bar import EngineStatusBar, model_label
from .window_menus import build_menus

DEFAULT_SIZE = (1280, 820)


class MainWindow(QMainWindow):
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        bridge: EngineBridge,
        settings: QSettings,
        *,
        model_factory: ModelFactory | None = None,
        remote: RemoteHub | None = None,
        threads_flag: int | None = None,
        speculation_flag: str | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`model_factory(path, chat_template=, threads=)` builds the backend factory File > Open
        Model… and the Threads setting switch to (None: the action explains that this window
        cannot switch models). `remote`: the remote engines (saved endpoints, the HTTP client);
        one over the saved endpoints when None. `threads_flag`: --threads, which wins over the
        setting (as $TURBOSPARK_THREADS does); `speculation_flag`: --speculation, the same over
        the Speculation setting (applied to the bridge here and on every change)."""
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.store = store
        self.bridge = bridge
        self.remote = remote if remote is not None else RemoteHub(parent=self)
        self.settings = settings
        self._closed = False
        self._notices: list[tuple[str, str]] = []
        self.model_factory = model_factory
        self.defaults: dict[str, Any] = load_defaults(settings)
        self.models = ModelSwitcher(self, bridge, settings, model_factory,
                                    lambda: [p for p in self.area.panes() if p.busy], threads_flag)
        self.model_opener = self.models.opener
        self.speculation_flag = speculation_flag
        try:  # (run_app refuses to start on a bad $TURBOSPARK_SPECULATION before this)
            bridge.speculation = SPECULATION_SETTING.current(settings, speculation_flag).mode
        except ValueError:
            bridge.speculation = None
        bridge.max_stream_gap_ms = stream_gap_ms(settings)
        self.settings_dialog: SettingsDialog | None = None
        self.endpoints_dialog: EndpointsDialog | None = None
        self.sidebar = Sidebar(self)
        self.area = PaneArea(self._make_pane, self)
        self.status = EngineStatusBar(bridge, self, remote=self.remote)
        self.setStatusBar(self.status)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self.area)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(1, False)
        self.setCentralWidget(self.splitter)
        self.setMinimumSize(720, 480)
        self.qa_panel = QAPanel(bridge, self, title_of=self._title_of)
        self.remote.engineEvent.connect(self.qa_panel.remote_event)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.qa_panel)
        self.qa_panel.hide()
        self._build_menus()
        self.catalog = ModelsMenu(self)  # Models › Find Models… (Hugging Face), My Models
        self.api = install_api_server(self)  # Server menu, status-bar item, QA panel table
        self.documents = install_documents(self)  # Documents menu, collections, QA panel table

        self.sidebar.openRequested.connect(lambda cid: self.area.open(cid))
        self.sidebar.newRequested.connect(self.new_conversation)
        self.sidebar.renamed.connect(self.rename_conversation)
        self.sidebar.deleteRequested.connect(self.delete_conversation)
        self.area.currentPaneChanged.connect(self._current_pane_changed)
        self.bridge.backendStateChanged.connect(self._backend_state_changed)
        self._restore()

    # -- construction ----------------------------------------------------------------------

    def _action(self, menu: Any, text: str, slot: Any, shortcut: Any = None, name: str = "",
                fallback: str | None = None) -> QAction:
        action = QAction(text, self)
        if isinstance(shortcut, QKeySequence.StandardKey):
            # Every platform binding (QKeySequence(key) keeps only the first: Close would be
            # Ctrl+F4 without Ctrl+W); `fallback` where the platform has none (Linux: Quit).
            keys = QKeySequence.keyBindings(shortcut)
            action.setShortcuts(keys if keys else ([QKeySequence(fallback)] if fallback else []))
        elif shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        if name:
            action.setObjectName(name)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        build_menus(self)

    def open_mcp_servers(self) -> None:
        """Tools › MCP Servers…: the servers, their switches, mcp.json."""
        from .dialogs.mcp import McpServersDialog
        from .services.tools_service import tools_service

        McpServersDialog(tools_service(), self).exec()

    def _make_pane(self, conversation_id: str) -> ConversationPane | None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return None
        engine = PaneEngine(self.bridge, self.remote, self.store.model_source(conv.id))
        pane = ConversationPane(conv, self.store, engine, self.defaults)
        engine.setParent(pane)
        picker = SourcePicker(engine, self.store, conv.id, pane)
        pane.source_picker = picker
        pane.status_row.insertWidget(0, picker)
        pane.busyChanged.connect(lambda _cid, busy: picker.set_busy(busy))
        picker.manageRequested.connect(self.open_endpoints)
        engine.sourceChanged.connect(lambda: self._current_pane_changed(self.area.current_pane()))
        pane.titleChanged.connect(self._title_changed)
        pane.busyChanged.connect(self._busy_changed)
        pane.turnEnded.connect(lambda cid, _how: self.sidebar.touch(cid))
        pane.newConversationRequested.connect(self._send_in_new_conversation)
        return pane

    def _restore(self) -> None:
        self.sidebar.set_conversations(self.store.conversations())
        geometry = self.settings.value("window/geometry")
        restored = isinstance(geometry, (QByteArray, bytes)) and self.restoreGeometry(QByteArray(geometry))
        if not restored:
            self.resize(*DEFAULT_SIZE)
        sizes = read_json(self.settings, "window/splitter", None)
        self.splitter.setSizes(sizes if isinstance(sizes, list) and len(sizes) == 2 else [250, DEFAULT_SIZE[0] - 250])
        sidebar_visible = read_json(self.settings, "window/sidebar", True) is not False
        self.sidebar.setVisible(sidebar_visible)
        self.toggle_sidebar_action.setChecked(sidebar_visible)
        layout = read_json(self.settings, "layout/panes", {})
        if isinstance(layout, dict):
            self.area.restore_layout(layout)
        self.qa_panel.setVisible(read_json(self.settings, "window/qa_panel", False) is True)
        self._ensure_a_pane()
        self._current_pane_changed(self.area.current_pane())

    def save_layout(self) -> None:
        """Write the open panes, geometry and splitter sizes to QSettings."""
        write_json(self.settings, "layout/panes", self.area.layout_state())
        write_json(self.settings, "window/splitter", self.splitter.sizes())
        write_json(self.settings, "window/sidebar", self.sidebar.isVisible())
        write_json(self.settings, "window/qa_panel", self.qa_panel.isVisible())
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.sync()

    # -- actions ---------------------------------------------------------------------------

    def new_conversation(self) -> ConversationPane | None:
        """Create a conversation and open it in the current group."""
        try:
            conv = self.store.create_conversation(settings=dict(self.defaults))
        except sqlite3.Error as e:
            self._warn("Could not create a conversation", str(e))
            return None
        self.sidebar.add_conversation(conv)
        pane = self.area.open(conv.id)
        self.sidebar.select(conv.id)
        return pane

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        """Save a new title and show it everywhere."""
        try:
            self.store.rename_conversation(conversation_id, title)
        except sqlite3.Error as e:
            self._warn("Could not rename the conversation", str(e))
            return
        self._title_changed(conversation_id, title)

    def rename_current(self) -> None:
        """Inline-rename the current pane's conversation in the sidebar."""
        pane = self.area.current_pane()
        if pane is not None:
            if not self.sidebar.isVisible():
                self._toggle_sidebar()
            self.sidebar.begin_rename(pane.conversation_id)

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation after confirmation (its turn is stopped, its KV freed)."""
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        answer = QMessageBox.question(
            self, "Delete conversation",
            f"Delete “{conv.title}” and all its messages? This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        found = self.area.find(conversation_id)
        if found is not None:
            pane = found[0].widget(found[1])
            assert isinstance(pane, ConversationPane)
            self.area.close_pane(pane, discard=True)  # its running turn saves nothing
        try:
            self.store.delete_conversation(conversation_id)
        except sqlite3.Error as e:
            self._warn("Could not delete the conversation", str(e))
            return
        self.bridge.drop_session(conversation_id)
        self.sidebar.remove(conversation_id)
        self._ensure_a_pane()

    def _ensure_a_pane(self) -> None:
        """Never leave the window empty: open the newest conversation, or start one."""
        if self.area.panes():
            return
        ids = self.sidebar.conversation_ids()
        if ids:
            self.area.open(ids[0])
        else:
            self.new_conversation()

    def delete_current(self) -> None:
        """Delete the current pane's conversation (asks first)."""
        pane = self.area.current_pane()
        if pane is not None:
            self.delete_conversation(pane.conversation_id)

    def stop_current(self) -> None:
        """Stop the current pane's turn."""
        pane = self.area.current_pane()
        if pane is not None:
            pane.stop()

    def close_current_pane(self) -> None:
        """Close the current pane (keeps at least one open)."""
        pane = self.area.current_pane()
        if pane is None:
            return
        self.area.close_pane(pane)
        if not self.area.panes():
            ids = [c for c in self.sidebar.conversation_ids() if c != pane.conversation_id]
            if ids:
                self.area.open(ids[0])
            else:
                self.new_conversation()

    def split_right(self) -> None:
        """Split: a second group of panes side by side."""
        def next_conversation() -> str | None:
            for cid in self.sidebar.conversation_ids():
                if self.area.find(cid) is None:
                    return cid
            conv = self.store.create_conversation(settings=dict(self.defaults))
            self.sidebar.add_conversation(conv)
            return conv.id

        self.area.split_right(next_conversation)

    def show_model_info(self) -> None:
        """Help > Model Info: the loaded model's facts and chat template (or why there is none)."""
        info = self.bridge.model_info
        if not info:
            text = (f"The model could not be loaded:\n{self.bridge.backend_error}"
                    if self.bridge.backend_state == "failed" else "The model is still loading.")
            box = QMessageBox(QMessageBox.Icon.Information, "Model Info", text, QMessageBox.StandardButton.Ok, self)
            box.open()
            return
        ModelInfoDialog(info, self, describer=FileDescriber.for_window(self),
                        choose_projector=self.models.choose_projector if self.model_factory else None).open()

    def show_about(self) -> None:
        """Help > About TurboSpark: versions of everything, the model included."""
        AboutDialog(self.bridge.model_info, self).open()

    def open_model(self, ask_projector: bool = False) -> None:
        """File > Open Model…: pick a GGUF; it is checked before the engine switches to it
        (`ask_projector`: …with Projector…, then which vision projector)."""
        if self.model_factory is None:
            self._warn("Open Model", "This window was started with a fixed engine; it cannot load model files.")
            return
        self.models.open_dialog(ask_projector)

    def switch_model(self, path: str, facts: dict[str, Any] | None = None) -> None:
        """Load the (checked) GGUF at `path` (ui.services.model_switch: stops running replies, asks first)."""
        self.models.switch_model(path, facts)

    def open_settings(self) -> None:
        """Conversation > Settings…: the current conversation's settings (and the defaults)."""
        pane = self.area.current_pane()
        if pane is None or self.settings_dialog is not None:
            return
        dialog = SettingsDialog(pane.settings_values, pane.conversation.system_prompt,
                                session_slots=load_session_slots(self.settings),
                                cache_ram=load_cache_ram(self.settings),
                                max_context=self.bridge.max_context or None,
                                conversation_title=pane.conversation.title, threads=self.models.threads(),
                                model_loaded=bool(self.bridge.model_info.get("path")),
                                speculation=SPECULATION_SETTING.current(self.settings, self.speculation_flag),
                                kv_cache=self.models.cache_types(),
                                stream_gap=STREAM_GAP_SETTING.current(self.settings), parent=self)
        dialog.accepted.connect(lambda: self._apply_settings(dialog, pane.conversation_id))
        dialog.finished.connect(lambda _r: setattr(self, "settings_dialog", None))
        self.settings_dialog = dialog
        dialog.open()

    def open_endpoints(self) -> None:
        """Settings › Endpoints: the remote servers conversations can run on."""
        if self.endpoints_dialog is None:
            dialog = EndpointsDialog(self.remote, self)
            dialog.finished.connect(lambda _r: setattr(self, "endpoints_dialog", None))
            self.endpoints_dialog = dialog
            dialog.open()

    def _apply_settings(self, dialog: SettingsDialog, conversation_id: str) -> None:
        values = dialog.values()
        found = self.area.find(conversation_id)
        if found is not None:
            pane = found[0].widget(found[1])
            if isinstance(pane, ConversationPane):
                pane.apply_settings(values, dialog.system_prompt())
        else:  # the pane was closed meanwhile: the conversation still gets them
            try:
                self.store.update_conversation(conversation_id, system_prompt=dialog.system_prompt(),
                                               settings=values)
            except sqlite3.Error as e:
                self._warn("Settings could not be saved", str(e))
        if dialog.use_as_defaults():
            self.defaults = dict(values)
            save_defaults(self.settings, values)
        save_session_slots(self.settings, dialog.session_slots())
        save_cache_ram(self.settings, dialog.cache_ram())
        speculation = dialog.speculation_change()
        if speculation is not None:  # no reload: the bridge stamps it on the next turns
            SPECULATION_SETTING.save(self.settings, speculation)
            self.bridge.speculation = speculation
        gap = dialog.stream_gap_change()
        if gap is not None:  # no reload either
            STREAM_GAP_SETTING.save(self.settings, gap)
            self.bridge.max_stream_gap_ms = float(gap)
        load = dialog.load_changes()
        if load:
            self.models.change_load(load)

    def _send_in_new_conversation(self, text: str) -> None:
        """Overflow > New Conversation: the message goes to a fresh conversation and is sent."""
        pane = self.new_conversation()
        if pane is not None:
            pane.input.setPlainText(text)
            pane.send()

    def _title_of(self, conversation_id: str) -> str | None:
        conv = self.store.conversation(conversation_id)
        return None if conv is None else conv.title

    # -- reactions -------------------------------------------------------------------------

    def _toggle_sidebar(self) -> None:
        visible = not self.sidebar.isVisible()
        self.sidebar.setVisible(visible)
        self.toggle_sidebar_action.setChecked(visible)

    def _title_changed(self, conversation_id: str, title: str) -> None:
        self.sidebar.set_title(conversation_id, title)
        self.area.set_tab_title(conversation_id, title)
        found = self.area.find(conversation_id)
        if found is not None:
            pane = found[0].widget(found[1])
            if isinstance(pane, ConversationPane):
                pane.set_title(title)
        self._current_pane_changed(self.area.current_pane())

    def _busy_changed(self, conversation_id: str, busy: bool) -> None:
        self.sidebar.set_busy(conversation_id, busy)
        icon = dot_icon(self.palette().color(QPalette.ColorRole.Highlight)) if busy else QIcon()
        self.area.set_tab_busy(conversation_id, icon)

    def _current_pane_changed(self, pane: ConversationPane | None) -> None:
        if pane is None:
            self.setWindowTitle("TurboSpark")
            return
        engine = pane.engine
        self.status.set_remote(engine.label() if getattr(engine, "is_remote", False) else None)
        self.setWindowTitle(f"{pane.conversation.title} — TurboSpark")
        self.sidebar.select(pane.conversation_id)

    def _backend_state_changed(self, state: str) -> None:
        if self.models.backend_state_changed(state):
            return  # a failed switch is being undone; the switcher said why
        if state == "failed":
            self._warn(
                "Model",
                f"The model could not be loaded:\n{self.bridge.backend_error}\n\nYour conversations are still here; replies need a "
                "model. Open one with File › Open Model…, fetch the default one with `turbospark model fetch`, "
                "or start with --model FILE.",
            )
        elif state == "ready":
            self.status.labels["model"].setText(model_label(self.bridge.model_info))

    def add_notice(self, title: str, text: str) -> None:
        """A warning for the user, shown now or as soon as the window is shown."""
        if self.isVisible():
            self._warn(title, text)
        else:
            self._notices.append((title, text))

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        """Show notices queued before the window was visible; start with the input focused."""
        super().showEvent(event)
        if not event.spontaneous():
            # After Qt's own first-focus pick (the sidebar filter): typing should go to the input.
            QTimer.singleShot(0, lambda: focus_input(self.area))
        notices, self._notices = self._notices, []
        for title, text in notices:
            self._warn(title, text)

    def _warn(self, title: str, text: str) -> None:
        """A window-modal warning that does not block the event loop (streams go on)."""
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setObjectName("warningBox")
        box.open()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        """Save the layout, stop every turn (their replies are saved), stop the engine."""
        if not self._closed:
            self._closed = True
            self.save_layout()
            self.status.timer.stop()
            self.qa_panel.poll_timer.stop()
            self.qa_panel.flush_timer.stop()
            self.remote.shutdown()
            self.catalog.shutdown()
            self.api.shutdown()
            self.documents.close()
            self.bridge.shutdown()
            self.store.close()
        super().closeEvent(event)
