"""Before the window starts on Linux: are the X11 (xcb) libraries Qt's xcb plugin needs there?

Without them Qt prints "Could not load the Qt platform plugin xcb" and aborts, which says nothing
about what to install. `missing_xcb_libraries()` tries to load each library the plugin links
(ctypes, by soname) and `install_hint` names the Debian/Ubuntu and Fedora packages. Only checked
when Qt will pick xcb (`will_use_xcb`). Standard library only: runs before PySide6 is imported.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class XcbLibrary:
    soname: str
    debian: str  # Debian / Ubuntu package
    fedora: str  # Fedora / RHEL package


# What PySide6's libqxcb.so and libQt6XcbQpa.so link beyond libX11 (from `ldd`), most often
# missing first: a fresh Ubuntu desktop lacks the first three.
XCB_LIBRARIES = (
    XcbLibrary("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    XcbLibrary("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    XcbLibrary("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    XcbLibrary("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    XcbLibrary("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    XcbLibrary("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    XcbLibrary("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    XcbLibrary("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
    XcbLibrary("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    XcbLibrary("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    XcbLibrary("libxcb-shm.so.0", "libxcb-shm0", "libxcb"),
    XcbLibrary("libxcb-sync.so.1", "libxcb-sync1", "libxcb"),
    XcbLibrary("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb"),
    XcbLibrary("libxcb-render.so.0", "libxcb-render0", "libxcb"),
    XcbLibrary("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    XcbLibrary("libxcb.so.1", "libxcb1", "libxcb"),
)


def will_use_xcb(platform: str = sys.platform, env: Mapping[str, str] = os.environ) -> bool:
    """Qt will load its xcb plugin: Linux, and QT_QPA_PLATFORM unset or xcb, not a Wayland session."""
    if not platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    return not (env.get("XDG_SESSION_TYPE") == "wayland" and env.get("WAYLAND_DISPLAY"))


def _load(soname: str) -> None:
    ctypes.CDLL(soname)


def missing_xcb_libraries(load: Callable[[str], None] | None = None) -> list[XcbLibrary]:
    """The xcb libraries that cannot be loaded (in XCB_LIBRARIES order)."""
    load = load or _load
    missing = []
    for lib in XCB_LIBRARIES:
        try:
            load(lib.soname)
        except OSError:
            missing.append(lib)
    return missing


def _unique(names: list[str]) -> str:
    return " ".join(dict.fromkeys(names))


def install_hint(missing: list[XcbLibrary]) -> str:
    """What to tell the user: the missing libraries and the install commands."""
    return (
        "turbospark: the window needs X11 (xcb) libraries that are not installed: "
        f"{', '.join(m.soname for m in missing)}\n"
        f"  Debian/Ubuntu:  sudo apt install {_unique([m.debian for m in missing])}\n"
        f"  Fedora:         sudo dnf install {_unique([m.fedora for m in missing])}\n"
        "Headless use needs none of them: `turbospark chat`, or QT_QPA_PLATFORM=offscreen."
    )


def check_window_platform() -> str | None:
    """The install hint when the window cannot start for missing xcb libraries, else None."""
    if not will_use_xcb():
        return None
    missing = missing_xcb_libraries()
    return install_hint(missing) if missing else None
