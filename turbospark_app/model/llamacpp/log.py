"""llama.cpp's log, captured: into the app's log (logger "turbospark.llama_cpp"), never the
terminal, and, while a load runs, kept so its refusal can be said in one line.

llama.cpp logs through one process-wide callback (`llama_log_set`). Lines arrive in pieces: a
piece of level CONT continues the line before it. ggml's levels: 1 debug, 2 info, 3 warn,
4 error, 5 continue. Info lines (a model load writes ~2,000: the metadata dump) only reach the
log when its level asks for them; a load's capture keeps its warnings and errors either way.
"""

from __future__ import annotations

import logging
import re
import threading
from contextlib import contextmanager
from typing import Any, Iterator

logger = logging.getLogger("turbospark.llama_cpp")
logger.addHandler(logging.NullHandler())  # no handler configured: nothing on the terminal
logger.propagate = True
if logger.level == logging.NOTSET:
    logger.setLevel(logging.WARNING)

_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_CONT = 5

_state = threading.local()
_captures: dict[int, list[tuple[int, str]]] = {}  # thread id -> (level, line) of its capture
_partial: dict[int, tuple[int, str]] = {}  # thread id -> the line being continued
_callback: Any = None  # the CFUNCTYPE object: kept alive as long as llama.cpp may call it


def _emit(level: int, line: str) -> None:
    line = line.rstrip("\n")
    if not line:
        return
    captured = _captures.get(threading.get_ident())
    if captured is not None and level >= logging.WARNING:
        captured.append((level, line))
    if logger.isEnabledFor(level):
        logger.log(level, "%s", line)


def _on_log(level: int, text: bytes | None, _user: Any) -> None:
    piece = (text or b"").decode("utf-8", "replace")
    me = threading.get_ident()
    if level == _CONT:
        prev_level, prev = _partial.pop(me, (logging.INFO, ""))
        level_py, piece = prev_level, prev + piece
    else:
        prev = _partial.pop(me, None)
        if prev is not None:
            _emit(*prev)
        level_py = _LEVELS.get(level, logging.INFO)
    if piece.endswith("\n"):
        _emit(level_py, piece)
    else:
        _partial[me] = (level_py, piece)


_noop: Any = None  # a C function that ignores its arguments: llama.cpp's log with no Python in it


def _noop_callback(C: Any) -> Any:
    global _noop
    if _noop is None:
        import ctypes

        # getpid takes no argument and only returns: called as (level, text, user), the
        # arguments are ignored (C's calling convention), and no thread waits for the GIL.
        _noop = C.llama_log_callback(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value)
    return _noop


@contextmanager
def quiet(C: Any) -> Iterator[None]:
    """llama.cpp's log dropped while the block runs (a model load's ~1,100 lines, each of which
    would take the GIL from a thread building the tokenizer meanwhile). Only for a load already
    known to work: its log was kept when the probe child loaded the file (`probe.py`)."""
    install(C)
    with _quiet_lock:
        C.llama_log_set(_noop_callback(C), None)
        try:
            yield
        finally:
            C.llama_log_set(_callback, None)


_quiet_lock = threading.Lock()


def install(C: Any) -> None:
    """Route llama.cpp's log here (called once, before the backends start)."""
    global _callback
    if _callback is None:
        _callback = C.llama_log_callback(_on_log)
        C.llama_log_set(_callback, None)


@contextmanager
def capturing() -> Iterator[list[tuple[int, str]]]:
    """Collect this thread's llama.cpp warnings and errors while the block runs."""
    me = threading.get_ident()
    lines: list[tuple[int, str]] = []
    outer = _captures.get(me)
    _captures[me] = lines
    try:
        yield lines
    finally:
        pending = _partial.pop(me, None)
        if pending is not None:
            _emit(*pending)
        if outer is None:
            _captures.pop(me, None)
        else:
            _captures[me] = outer
            outer.extend(lines)


_LONGEST = 300  # a hostile file's 5,000-character name stays out of the one line
_ERROR_LOADING = re.compile(r"error loading model(?: [a-z ]+)?: ")
_NOISE = ("llama_model_load_from_file_impl: failed to load model", "failed to load model")


def refusal(lines: list[tuple[int, str]]) -> str:
    """The one line that says why llama.cpp refused: its first error, without the prefix of the
    function that logged it ("llama_model_load: error loading model: unknown model
    architecture: 'foo'" -> "unknown model architecture: 'foo'")."""
    errors = [text for level, text in lines if level >= logging.ERROR]
    for text in errors:
        if any(text.strip().endswith(n) for n in _NOISE):
            continue
        reason = text.strip()
        while True:  # "error loading model: error loading model vocabulary: the reason"
            found = _ERROR_LOADING.search(reason)
            if found is None:
                break
            reason = reason[found.end():]
        while True:  # "llama_function: check_tensor_dims: the reason" -> "the reason"
            head, sep, tail = reason.partition(": ")
            if not sep or " " in head or not head.replace("_", "").replace(":", "").isalnum():
                break
            reason = tail
        reason = reason.strip()
        return reason if len(reason) <= _LONGEST else reason[:_LONGEST] + f"… ({len(reason):,} chars)"
    return ""
