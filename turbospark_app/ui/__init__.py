"""The Qt desktop UI. Entry point: `turbospark_app.ui.app.run_app`.

Rooms: `pane/` (one conversation: transcript, input, turns, tools, attachments, collections),
`render/` (how a reply is drawn), `dialogs/`, `prefs/` (settings and their dialog), `qa/` (the
pacing and cancellation panel), `services/` (the engine bridge, the local API, the tool and
document hubs: no widgets of their own); the window's shell (app, main window, pane area,
sidebar, status bar, menus) stays here.
May import: every layer below: server, remote, tools, service, conversations, documents, chat,
catalog, readings, model, media, engine, host.
"""
