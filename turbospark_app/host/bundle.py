"""Where things are when TurboSpark runs frozen (a PyInstaller one-folder app or a macOS .app).

PyInstaller sets `sys.frozen` and `sys._MEIPASS`, the folder its collected files live in:

    Linux one-folder app   dist/TurboSpark/_internal/           (_MEIPASS)
    macOS .app             TurboSpark.app/Contents/Frameworks/   (_MEIPASS; data files are in
                           Contents/Resources/, with symlinks to them in Contents/Frameworks/)

The packaging spec (`packaging/turbospark.spec`) puts the default model at
`<_MEIPASS>/models/<DEFAULT_MODEL_FILENAME>` (on macOS: `Contents/Resources/models/`), so the
first launch works offline. In an ordinary (unfrozen) install every function here says "not
bundled" and `resource_path` resolves against the repository's `resources/` folder.

Importing this module is cheap and safe from anywhere: it imports the standard library only, so
`model.fetch` (a layer above) imports it to prefer the bundled model, naming the file it wants.
"""

from __future__ import annotations

import sys
from pathlib import Path

BUNDLED_MODELS_DIR = "models"
"""The folder, relative to the bundle's data root, that holds the embedded GGUF."""

BUNDLED_RESOURCES_DIR = "resources"
"""The folder, relative to the bundle's data root, that holds `resources/` (icon.png, ...)."""

_SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent


def is_frozen() -> bool:
    """True inside a PyInstaller-built app (one-folder or .app), False in a normal install."""
    return bool(getattr(sys, "frozen", False)) and hasattr(sys, "_MEIPASS")


def bundle_root() -> Path | None:
    """The frozen app's data root (`sys._MEIPASS`), or None when not frozen."""
    if not is_frozen():
        return None
    return Path(getattr(sys, "_MEIPASS"))


def macos_resources_dir() -> Path | None:
    """`<App>.app/Contents/Resources` when running frozen inside a macOS .app bundle, else None.

    Found from the executable (`Contents/MacOS/<name>`), not from _MEIPASS, so it is right
    whichever of Contents/Frameworks or Contents/Resources PyInstaller chose as _MEIPASS.
    """
    if not is_frozen():
        return None
    contents = Path(sys.executable).resolve().parent.parent
    resources = contents / "Resources"
    if contents.name == "Contents" and contents.parent.suffix == ".app" and resources.is_dir():
        return resources
    return None


def _data_roots() -> list[Path]:
    """The folders a bundled data file may be under, most specific first (frozen only)."""
    roots = [root for root in (macos_resources_dir(), bundle_root()) if root is not None]
    # Deduplicate while keeping order (on macOS _MEIPASS may itself be Contents/Resources).
    seen: set[Path] = set()
    unique = []
    for root in roots:
        if root not in seen:
            seen.add(root)
            unique.append(root)
    return unique


def bundled_model_path(filename: str) -> Path | None:
    """The GGUF embedded in the frozen app (`<data root>/models/<filename>`), or None.

    None when not frozen or when the bundle has no such file (a build without the model).
    """
    roots = _data_roots()
    if not roots:
        return None
    for root in roots:
        candidate = root / BUNDLED_MODELS_DIR / filename
        if candidate.is_file():
            return candidate
    return None


def resource_path(name: str) -> Path:
    """The path of `resources/<name>`: inside the bundle when frozen, else in the source tree.

    The path is returned whether or not the file exists (the caller decides what a missing
    resource means); when frozen, the first data root that has the file wins.
    """
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"resource name must be a relative path inside resources/: {name!r}")
    roots = _data_roots()
    if not roots:
        return _SOURCE_ROOT / BUNDLED_RESOURCES_DIR / name
    for root in roots:
        candidate = root / BUNDLED_RESOURCES_DIR / name
        if candidate.exists():
            return candidate
    return roots[-1] / BUNDLED_RESOURCES_DIR / name
