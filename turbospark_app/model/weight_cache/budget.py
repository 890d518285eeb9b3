"""The weight cache's settings (`cache.json` in the config folder): the size budget, and how
many of a model's prepacked ONNX Runtime sessions are kept (one per kernel mode used).

Default: 20 GiB, but never more than half of what the disk has for the cache (its free space
plus what the cache already holds). 20 GiB keeps the compact entries of a couple of dozen
1B-class models (~0.72 GiB each), or, with prepacked sessions kept, the default model in every
kernel mode (~0.8 GiB) beside seven 1B-class models with one session each (~2.3 GiB each),
without a rebuild when switching between them; the half-the-disk cap stops a cache from filling a
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

# Prepacked sessions kept per model: each is ~2.5x the GGUF on disk (the compact entry ~1.1x)
# and lets a warm load map the kernels' layout instead of prepacking it again. Default none:
# measured on the 2-core box, a load that prepacks was as fast (default model: 1.03 vs 1.02 s;
# 1B: 2.47 vs 2.67 s) with less RSS (1B exact-prompt: 1.26 vs 1.58 GB), so the 2.5x per mode
# bought nothing there; "current" / "all" are for machines where prepacking is slow
# (README, Weight cache: with the CPU contended, one 1B round mapped in 5.4 s vs 9.1 s).
SESSION_POLICIES = {"all": 3, "current": 1, "none": 0}
DEFAULT_SESSION_POLICY = "none"
SESSION_POLICY_LABELS = {
    "none": "none (default; ~1.1x the GGUF; every load prepacks)",
    "current": "the current kernel mode's (~3.6x the GGUF)",
    "all": "every kernel mode used (~1.1x + 2.5x per mode)",
}


class BudgetError(ValueError):
    """A budget that cannot be used (says which and why)."""


def _setting_path() -> Path:
    from turbospark_app.host.folders import config_dir

    return config_dir() / SETTING_FILE


def _read() -> dict:
    try:
        doc = json.loads(_setting_path().read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _write(**changes: object) -> None:
    doc = _read()
    doc.update(changes)
    path = _setting_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc), "utf-8")
    tmp.replace(path)


def budget_setting() -> int | None:
    """The budget the user set in bytes, or None (the default applies)."""
    value = _read().get("budget_bytes")
    return int(value) if isinstance(value, int) and value >= MIN_BUDGET_BYTES else None


def session_policy() -> str:
    """"all", "current" or "none": which prepacked sessions a model keeps (default "current")."""
    value = _read().get("sessions")
    return value if value in SESSION_POLICIES else DEFAULT_SESSION_POLICY


def set_session_policy(policy: str) -> None:
    """Save the session policy; raises BudgetError for an unknown one."""
    if policy not in SESSION_POLICIES:
        raise BudgetError(f"unknown prepacked-session policy {policy!r} "
                          f"(one of {', '.join(SESSION_POLICIES)})")
    _write(sessions=policy)


def set_budget(budget_bytes: int | None) -> None:
    """Save the budget (None: back to the default). Raises BudgetError below the minimum."""
    if budget_bytes is not None and budget_bytes < MIN_BUDGET_BYTES:
        raise BudgetError(f"the cache budget must be at least {MIN_BUDGET_BYTES >> 20} MiB "
                          f"(got {budget_bytes / 2**20:.0f} MiB)")
    _write(budget_bytes=budget_bytes)


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
