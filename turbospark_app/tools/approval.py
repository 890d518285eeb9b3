"""The user's approval of a call: nothing runs without it.

Allow once · Always allow this tool · Deny. "Always" is remembered per server (its command line
or URL: a renamed entry running something else asks again) and tool, in `tool-approvals.json`
in the config folder, and can be revoked (the servers dialog). It is suspended for a call made
while text the user did not write (an attached document) is in the prompt: such a call asks,
and says why.
"""

from __future__ import annotations

import json
from pathlib import Path

ALLOW_ONCE, ALWAYS, DENY = "once", "always", "deny"
APPROVALS_FILENAME = "tool-approvals.json"
UNTRUSTED_NOTE = ("Asked although you always allow this tool: a document's text is in the "
                  "prompt, and text you did not write could be steering the call.")


class Approvals:
    """The remembered "always allow" pairs (server identity, tool)."""

    def __init__(self, path: Path | None = None) -> None:
        """`path` None: kept in memory only (the command line, tests)."""
        self.path = path
        self._always: set[tuple[str, str]] = set()
        if path is not None:
            try:
                pairs = json.loads(path.read_text("utf-8"))
                self._always = {(str(a), str(b)) for a, b in pairs}
            except (OSError, ValueError, TypeError):
                self._always = set()

    def allowed(self, identity: str, tool: str, *, untrusted_text: bool = False) -> bool:
        """Whether the call may run without asking."""
        return not untrusted_text and (identity, tool) in self._always

    def remember(self, identity: str, tool: str) -> None:
        self._always.add((identity, tool))
        self._save()

    def revoke(self, identity: str, tool: str | None = None) -> None:
        """Forget one tool's "always" (or every tool of the server, `tool` None)."""
        self._always = {p for p in self._always if p[0] != identity or (tool is not None and p[1] != tool)}
        self._save()

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self._always)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(sorted(self._always)), "utf-8")
        tmp.replace(self.path)


def approvals_path() -> Path:
    from ..host.folders import config_dir

    return config_dir() / APPROVALS_FILENAME
