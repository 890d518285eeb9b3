"""A work-around for the installed Qt binding on CPython 3.11. Applied by `turbospark_app.ui`.

PySide6 6.12 on CPython 3.11 returns `None` (every void method: `setText`, `insertText`,
`update`, ...) and the bool of `SignalInstance.emit()` as BORROWED references, so each such
call drops one reference to `None` / `True`. On CPython >= 3.12 those objects are immortal and
nothing happens; on 3.11 a streaming UI makes thousands of such calls a minute, the refcount
reaches zero and the interpreter aborts ("Fatal Python error: none_dealloc" / "bool_dealloc").

`shield_singletons()` probes for the leak (64 void calls; does None lose about 64
references?) and, only when it is there, adds 2**40 references to None, True and False: the
same thing CPython 3.12 does by making them immortal. They are static objects that are never
freed, so extra references cost nothing; at a million leaked calls a second the margin lasts
twelve days of continuous streaming.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject

SHIELD = 1 << 40
_PROBE_CALLS = 64
_shielded = False


def void_call_leaks_none() -> bool:
    """True when a void PySide6 method call drops a reference to None."""
    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(_PROBE_CALLS):
        probe.setObjectName("probe")
    lost = before - sys.getrefcount(None)
    for _ in range(max(0, lost)):  # give back what the probe itself took
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))
    return lost >= _PROBE_CALLS // 2


def shield_singletons() -> bool:
    """Make None / True / False effectively immortal when the leak is present (see the module
    docstring). Idempotent; returns True when the shield is in place."""
    global _shielded
    if _shielded:
        return True
    if sys.version_info >= (3, 12) or not void_call_leaks_none():
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first field of every PyObject (non-debug build).
        ctypes.c_ssize_t.from_address(id(obj)).value += SHIELD
    _shielded = True
    return True
