"""Does llama.cpp run this file? Asked of a CHILD process the first time a file is seen.

llama.cpp refuses most broken files with a logged error, but some it meets with a failed
assertion (`GGML_ASSERT`), which aborts the whole process: in the app that would close the
window with the conversations in it. So the first open of a file (by path, size, mtime and
the llama.cpp library's identity) is tried in a child that loads it on the CPU and reports in one JSON line;
the verdict is kept in `<cache dir>/llama_probe.json` (a few hundred bytes a file), and later
opens load in-process at once. A child that dies is itself the verdict: "llama.cpp crashed
loading it", with its last error line.

Run as `python -m turbospark_app.model.llamacpp.probe FILE` (or the frozen app with
`--probe-gguf FILE`): it imports only the binding, no numpy, no Qt.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger("turbospark.llama_cpp")
CACHE_NAME = "llama_probe.json"
PROBE_FLAG = "--probe-gguf"
TIMEOUT_SECONDS = 120.0
_MAX_ENTRIES = 200
_lock = threading.Lock()
_pending: dict[str, "Future[Verdict]"] = {}  # path -> the verdict `verdict_soon` looks for
_pending_lock = threading.Lock()


@dataclass(frozen=True)
class Verdict:
    """`runs`: llama.cpp loads the file; else `reason`, one line."""

    runs: bool
    reason: str = ""
    description: str = ""  # llama.cpp's llama_model_desc when it runs


def _key(path: Path) -> str:
    from . import library

    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{library.build_id()}"


def _cache_file() -> Path:
    from ...host.folders import cache_dir

    return cache_dir() / CACHE_NAME


def _read_cache() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(_cache_file().read_text("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(key: str, verdict: Verdict) -> None:
    with _lock:
        entries = _read_cache()
        entries.pop(key, None)
        entries[key] = {"runs": verdict.runs, "reason": verdict.reason,
                        "description": verdict.description}
        while len(entries) > _MAX_ENTRIES:  # oldest first (insertion order)
            entries.pop(next(iter(entries)))
        target = _cache_file()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(entries), "utf-8")
            os.replace(tmp, target)
        except OSError:  # a read-only cache only costs the next open a child
            tmp.unlink(missing_ok=True)


def _child_command(path: Path) -> list[str]:
    from ...host.bundle import is_frozen

    if is_frozen():
        return [sys.executable, PROBE_FLAG, str(path)]
    return [sys.executable, "-m", "turbospark_app.model.llamacpp.probe", str(path)]


def probe_in_child(path: Path, timeout: float = TIMEOUT_SECONDS) -> Verdict:
    """Load `path` with llama.cpp in a child process; its verdict (never raises for the file)."""
    # ggml's abort runs gdb for a backtrace: seconds, and its output is not the reason
    env = dict(os.environ, OMP_NUM_THREADS="1", GGML_NO_BACKTRACE="1")
    try:
        proc = subprocess.run(_child_command(path), capture_output=True, text=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Verdict(False, f"llama.cpp did not finish loading it within {timeout:.0f} s")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        try:
            doc = json.loads(lines[-1])
            for text in doc.get("warnings") or []:
                _log.warning("%s: %s", path.name, text)
            return Verdict(bool(doc["runs"]), str(doc.get("reason", "")), str(doc.get("description", "")))
        except (ValueError, KeyError, TypeError):
            pass
    lines_err = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    said = [line for line in lines_err if "GGML_ASSERT" in line or "error" in line.lower()]
    last = (said or lines_err or [""])[-1]
    if "GGML_ASSERT" in last:  # "/path/llama-model.cpp:1855: GGML_ASSERT(x) failed" -> the assertion
        last = last[last.index("GGML_ASSERT"):]
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return Verdict(False, f"llama.cpp crashed loading it ({name})" + (f": {last}" if last else ""))
    return Verdict(False, f"llama.cpp's loader failed (exit {proc.returncode})" + (f": {last}" if last else ""))


def _remembered(key: str) -> Verdict | None:
    known = _read_cache().get(key)
    if isinstance(known, dict) and "runs" in known:
        return Verdict(bool(known["runs"]), str(known.get("reason", "")), str(known.get("description", "")))
    return None


def known_verdict(path: str | os.PathLike[str]) -> Verdict | None:
    """The remembered verdict of `path`, or None (never seen, or changed since)."""
    try:
        return _remembered(_key(Path(path)))
    except OSError:
        return None


def verdict_soon(path: str | os.PathLike[str]) -> None:
    """A file about to be opened: find its verdict now, on a thread (asking the child on a first
    open), while the rest of the process imports; `verdict` of the same path then waits for
    that answer instead of asking again."""
    path = Path(path)
    future: Future[Verdict] = Future()
    with _pending_lock:
        if str(path) in _pending:
            return
        _pending[str(path)] = future

    def find() -> None:
        try:
            future.set_result(_verdict_now(path))
        except BaseException as e:  # (handed to whoever waits: `verdict` raises it)
            future.set_exception(e)

    threading.Thread(target=find, name="gguf-probe", daemon=True).start()


def verdict(path: str | os.PathLike[str]) -> Verdict:
    """Whether llama.cpp runs `path`: remembered, else asked of a child (and remembered); the
    answer `verdict_soon` went looking for is waited for."""
    with _pending_lock:
        future = _pending.get(str(path))
    return future.result() if future is not None else _verdict_now(Path(path))


def _verdict_now(path: Path) -> Verdict:
    key = _key(path)
    known = _remembered(key)
    if known is not None:
        return known
    from ...engine.load_progress import CHECKING, report

    report(CHECKING, 0.0)
    found = probe_in_child(path)
    report(CHECKING, 1.0)
    _store(key, found)
    return found


def forget(path: str | os.PathLike[str]) -> None:
    """Drop the remembered verdict of `path` (a load that disagreed with it)."""
    with _pending_lock:
        _pending.pop(str(path), None)
    try:
        key = _key(Path(path))
    except OSError:
        return
    with _lock:
        entries = _read_cache()
        if entries.pop(key, None) is not None:
            try:
                _cache_file().write_text(json.dumps(entries), "utf-8")
            except OSError:
                pass


def child_main(path: str) -> int:
    """The child: load `path` on the CPU, print one JSON line with the verdict."""
    from . import library
    from .log import capturing, refusal

    C = library.backend()
    params = C.llama_model_default_params()
    params.n_gpu_layers = 0
    # The weights stay mapped, never read: no repacking into the CPU's extra buffer types,
    # which reads the whole file (a 1B Q4_K: 1.1-1.9 s instead of 0.18 s). What a hostile
    # header trips on (its keys, vocabulary, tensor shapes, types and offsets) is all checked
    # before that, in the load this child still runs.
    params.use_extra_bufts = False
    with capturing() as lines:
        handle = C.llama_model_load_from_file(os.fsencode(path), params)
    if not handle:
        reason = refusal(lines) or "llama.cpp could not load it (no reason given in its log)"
        print(json.dumps({"runs": False, "reason": reason}), flush=True)
        return 0
    import ctypes

    buf = ctypes.create_string_buffer(256)
    C.llama_model_desc(handle, buf, len(buf))
    warnings = [text for _, text in lines][:50]  # the app logs them: its own loads are quiet
    print(json.dumps({"runs": True, "description": buf.value.decode("utf-8", "replace"),
                      "warnings": warnings}), flush=True)
    os._exit(0)  # (freeing the weights is the kernel's job here)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m turbospark_app.model.llamacpp.probe FILE", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(child_main(sys.argv[1]))
