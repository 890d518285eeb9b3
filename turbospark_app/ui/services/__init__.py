"""The window's background services: the engine bridge, the local API server, the tool hub,
model switching, the catalog's network tasks, work done ahead."""
