"""Linux start-up: a missing xcb library is named, with the packages to install, before Qt aborts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from turbospark_app.cli import main as cli
from turbospark_app.host import xcb_check as platform_check


def _loader(missing: set[str]):
    def load(soname: str) -> None:
        if soname in missing:
            raise OSError(f"{soname}: cannot open shared object file")

    return load


def test_the_message_names_libraries_and_packages_for_both_families() -> None:
    missing = platform_check.missing_xcb_libraries(
        load=_loader({"libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"}))
    assert [m.soname for m in missing] == ["libxcb-cursor.so.0", "libxcb-icccm.so.4",
                                           "libxcb-keysyms.so.1"]
    text = platform_check.install_hint(missing)
    assert "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in text
    assert "sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms" in text


@pytest.mark.parametrize(("platform", "env", "expected"), [
    ("linux", {}, True),
    ("linux", {"QT_QPA_PLATFORM": "xcb"}, True),
    ("linux", {"QT_QPA_PLATFORM": "offscreen"}, False),
    ("linux", {"QT_QPA_PLATFORM": "wayland"}, False),
    ("linux", {"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, False),
    ("darwin", {}, False),
])
def test_only_checked_when_the_platform_will_be_xcb(platform, env, expected) -> None:
    assert platform_check.will_use_xcb(platform, env) is expected


def test_the_app_stops_with_the_hint_before_qt(monkeypatch, capsys) -> None:
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setattr(platform_check, "will_use_xcb", lambda *a, **k: True)
    monkeypatch.setattr(platform_check, "_load", _loader({"libxcb-cursor.so.0"}))

    def no_qt(args):
        raise AssertionError("Qt must not start without its xcb libraries")

    import turbospark_app.ui.app as app

    monkeypatch.setattr(app, "run_app", no_qt)
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert "libxcb-cursor.so.0" in err and "apt install libxcb-cursor0" in err
    assert "dnf install xcb-util-cursor" in err


def _in_linker_cache(soname: str) -> bool:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    return any(line.strip().startswith(soname + " ") for line in out.splitlines())


@pytest.mark.skipif(shutil.which("ldconfig") is None and not Path("/sbin/ldconfig").exists(),
                    reason="no ldconfig to compare with (not glibc Linux)")
def test_real_loading_agrees_with_the_linker_cache() -> None:
    # Real ctypes loading, checked against what ldconfig says this machine has (a fresh CI
    # machine may lack some: then they must be the ones named).
    missing = {m.soname for m in platform_check.missing_xcb_libraries()}
    expected = {lib.soname for lib in platform_check.XCB_LIBRARIES if not _in_linker_cache(lib.soname)}
    assert missing == expected
