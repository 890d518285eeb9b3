"""`usage.json` in a cache folder (an entry, or one of its `ort-*` sessions): what it is for
and when it was last used, read by `turbospark model cache list`, Settings and the eviction.

It is bookkeeping, not payload: the integrity check skips it (`cache_integrity`), and a missing
or unreadable one only makes the folder look old (its modification time stands in).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USAGE_FILE = "usage.json"
MAX_SOURCES = 8  # source paths remembered per entry (the most recently seen)


@dataclass
class Usage:
    """What `usage.json` says: model name, kind, source paths -> last seen, last used."""

    model: str = ""
    kind: str = ""
    sources: dict[str, float] = field(default_factory=dict)
    last_used: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "sources": self.sources,
                "last_used": self.last_used}


def read_usage(folder: Path) -> Usage:
    """The folder's usage; a missing or damaged file reads as "used when last modified"."""
    try:
        doc = json.loads((folder / USAGE_FILE).read_text("utf-8"))
        sources = {str(k): float(v) for k, v in dict(doc.get("sources", {})).items()}
        return Usage(str(doc.get("model", "")), str(doc.get("kind", "")), sources,
                     float(doc.get("last_used", 0.0)))
    except (OSError, ValueError, TypeError, AttributeError):
        try:
            return Usage(last_used=folder.stat().st_mtime)
        except OSError:
            return Usage()


def record_use(folder: Path, *, model: str = "", kind: str = "", source: Path | None = None,
               now: float | None = None) -> None:
    """Note a use of `folder` now (from `source`, a GGUF path); written atomically. A cache
    that cannot be written is not an error here: the weights are already loaded."""
    now = time.time() if now is None else now
    usage = read_usage(folder)
    usage.model = usage.model or model  # the name it was built under stays (copies add sources)
    usage.kind = kind or usage.kind
    usage.last_used = now
    if source is not None:
        usage.sources[str(Path(source).resolve())] = now
        newest = sorted(usage.sources.items(), key=lambda kv: kv[1], reverse=True)[:MAX_SOURCES]
        usage.sources = dict(newest)
    tmp = folder / f".usage-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        tmp.write_text(json.dumps(usage.to_dict(), indent=1), "utf-8")
        os.replace(tmp, folder / USAGE_FILE)
    except OSError:
        tmp.unlink(missing_ok=True)
