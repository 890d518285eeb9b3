"""The window's menu bar: File, Conversation, View, Tools and Help (the Models and Documents menus
are installed by their own modules: catalog_menu, documents_menu)."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QAction, QKeySequence

from .conversation_menu import add_message_actions
from .conversation_menu import watch as watch_menu
from .navigation import cycle_pane, focus_input, next_pane_keys, previous_pane_keys


def build_menus(window: Any) -> None:
    """Fill `window`'s (a MainWindow) menu bar; actions call its methods."""
    bar = window.menuBar()
    file = bar.addMenu("&File")
    window._action(file, "&New Conversation", window.new_conversation, QKeySequence.StandardKey.New, "actionNew")
    window._action(file, "&Close Pane", window.close_current_pane, QKeySequence.StandardKey.Close, "actionClosePane")
    file.addSeparator()
    window.open_model_action = window._action(file, "&Open Model…", window.open_model, QKeySequence.StandardKey.Open,
                                              "actionOpenModel")
    window._action(file, "Open Model with &Projector…", lambda: window.open_model(True), None, "actionOpenWithProjector")
    file.addSeparator()
    window._action(file, "Export &QA Evidence…", lambda: window.qa_panel.export_dialog(), "Ctrl+Shift+E",
                   "actionExportQA")
    file.addSeparator()
    quit_action = window._action(file, "&Quit", window.close, QKeySequence.StandardKey.Quit, "actionQuit", "Ctrl+Q")
    quit_action.setMenuRole(QAction.MenuRole.QuitRole)
    conv = bar.addMenu("&Conversation")
    window._action(conv, "&Stop Generating", window.stop_current, "Ctrl+.", "actionStop")
    window._action(conv, "&Rename…", window.rename_current, "F2", "actionRename")
    window._action(conv, "&Delete…", window.delete_current, "Ctrl+Shift+Backspace", "actionDelete")
    conv.addSeparator()
    add_message_actions(window, conv, window.area.current_pane)
    conv.addSeparator()
    settings_action = window._action(conv, "S&ettings…", window.open_settings, QKeySequence.StandardKey.Preferences,
                                     "actionSettings", "Ctrl+,")
    settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
    window._action(conv, "E&ndpoints…", window.open_endpoints, None, "actionEndpoints")
    watch_menu(conv, window.area.current_pane)
    view = bar.addMenu("&View")
    window._action(view, "Split &Right", window.split_right, "Ctrl+\\", "actionSplitRight")
    window._action(view, "&Unsplit", window.area.unsplit, "Ctrl+Shift+\\", "actionUnsplit")
    window._action(view, "&Move Pane to Next Group", window.area.move_current_to_next_group,
                   "Ctrl+Alt+Right", "actionMovePane")
    view.addSeparator()
    next_pane = window._action(view, "&Next Pane", lambda: cycle_pane(window.area, 1), None, "actionNextPane")
    next_pane.setShortcuts(next_pane_keys())
    previous = window._action(view, "&Previous Pane", lambda: cycle_pane(window.area, -1), None, "actionPreviousPane")
    previous.setShortcuts(previous_pane_keys())
    window._action(view, "&Focus Input", lambda: focus_input(window.area), "Ctrl+L", "actionFocusInput")
    view.addSeparator()
    qa = window.qa_panel.toggleViewAction()
    qa.setText("&QA Panel")
    qa.setObjectName("actionQAPanel")
    qa.setShortcut(QKeySequence("Ctrl+Shift+Q"))
    view.addAction(qa)
    window.toggle_sidebar_action = window._action(view, "Show &Sidebar", window._toggle_sidebar, "Ctrl+Shift+S",
                                                  "actionSidebar")
    window.toggle_sidebar_action.setCheckable(True)
    window.toggle_sidebar_action.setChecked(True)
    tools = bar.addMenu("&Tools")
    window._action(tools, "&MCP Servers…", window.open_mcp_servers, None, "actionMcpServers")
    help_menu = bar.addMenu("&Help")
    window._action(help_menu, "&Model Info…", window.show_model_info, None, "actionModelInfo")
    about = window._action(help_menu, "&About TurboSpark", window.show_about, None, "actionAbout")
    about.setMenuRole(QAction.MenuRole.AboutRole)
