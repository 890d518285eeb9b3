"""Per-user folders: data (models, conversations), cache (llama.cpp's verdicts on files, downloads) and config.

Each one comes from platformdirs and can be overridden by an environment variable, so tests and CI
can isolate them (`TURBOSPARK_DATA_DIR`, `TURBOSPARK_CACHE_DIR`, `TURBOSPARK_CONFIG_DIR`). The
folders are created on demand, when a function returns them.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "TurboSpark"

DATA_DIR_ENV = "TURBOSPARK_DATA_DIR"
CACHE_DIR_ENV = "TURBOSPARK_CACHE_DIR"
CONFIG_DIR_ENV = "TURBOSPARK_CONFIG_DIR"


def _folder(env_var: str, platform_default: str) -> Path:
    # An empty variable counts as unset: `TURBOSPARK_DATA_DIR= cmd` should not mean "the cwd".
    override = os.environ.get(env_var, "").strip()
    path = Path(override).expanduser() if override else Path(platform_default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """The per-user data folder (models live here); `TURBOSPARK_DATA_DIR` overrides it."""
    # appauthor=False: on Windows platformdirs would otherwise nest "TurboSpark\\TurboSpark".
    return _folder(DATA_DIR_ENV, platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """The per-user cache folder (safe to delete); `TURBOSPARK_CACHE_DIR` overrides it."""
    return _folder(CACHE_DIR_ENV, platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """The per-user config folder; `TURBOSPARK_CONFIG_DIR` overrides it."""
    return _folder(CONFIG_DIR_ENV, platformdirs.user_config_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    """`<data dir>/models`, where the default model is fetched to."""
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_subdir(name: str) -> Path:
    """`<cache dir>/<name>` (e.g. "tokenizers", "weights"), created on demand."""
    path = cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
