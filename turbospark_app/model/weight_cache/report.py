"""The weight cache in words: what `turbospark model cache list` prints and Settings shows."""

from __future__ import annotations

import time
from pathlib import Path

from .store import ModelCache


def human_size(n: int) -> str:
    """Bytes as KiB / MiB / GiB with one decimal (binary units, as the budget is set)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def when(t: float, now: float | None = None) -> str:
    """A last-used time, e.g. "2026-12-01 15:40 (3 min ago)"; "never" for 0."""
    if t <= 0:
        return "never"
    ago = max(0.0, (time.time() if now is None else now) - t)
    rel = (f"{ago:.0f} s" if ago < 60 else f"{ago / 60:.0f} min" if ago < 3600
           else f"{ago / 3600:.0f} h" if ago < 86400 else f"{ago / 86400:.0f} d")
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(t))} ({rel} ago)"


def model_lines(m: ModelCache, now: float | None = None) -> list[str]:
    """One model's block: name, size, last use, each kind with its size, the sources seen."""
    state = (" · in use" if m.in_use else "") + (" · its GGUF is gone" if m.missing else "")
    lines = [f"{m.model}  [{m.key}]  {human_size(m.size)}  last used {when(m.last_used, now)}{state}"]
    for unit in sorted(m.units, key=lambda u: (u.kind.startswith("prepacked"), u.kind)):
        extra = " (in use)" if unit.in_use else ""
        lines.append(f"    {unit.kind:<28} {human_size(unit.size):>10}  "
                     f"last used {when(unit.last_used, now)}{extra}")
    for source, seen in sorted(m.sources.items(), key=lambda kv: kv[1], reverse=True):
        gone = "" if Path(source).exists() else " (no longer there)"
        lines.append(f"    source {source}  seen {when(seen, now)}{gone}")
    return lines


def summary(total: int, budget: int, default: bool) -> str:
    """"1.2 GiB of 20.0 GiB (default budget)"."""
    return f"{human_size(total)} of {human_size(budget)} ({'default' if default else 'your'} budget)"


def missing_line(models: list[ModelCache]) -> str | None:
    """What the models whose GGUF is gone hold, or None when there are none."""
    gone = [m for m in models if m.missing]
    if not gone:
        return None
    size = human_size(sum(m.size for m in gone))
    return (f"{len(gone)} model{'s' if len(gone) > 1 else ''} ({size}) whose GGUF is no longer "
            "where it was opened")
