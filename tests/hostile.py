"""Run the app's model-opening paths on a file in a child process under a time and memory cap.

`open_bounded(path)` starts `python -c _CHILD` with RLIMIT_AS set, which runs `turbospark model
info` and `load_backend` (what `chat` and the window's Open Model load with) on the file and
prints one JSON line: each path's outcome ("ok", or the error's type and text) and the seconds.
A hang is a timeout, a runaway allocation a MemoryError: both fail the caller's test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MEMORY_CAP = 1536 << 20  # address space of the child (python + numpy + the app take ~160 MB)
TIMEOUT_S = 60.0

_CHILD = r"""
import contextlib, io, json, resource, sys, time, traceback
cap = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from pathlib import Path
path, cache = sys.argv[1], Path(sys.argv[2])
out = {}
from turbospark_app.cli.main import main
t = time.perf_counter()
err = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    code = main(["model", "info", "--model", path])
out["info"] = {"code": code, "stderr": err.getvalue(), "seconds": time.perf_counter() - t}
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import EngineError
t = time.perf_counter()
try:
    load_backend(path, session_slots=1)
    out["load"] = {"outcome": "ok"}
except EngineError as e:
    out["load"] = {"outcome": type(e).__name__, "text": str(e), "reason": getattr(e, "reason", "")}
except BaseException as e:
    out["load"] = {"outcome": "CRASH " + type(e).__name__, "text": traceback.format_exc()}
out["load"]["seconds"] = time.perf_counter() - t
print(json.dumps(out))
"""


def open_bounded(path: Path, cache_dir: Path, env: dict[str, str] | None = None) -> dict:
    """The outcomes of `model info` and `load_backend` on `path`, run under the caps."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(cache_dir), str(MEMORY_CAP)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
