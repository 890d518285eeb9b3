"""The window's dialogs: models (open, info, catalog, my models), MCP servers, first run, about."""
