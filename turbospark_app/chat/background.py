"""A model opened on a thread of its own while the caller's goes on (the load's probe, the
tokenizer), and one that is no longer wanted closed."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future
from typing import Any, Callable


def in_background(fn: Callable[[], Any], name: str) -> Callable[[], Any]:
    """Run `fn()` on a new thread in the caller's context (its load-progress reporter is a
    context variable); returns a join that gives fn's result or raises its exception."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # re-raised by the join, on the caller's thread
            future.set_exception(exc)

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name=name, daemon=True).start()
    return future.result


def close_opened(opened: Callable[[], Any]) -> None:
    """Join a background open that is no longer wanted and free what it opened."""
    try:
        model, context = opened()
    except BaseException:
        return  # it opened nothing
    context.close()
    model.close()
