"""The Qt desktop UI. Entry point: `turbospark_app.ui.app.run_app`.
May import: every layer below: server, remote, tools, service, conversations, documents, chat,
catalog, readings, model, media, engine, host.
"""
