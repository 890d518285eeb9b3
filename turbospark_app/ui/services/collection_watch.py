"""Collections re-indexed when their files change: a QFileSystemWatcher on each collection's
linked files and folders (and the folders under them, up to `MAX_DIRS` a collection: inotify
watches are a per-user budget) and a look at every collection every `RECHECK_MS` for what a
watcher misses (a file edited in place inside a folder). A change waits `SETTLE_MS` for more
(a save is often several writes) before the hub re-indexes; an unchanged file costs a stat.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer

from ...documents.service import decode_sources
from .docs_hub import DocsHub

MAX_DIRS = 256
SETTLE_MS = 2000
RECHECK_MS = 10 * 60 * 1000


class CollectionWatch(QObject):
    """See the module docstring."""

    def __init__(self, hub: DocsHub, parent: QObject | None = None) -> None:
        super().__init__(parent or hub)
        self.hub = hub
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(self._changed)
        self.watcher.fileChanged.connect(self._changed)
        self._owner: dict[str, set[str]] = {}  # watched path -> collections
        self._dirty: set[str] = set()
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self._reindex_dirty)
        self.recheck = QTimer(self)
        self.recheck.setInterval(RECHECK_MS)
        self.recheck.timeout.connect(hub.reindex)
        self.recheck.start()
        hub.collectionsChanged.connect(self.rewatch)
        self.rewatch()

    def watched(self) -> list[str]:
        return sorted(self._owner)

    def rewatch(self) -> None:
        """Watch what every collection links now."""
        if self.hub.closed:
            return
        owner: dict[str, set[str]] = {}
        for coll in self.hub.store.collections():
            for path in _paths(decode_sources(coll)):
                owner.setdefault(path, set()).add(coll.name)
        old = set(self._owner)
        gone = sorted(old - set(owner))
        new = sorted(set(owner) - old)
        if gone:
            self.watcher.removePaths(gone)
        if new:
            self.watcher.addPaths(new)
        self._owner = owner

    def _changed(self, path: str) -> None:
        self._dirty |= self._owner.get(path, set())
        if self._dirty:
            self._settle.start()

    def _reindex_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        if self.hub.closed:
            return
        known = set(self.hub.names())
        for name in sorted(dirty & known):
            self.hub.reindex(name)


def _paths(sources: list[Path]) -> list[str]:
    """The files and folders to watch for `sources` (folders walked, hidden ones skipped)."""
    out: list[str] = []
    for src in sources:
        if src.is_file():
            out.append(str(src))
        elif src.is_dir():
            dirs = 0
            for root, subdirs, _files in os.walk(src):
                subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
                out.append(root)
                dirs += 1
                if dirs >= MAX_DIRS:
                    break
    return out
