"""End the process without making its parent wait for the kernel to free its memory (Linux).

A process's exit is seen (waitpid returns, the shell's prompt comes back) only after the kernel
has torn down its address space. A loaded model leaves hundreds of MB of pages (the KV cache,
llama.cpp's buffers, the interpreter's heap), and freeing ~300 MB of them took 25-40 ms on an
idle 2-core machine and 100-430 ms while other jobs kept the cores busy: most of Ctrl-C's
SIGINT-to-exit time (benchmarks/bench_cli_interrupt.py).

`end_process` first starts a helper with clone(CLONE_VM | CLONE_FILES): a process that shares
this address space and runs only libc's `sleep(1)`. The process's own exit then merely drops
its reference to the memory; the helper, holding the last one, frees it when its sleep ends,
after the parent has seen the exit. The helper shares the file table too, so the descriptors
closed here are closed for it as well: a pipe reading our stdout sees its end of file at our
exit, not a second later. It starts with every signal blocked (it inherits the calling
thread's mask), so it never runs a Python signal handler in memory that is not its own.
Anywhere else (macOS, another libc, clone refused) the process exits the ordinary way.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import NoReturn

_CLONE_VM = 0x00000100
_CLONE_FILES = 0x00000400
HELPER_SLEEP_SECONDS = 1  # far longer than the exit it covers (milliseconds)
_STACK_BYTES = 64 * 1024  # `sleep` needs well under 1 KiB
_keep: list[object] = []  # the helper's stack must outlive this call (the process ends anyway)


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc on Linux (the clone call below was checked
    against glibc's `clone` wrapper: the child calls fn(arg), then the exit system call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None
        return ctypes.CDLL(None, use_errno=True)
    except (ValueError, OSError):
        return None


def defer_teardown() -> int | None:
    """Start the memory-holding helper (see the module docstring); its pid, or None when it
    could not be started. Blocks every signal in the calling thread: call it on the way out."""
    libc = _glibc()
    if libc is None:
        return None
    try:
        clone = libc.clone
        clone.restype = ctypes.c_int
        clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        entry = ctypes.cast(libc.sleep, ctypes.c_void_p)  # int fn(void *): sleep(unsigned)
        stack = ctypes.create_string_buffer(_STACK_BYTES)
        _keep.append(stack)
        top = (ctypes.addressof(stack) + _STACK_BYTES - 64) & ~0xF  # grows down, 16-aligned
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        pid = clone(entry, top, _CLONE_VM | _CLONE_FILES, HELPER_SLEEP_SECONDS)
    except (AttributeError, OSError, ValueError):
        return None
    return pid if pid > 0 else None


def _close_all_descriptors() -> None:
    """Close every open descriptor (the file table is shared with the helper)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(1024))
    for fd in fds:
        try:
            os.close(fd)
        except OSError:  # the listing's own descriptor, already gone
            pass


def end_process(code: int) -> NoReturn:
    """`os._exit(code)`, with the freeing of the memory left to a helper where possible.
    Everything worth keeping must be flushed before: the descriptors are closed unwritten."""
    if defer_teardown() is not None:
        _close_all_descriptors()
    os._exit(code)
