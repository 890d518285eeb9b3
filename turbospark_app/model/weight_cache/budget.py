"""The weight cache's size budget: a setting (`cache.json` in the config folder) or the default.

Default: 20 GiB, but never more than half of what the disk has for the cache (its free space
plus what the cache already holds). 20 GiB keeps, say, the default model in every kernel mode
(~0.8 GiB) beside three 1B-class models with one prepacked session each (~3.4 GiB each) without
a rebuild when switching between them; the half-the-disk cap stops a cache from filling a
nearly full laptop disk, where rebuilding an entry (seconds) is the cheaper thing to lose.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DEFAULT_BUDGET_BYTES = 20 << 30
DISK_FRACTION = 0.5
MIN_BUDGET_BYTES = 256 << 20  # below this not even the default model's entry fits
SETTING_FILE = "cache.json"


class BudgetError(ValueError):
    """A budget that cannot be used (says which and why)."""


def _setting_path() -> Path:
    from turbospark_app.host.folders import config_dir

    return config_dir() / SETTING_FILE


def budget_setting() -> int | None:
    """The budget the user set in bytes, or None (the default applies)."""
    try:
        value = json.loads(_setting_path().read_text("utf-8")).get("budget_bytes")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value >= MIN_BUDGET_BYTES else None


def set_budget(budget_bytes: int | None) -> None:
    """Save the budget (None: back to the default). Raises BudgetError below the minimum."""
    if budget_bytes is not None and budget_bytes < MIN_BUDGET_BYTES:
        raise BudgetError(f"the cache budget must be at least {MIN_BUDGET_BYTES >> 20} MiB "
                          f"(got {budget_bytes / 2**20:.0f} MiB)")
    path = _setting_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"budget_bytes": budget_bytes}), "utf-8")
    tmp.replace(path)


def default_budget(cache_root: Path, used_bytes: int) -> int:
    """min(20 GiB, half of (free disk + what the cache holds)), at least the minimum."""
    try:
        free = shutil.disk_usage(cache_root if cache_root.exists() else cache_root.parent).free
    except OSError:
        return DEFAULT_BUDGET_BYTES
    return max(MIN_BUDGET_BYTES, min(DEFAULT_BUDGET_BYTES, int(DISK_FRACTION * (free + used_bytes))))


def effective_budget(cache_root: Path, used_bytes: int) -> int:
    """The budget in force: the setting, else the default."""
    setting = budget_setting()
    return setting if setting is not None else default_budget(cache_root, used_bytes)
