"""The weight cache an earlier TurboSpark left on disk (the ONNX Runtime engine's converted
weights and graphs, `<cache dir>/weights` and `<cache dir>/graphs`), reported once.

llama.cpp maps the GGUF itself, so those folders (often gigabytes) are dead weight. At start-up
the app and the CLI say once how much they hold and how to delete them; a marker in the cache
folder remembers that it was said. Nothing is deleted without being asked.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

LEGACY_FOLDERS = ("weights", "graphs")
_MARKER = ".legacy-weight-cache-reported"


@dataclass(frozen=True)
class LegacyCache:
    """The leftover folders and the bytes they hold."""

    folders: tuple[Path, ...]
    nbytes: int

    def message(self) -> str:
        """The one report: size, where, and how to delete it."""
        where = " and ".join(str(f) for f in self.folders)
        gib = self.nbytes / 2**30
        size = f"{gib:.1f} GiB" if gib >= 0.1 else f"{self.nbytes / 2**20:.0f} MiB"
        folders = " ".join(f"'{f}'" for f in self.folders)
        return (f"An earlier version's weight cache is still on disk: {size} in {where}. "
                f"TurboSpark now runs the GGUF directly (llama.cpp) and no longer reads it; "
                f"delete it to free the space (rm -r {folders}).")


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def find_legacy_cache(cache_root: Path | None = None) -> LegacyCache | None:
    """The leftover weight-cache folders under the cache folder, or None."""
    if cache_root is None:
        from ..host.folders import cache_dir

        cache_root = cache_dir()
    folders = tuple(cache_root / name for name in LEGACY_FOLDERS if (cache_root / name).is_dir())
    if not folders:
        return None
    return LegacyCache(folders, sum(_size(f) for f in folders))


def report_once(cache_root: Path | None = None) -> str | None:
    """The report, the first time a leftover cache is found (None after that, or when none)."""
    if cache_root is None:
        from ..host.folders import cache_dir

        cache_root = cache_dir()
    marker = cache_root / _MARKER
    if marker.exists():
        return None
    found = find_legacy_cache(cache_root)
    if found is None:
        return None
    try:
        marker.write_text(str(found.nbytes), "utf-8")
    except OSError:
        pass
    return found.message()


def delete_legacy_cache(found: LegacyCache) -> None:
    """Remove the leftover folders (the window's Delete button)."""
    for folder in found.folders:
        shutil.rmtree(folder, ignore_errors=True)
