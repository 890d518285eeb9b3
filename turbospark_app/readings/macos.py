"""The two macOS calls, through ctypes only (no PyObjC): importing this module never loads a
library, so it imports on every platform; the loaders raise OSError where macOS is absent.

* `ObjCThermalState()` -> callable returning `[[NSProcessInfo processInfo] thermalState]`
  (NSProcessInfoThermalState: 0 nominal, 1 fair, 2 serious, 3 critical).
* `SysctlInt(name)` -> callable returning an int sysctl via `sysctlbyname`, e.g.
  `kern.memorystatus_vm_pressure_level` (1 normal, 2 warning, 4 critical).

Both resolve everything once in the constructor, so each call is one foreign call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Callable

# objc_msgSend must be called through a prototype matching the method exactly (on arm64 it is
# not variadic), so we cast its address to one prototype per signature we use.
_MsgSendId = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_MsgSendLong = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)  # NSInteger


def _load_library(name: str, **kwargs: Any) -> ctypes.CDLL:
    path = ctypes.util.find_library(name)
    if path is None:
        raise OSError(f"library {name!r} not found")
    return ctypes.CDLL(path, **kwargs)


def _function(lib: Any, name: str, restype: Any, argtypes: list[Any]) -> Any:
    """`lib.name` with its C signature set; OSError if the library does not export it."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise OSError(f"{name} not exported by {lib!r}") from None
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


class ObjCThermalState:
    """`[[NSProcessInfo processInfo] thermalState]` as a plain callable returning an int.

    `libobjc` / `foundation` are injectable for tests; by default they are loaded here.
    Raises OSError when the Objective-C runtime or NSProcessInfo is not there.
    """

    def __init__(self, libobjc: Any = None, foundation: Any = None) -> None:
        if libobjc is None:
            libobjc = _load_library("objc")
        # NSProcessInfo lives in Foundation; loading it registers the class with the runtime.
        self._foundation = foundation if foundation is not None else _load_library("Foundation")
        get_class = _function(libobjc, "objc_getClass", ctypes.c_void_p, [ctypes.c_char_p])
        register = _function(libobjc, "sel_registerName", ctypes.c_void_p, [ctypes.c_char_p])
        try:
            msg_send = libobjc.objc_msgSend
        except AttributeError:
            raise OSError("objc_msgSend not exported (not the Apple Objective-C runtime)") from None
        address = ctypes.cast(msg_send, ctypes.c_void_p).value
        send_id = _MsgSendId(address)
        self._send_long = _MsgSendLong(address)

        cls = get_class(b"NSProcessInfo")
        if not cls:
            raise OSError("Objective-C class NSProcessInfo not found")
        # processInfo is a process-wide singleton: resolve it once, keep only the selector.
        self._info = send_id(cls, register(b"processInfo"))
        if not self._info:
            raise OSError("[NSProcessInfo processInfo] returned nil")
        self._thermal_state = register(b"thermalState")
        if not self._thermal_state:
            raise OSError("selector thermalState not registered")

    def __call__(self) -> int:
        return int(self._send_long(self._info, self._thermal_state))


class SysctlInt:
    """An int sysctl read by name through `sysctlbyname` (macOS / BSD libc).

    `libc` is injectable for tests. Construction raises OSError when libc has no
    sysctlbyname (e.g. glibc); a call raises OSError with errno when the sysctl fails.
    """

    def __init__(self, name: str, libc: Any = None) -> None:
        if libc is None:
            libc = _load_library("c", use_errno=True)
        self.name = name
        self._name = name.encode()
        self._sysctlbyname: Callable[..., int] = _function(
            libc,
            "sysctlbyname",
            ctypes.c_int,
            [
                ctypes.c_char_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_size_t),
                ctypes.c_void_p,
                ctypes.c_size_t,
            ],
        )

    def __call__(self) -> int:
        value = ctypes.c_int(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        if self._sysctlbyname(self._name, ctypes.byref(value), ctypes.byref(size), None, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"sysctlbyname({self.name}): {os.strerror(err)}")
        if size.value != ctypes.sizeof(value):
            raise OSError(f"sysctlbyname({self.name}) returned {size.value} bytes, expected an int")
        return value.value
