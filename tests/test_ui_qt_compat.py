"""The shield against PySide6 6.12's borrowed None/True returns on CPython 3.11 (see qt_compat)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_long_streaming_session_does_not_abort_the_interpreter() -> None:
    """300k void calls and 100k Python emits: on an affected binding this aborts with
    "none_dealloc" / "bool_dealloc" unless turbospark_app.ui shielded the singletons."""
    script = textwrap.dedent(
        """
        import turbospark_app.ui  # applies the shield
        from PySide6.QtCore import QObject, Signal

        class Emitter(QObject):
            fired = Signal(object)

        o = Emitter()
        o.fired.connect(lambda value: None)
        for _ in range(300_000):
            o.setObjectName("x")
        for _ in range(100_000):
            o.fired.emit(1)
        print("survived")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("survived")


def test_the_shield_is_only_applied_when_the_leak_is_there() -> None:
    from turbospark_app.ui import qt_compat

    leaks = sys.version_info < (3, 12) and qt_compat.void_call_leaks_none()
    assert qt_compat.shield_singletons() is leaks
    if leaks:  # the margin is in place (minus whatever this session has leaked since)
        assert sys.getrefcount(None) > qt_compat.SHIELD // 2
