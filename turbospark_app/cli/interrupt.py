"""Ctrl-C for the headless chat: a turn runs on a worker thread so SIGINT is handled at once.

Python runs signal handlers on the main thread only, between bytecodes. If the main thread is
the one inside a llama.cpp call (a prefill chunk: hundreds of ms), the handler — and so the
cancel flag the engine polls — waits for that call to return. Here the turn runs on a worker
thread and the main thread only waits on an Event, a wait that a signal interrupts: the handler
sets the cancel flag immediately, and llama.cpp's abort callback, which reads that flag between
graph nodes, ends the running chunk. The worker says the turn's summary as soon as the turn ends
(chat_command), without waiting for the main thread to be scheduled. The interactive prompt's
line is read on a worker thread too.

Semantics (as with the single-thread version, only faster): during a turn the first Ctrl-C
cancels the reply (the engine ends it with reason cancelled, the partial reply is kept); a
second Ctrl-C during the same turn, or Ctrl-C outside a turn (at the interactive prompt: now the
first press, where the old flag needed two after a reply that ended by itself), raises
KeyboardInterrupt in the main thread.

A session that Ctrl-C ended leaves through `leave_now`: the interpreter's own teardown (freeing
the llama.cpp model and context, collecting the app's objects) takes longer than the stop itself, a
second or more on a loaded machine (benchmarks/bench_cli_interrupt.py), after the user has
already asked to be gone; and so did the kernel's freeing of the process's memory, which
`host.quick_exit` leaves to a helper.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, Callable, NoReturn, TypeVar

from ..host.quick_exit import end_process

T = TypeVar("T")

# The main thread's wait wakes this often even without a signal: Linux hands a process-directed
# SIGINT to the main thread (the thread-group leader) unless that one already has a signal
# pending; then another thread (llama.cpp's thread pool) may take it, and only a wake-up of the main
# thread runs the Python handler. This bounds that rare case.
WAIT_SLICE_SECONDS = 0.05
# After a second Ctrl-C, how long to let the (already cancelled) turn wind down before the
# caller exits anyway: the engine stops within milliseconds, this only bounds a stuck turn.
WIND_DOWN_SECONDS = 2.0


class CtrlC:
    """SIGINT handling around turns run by `run_turn` (use as a context manager)."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()  # the turn's cancel predicate is cancelled.is_set
        self._in_turn = False
        self._previous: Any = None

    def __enter__(self) -> "CtrlC":
        self._previous = signal.signal(signal.SIGINT, self.on_sigint)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler: cancel the running turn, or quit (second Ctrl-C, or no turn)."""
        if not self._in_turn or self.cancelled.is_set():
            raise KeyboardInterrupt
        self.cancelled.set()

    def run_turn(self, work: Callable[[], T]) -> T:
        """Run `work` (a turn that polls `self.cancelled.is_set`) on a worker thread while the
        main thread waits, interruptibly; return its result or raise its exception.

        KeyboardInterrupt (a second Ctrl-C) leaves the wait at once; the cancelled turn gets
        up to WIND_DOWN_SECONDS to finish so it is not torn down mid-run, then it propagates.
        """
        # Cleared first: a Ctrl-C inside clear() (which holds the Event's lock) must not call
        # set() on this thread, it quits instead.
        self.cancelled.clear()
        self._in_turn = True
        try:
            return self._on_worker(work, WIND_DOWN_SECONDS)
        finally:
            self._in_turn = False

    def read_line(self, prompt: str) -> str:
        """`input(prompt)` on a worker thread: in the main thread a Ctrl-C that lands between
        writing the prompt and blocking in read() would wait for the next line of input.
        Raises EOFError at the end of input, KeyboardInterrupt on Ctrl-C (the reader, blocked
        in read(), is left behind: the process is about to end)."""
        return self._on_worker(lambda: input(prompt), 0.0)

    def _on_worker(self, work: Callable[[], T], wind_down: float) -> T:
        """`work()` on a daemon thread that blocks SIGINT; the main thread waits for it."""
        outcome: list[Any] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def worker() -> None:
            # SIGINT goes to the threads that do not block it: not this one, nor the threads it
            # starts (the stop watcher inherits the mask).
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                outcome.append(work())
            except BaseException as e:  # re-raised on the caller's thread
                failure.append(e)
            finally:
                done.set()

        thread = threading.Thread(target=worker, name="turbospark-chat-worker", daemon=True)
        try:
            thread.start()
            # A signal interrupts this wait: the handler runs right away, on this thread.
            while not done.wait(WAIT_SLICE_SECONDS):
                pass
        except KeyboardInterrupt:
            self.cancelled.set()
            if wind_down > 0:
                thread.join(wind_down)
            raise
        thread.join()
        if failure:
            raise failure[0]
        return outcome[0]

def leave_now(code: int) -> NoReturn:
    """End the process at once with `code`, after flushing stdout, stderr and the log handlers.

    Only for a process (not for a caller of `main()` in-process) whose work is complete: the
    headless chat writes no files of its own, and the weight-cache check it may leave running is
    a daemon thread whose only write, setting a bad entry aside, is an atomic rename (a folder
    left half-deleted is swept by the next load). The kernel's freeing of the model's memory is
    left to a helper (`host.quick_exit`): on a busy machine it was most of the time to exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    logging.shutdown()
    end_process(code)
