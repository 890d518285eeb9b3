"""The window's tools: one ToolHub (every MCP server in `mcp.json`, on the app's qasync loop)
and the remembered approvals, shared by every pane and the servers dialog. Stopped when the
app quits (`stop_all`: no orphan servers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...tools.approval import Approvals, approvals_path
from ...tools.config import ConfigError, ServerEntry, config_path, parse_config, save_config
from ...tools.hub import ToolHub
from ...tools.server import McpServer


class ToolsService(QObject):
    """See the module docstring. `changed` (server name): a server's state or the config."""

    changed = Signal(str)

    def __init__(self, path: Path | None = None, approvals: Approvals | None = None,
                 transports: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.path = path or config_path()
        self.approvals = approvals if approvals is not None else Approvals(approvals_path())
        self.problem = ""  # why the file on disk cannot be used (it is then ignored)
        self.hub = ToolHub(self._read(), on_change=self._server_changed, transports=transports)

    def _read(self) -> tuple[ServerEntry, ...]:
        try:
            text = self.path.read_text("utf-8") if self.path.exists() else ""
            self.problem = ""
            return parse_config(text)
        except (OSError, UnicodeDecodeError) as e:
            self.problem = f"cannot read {self.path}: {e}"
        except ConfigError as e:
            self.problem = f"{self.path}: {e}"
        return ()

    def _server_changed(self, server: McpServer) -> None:
        self.changed.emit(server.name)

    def text(self) -> str:
        """The file's text (a starting example when there is none)."""
        try:
            return self.path.read_text("utf-8")
        except OSError:
            return '{\n  "mcpServers": {\n  }\n}\n'

    def save(self, text: str) -> list[McpServer]:
        """Check and save `text` (ConfigError naming the line: nothing changes); returns the
        servers to stop (their entry changed or went)."""
        entries = save_config(self.path, text)
        self.problem = ""
        gone = self.hub.configure(entries)
        self.changed.emit("")
        return gone

    def server_names(self) -> list[str]:
        return list(self.hub.servers)

    async def stop_all(self) -> None:
        await self.hub.stop_all()


_service: ToolsService | None = None


def tools_service() -> ToolsService:
    """The app's ToolsService (made on first use)."""
    global _service
    if _service is None:
        _service = ToolsService()
    return _service


def set_tools_service(service: ToolsService | None) -> None:
    """Replace the app's ToolsService (tests)."""
    global _service
    _service = service


async def stop_tools() -> None:
    """Stop every MCP server the app started (the app quits)."""
    if _service is not None:
        await _service.stop_all()
