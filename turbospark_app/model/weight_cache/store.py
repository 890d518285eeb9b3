"""What the weight cache holds, per model, and freeing it: `clear`, and least-recently-used
eviction under the budget (`enforce_budget`), across models.

The units of eviction are a compact entry's prepacked sessions (`ort-*`, the biggest files:
~2.5x the GGUF each) and whole entries (an entry goes with its sessions). The least recently
used unit goes first; a unit a running model maps (`leases.in_use`) never goes.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .budget import effective_budget
from .leases import in_use
from .usage import read_usage

ABANDONED_SECONDS = 86400  # a temp or trash folder this old belongs to a process that died


@dataclass
class CacheUnit:
    """One folder that can be evicted: an entry (without its sessions) or one session."""

    path: Path
    kind: str  # "f32", "compact", or "prepacked <kernel mode>"
    size: int
    last_used: float
    in_use: bool
    entry: Path  # the entry it belongs to (itself for an entry)


@dataclass
class ModelCache:
    """Every cached thing of one GGUF content (its entries share the content key)."""

    key: str
    model: str
    sources: dict[str, float] = field(default_factory=dict)
    units: list[CacheUnit] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(u.size for u in self.units)

    @property
    def last_used(self) -> float:
        return max((u.last_used for u in self.units), default=0.0)

    @property
    def kinds(self) -> list[str]:
        return sorted({u.kind for u in self.units}, key=lambda k: (k.startswith("prepacked"), k))

    @property
    def in_use(self) -> bool:
        return any(u.in_use for u in self.units)

    @property
    def missing(self) -> bool:
        """Every GGUF this cache was made from or opened as is gone from where it was seen
        (deleted, or moved somewhere TurboSpark has not opened it from yet)."""
        return bool(self.sources) and not any(Path(s).exists() for s in self.sources)


@dataclass
class ClearResult:
    """What `clear` removed, how many bytes that freed, and what it kept because it is in use."""

    removed: list[Path] = field(default_factory=list)
    freed: int = 0
    kept_in_use: list[Path] = field(default_factory=list)


def weights_root(cache_root: Path) -> Path:
    """`<cache>/weights`, where the entries live."""
    return Path(cache_root) / "weights"


def _tree_size(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _entries(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _units(entry: Path) -> list[CacheUnit]:
    usage = read_usage(entry)
    sessions = sorted(p for p in entry.glob("ort-*") if p.is_dir())
    parts = entry.name.rsplit("-", 2)  # <stem>-<kind>-<key>
    kind = usage.kind or (parts[-2] if len(parts) == 3 else "?")
    units = []
    own = _tree_size(entry)
    for s in sessions:
        s_usage = read_usage(s)
        size = _tree_size(s)
        own -= size
        units.append(CacheUnit(s, s_usage.kind or "prepacked (mode unknown)", size,
                               s_usage.last_used, in_use(s), entry))
    units.insert(0, CacheUnit(entry, kind, own, usage.last_used, in_use(entry), entry))
    return units


def list_models(cache_root: Path) -> list[ModelCache]:
    """The cache's contents grouped per model, most recently used first."""
    models: dict[str, ModelCache] = {}
    for entry in _entries(weights_root(cache_root)):
        key = entry.name.rsplit("-", 1)[-1]
        usage = read_usage(entry)
        m = models.setdefault(key, ModelCache(key, usage.model or entry.name.rsplit("-", 2)[0]))
        for path, seen in usage.sources.items():
            m.sources[path] = max(seen, m.sources.get(path, 0.0))
        m.units += _units(entry)
    return sorted(models.values(), key=lambda m: m.last_used, reverse=True)


def total_size(cache_root: Path) -> int:
    """Bytes the weight cache holds (temp and trash folders included: they are on disk too)."""
    root = weights_root(cache_root)
    return _tree_size(root) if root.is_dir() else 0


def _remove(folder: Path) -> bool:
    """Move aside (atomic) then delete; False when it was already gone."""
    trash = folder.parent / f".trash-{folder.name}-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(folder, trash)
    except OSError:
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _matches(m: ModelCache, name: str) -> bool:
    wanted = name.lower()
    return (m.model.lower() == wanted or m.key.startswith(wanted)
            or any(u.path.name.lower() == wanted for u in m.units)
            or any(Path(s).name.lower() in (wanted, wanted + ".gguf") or s == name for s in m.sources))


def clear(cache_root: Path, name: str | None = None, missing: bool = False) -> ClearResult:
    """Remove every model's cache, or those matching `name` (model name, file name, source path,
    entry folder or key prefix), or with `missing` those whose GGUF is gone (`ModelCache.missing`).
    What a running model maps stays (listed in `kept_in_use`)."""
    result = ClearResult()
    for m in list_models(cache_root):
        if name is not None and not _matches(m, name):
            continue
        if missing and not m.missing:
            continue
        # sessions first, so an entry kept for being in use still loses its unused sessions
        for unit in sorted(m.units, key=lambda u: u.path == u.entry):
            if unit.in_use:
                result.kept_in_use.append(unit.path)
            elif unit.path.exists() and _remove(unit.path):
                result.removed.append(unit.path)
                result.freed += unit.size
    return result


def enforce_budget(cache_root: Path, budget: int | None = None) -> list[Path]:
    """Evict least recently used units until the cache fits `budget` (default: the one in
    force); units in use are skipped. Returns what was removed."""
    models = list_models(cache_root)
    units = [u for m in models for u in m.units]
    total = sum(u.size for u in units)
    budget = effective_budget(weights_root(cache_root), total) if budget is None else budget
    removed: list[Path] = []
    gone: set[Path] = set()
    for unit in sorted(units, key=lambda u: u.last_used):
        if total <= budget:
            break
        if unit.in_use or unit.entry in gone:
            continue
        if unit.path == unit.entry:  # an entry goes with whatever sessions it still has
            if any(u.in_use for u in units if u.entry == unit.entry):
                continue
            size = sum(u.size for u in units if u.entry == unit.entry and u.path not in removed)
            gone.add(unit.entry)
        else:
            size = unit.size
        if _remove(unit.path):
            removed.append(unit.path)
            total -= size
    return removed


def trim_sessions(cache_root: Path, keep: int) -> list[Path]:
    """Keep each entry's `keep` most recently used prepacked sessions (the session policy
    just changed); one in use stays. Returns what was removed."""
    removed = []
    for m in list_models(cache_root):
        by_entry: dict[Path, list[CacheUnit]] = {}
        for u in m.units:
            if u.path != u.entry:
                by_entry.setdefault(u.entry, []).append(u)
        for sessions in by_entry.values():
            sessions.sort(key=lambda u: u.last_used, reverse=True)
            for u in sessions[keep:]:
                if not u.in_use and _remove(u.path):
                    removed.append(u.path)
    return removed


_LEGACY = re.compile(r".+-[0-9a-f]{8}-(f32|compact)-[0-9a-f]{20}")  # keyed by path (before #19)


def remove_abandoned(cache_root: Path, now: float | None = None) -> None:
    """Delete temp and trash folders older than a day (left by a process that died), and
    entries named by the old path-and-mtime key, which no load can find any more."""
    root = weights_root(cache_root)
    now = time.time() if now is None else now
    for entry in _entries(root):
        if _LEGACY.fullmatch(entry.name) and not in_use(entry):
            _remove(entry)
    candidates = list(root.glob(".tmp-*")) + list(root.glob(".trash-*")) + list(root.glob("*/.ort-tmp-*"))
    for folder in candidates:
        try:
            if now - folder.stat().st_mtime > ABANDONED_SECONDS:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass
