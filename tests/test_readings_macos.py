"""The ctypes bindings for macOS, exercised on any platform: the fake "libraries" export real C
function pointers (ctypes callbacks), so the signatures, the objc_msgSend casts and the
by-reference sysctl output go through the real foreign-call machinery."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import importlib
import importlib.util
import sys
import types

import pytest

from turbospark_app.readings import macos
from turbospark_app.readings.macos import ObjCThermalState, SysctlInt

CLASS_ADDR, INSTANCE_ADDR = 0x7000, 0x9000
C = ctypes.CFUNCTYPE


class FakeObjC:
    """An Objective-C runtime exporting objc_getClass / sel_registerName / objc_msgSend."""

    def __init__(self, thermal_state: int = 2, *, has_class: bool = True) -> None:
        self.thermal_state = thermal_state
        self.has_class = has_class
        self.selectors: dict[bytes, int] = {}
        self.sends: list[tuple[int, bytes]] = []
        # Keep the callbacks referenced: ctypes frees a callback whose object is collected.
        self.objc_getClass = C(ctypes.c_void_p, ctypes.c_char_p)(self._get_class)
        self.sel_registerName = C(ctypes.c_void_p, ctypes.c_char_p)(self._register)
        self.objc_msgSend = C(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(self._send)

    def _get_class(self, name: bytes) -> int | None:
        return CLASS_ADDR if self.has_class and name == b"NSProcessInfo" else None

    def _register(self, name: bytes) -> int:
        return self.selectors.setdefault(name, 0x100 + len(self.selectors))

    def _send(self, receiver: int, selector: int) -> int:
        name = {v: k for k, v in self.selectors.items()}[selector]
        self.sends.append((receiver, name))
        if receiver == CLASS_ADDR and name == b"processInfo":
            return INSTANCE_ADDR
        if receiver == INSTANCE_ADDR and name == b"thermalState":
            return self.thermal_state
        return 0


def test_objc_thermal_state_sends_the_right_messages() -> None:
    runtime = FakeObjC(thermal_state=3)
    state = ObjCThermalState(libobjc=runtime, foundation=object())
    # signatures set on the runtime functions (char* in, pointer out)
    assert runtime.objc_getClass.restype is ctypes.c_void_p
    assert runtime.objc_getClass.argtypes == [ctypes.c_char_p]
    assert runtime.sel_registerName.argtypes == [ctypes.c_char_p]
    assert state() == 3
    runtime.thermal_state = 1
    assert state() == 1
    # processInfo resolved once at construction; each call is one thermalState message
    assert runtime.sends == [
        (CLASS_ADDR, b"processInfo"),
        (INSTANCE_ADDR, b"thermalState"),
        (INSTANCE_ADDR, b"thermalState"),
    ]


def test_objc_missing_class_or_msgsend_is_oserror() -> None:
    with pytest.raises(OSError, match="NSProcessInfo"):
        ObjCThermalState(libobjc=FakeObjC(has_class=False), foundation=object())
    gnu_like = types.SimpleNamespace(  # GNU libobjc has no objc_msgSend
        objc_getClass=FakeObjC().objc_getClass, sel_registerName=FakeObjC().sel_registerName
    )
    with pytest.raises(OSError, match="objc_msgSend"):
        ObjCThermalState(libobjc=gnu_like, foundation=object())


SysctlProto = C(
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.c_void_p,
    ctypes.c_size_t,
)


def fake_libc(value: int, *, rc: int = 0, size: int | None = None, seen: list | None = None):
    def sysctlbyname(name, oldp, oldlenp, newp, newlen):
        if seen is not None:
            seen.append((name, oldlenp[0], newp, newlen))
        if rc == 0:
            ctypes.cast(oldp, ctypes.POINTER(ctypes.c_int))[0] = value
            if size is not None:
                oldlenp[0] = size
        else:
            ctypes.set_errno(errno.ENOENT)
        return rc

    return types.SimpleNamespace(sysctlbyname=SysctlProto(sysctlbyname))


def test_sysctl_int_reads_by_reference() -> None:
    seen: list = []
    libc = fake_libc(4, seen=seen)
    read = SysctlInt("kern.memorystatus_vm_pressure_level", libc=libc)
    assert libc.sysctlbyname.restype is ctypes.c_int
    assert read() == 4
    assert seen == [(b"kern.memorystatus_vm_pressure_level", ctypes.sizeof(ctypes.c_int), None, 0)]


def test_sysctl_int_failure_raises_oserror_with_errno() -> None:
    read = SysctlInt("kern.nope", libc=fake_libc(0, rc=-1))
    with pytest.raises(OSError) as info:
        read()
    assert "kern.nope" in str(info.value)


def test_sysctl_int_wrong_size_is_oserror() -> None:
    with pytest.raises(OSError, match="8 bytes"):
        SysctlInt("kern.x", libc=fake_libc(1, size=8))()


def test_sysctl_missing_symbol_is_oserror() -> None:
    with pytest.raises(OSError, match="sysctlbyname"):
        SysctlInt("kern.x", libc=types.SimpleNamespace())


def test_module_imports_everywhere_and_loads_nothing_at_import(monkeypatch) -> None:
    def no_loading(*args, **kwargs):
        raise AssertionError(f"a library was loaded at import: {args}")

    monkeypatch.setattr(ctypes, "CDLL", no_loading)
    monkeypatch.setattr(ctypes.util, "find_library", no_loading)
    # a fresh copy of the module, so the real one (used by the other tests) is untouched
    spec = importlib.util.spec_from_file_location("macos_fresh_copy", macos.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.ObjCThermalState) and callable(module.SysctlInt)


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS failure mode")
def test_default_loaders_fail_cleanly_off_macos() -> None:
    with pytest.raises(OSError):
        macos.ObjCThermalState()
    if not sys.platform.startswith(("freebsd", "openbsd", "netbsd")):
        with pytest.raises(OSError):
            macos.SysctlInt("kern.memorystatus_vm_pressure_level")


@pytest.mark.skipif(sys.platform != "darwin", reason="real macOS calls")
def test_real_macos_calls() -> None:
    assert 0 <= macos.ObjCThermalState()() <= 3
    assert macos.SysctlInt("kern.memorystatus_vm_pressure_level")() in (1, 2, 4)
