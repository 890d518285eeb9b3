"""Downloading a quantization (its shards, and its projector when the repo has one) into the
models folder: resumable, verified, cancellable, never a half file under a model's name.

Per file: the Hub's HEAD (`get_hf_file_metadata`: size, ETag, the commit, the redirect to the
file store) then huggingface_hub's `http_get` into `.<name>.part` beside the final name,
appending from the bytes already there (an HTTP Range request: a cut connection is resumed by
http_get itself; a cancelled or killed download by the next start). A `.part.json` beside it
names the commit and sha256 the bytes belong to: a part of another version is started over. The
whole file is hashed once complete; only a file whose sha256 is the one the Hub lists is
renamed to its final name (a mismatch is deleted, never kept). Before a byte is fetched the
disk's free space is checked against what is left to fetch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from .hub import HubError, HubFile, QuantGroup, RepoListing, explain, file_url, quiet, request_headers
from . import library
from .config import hub_token

SPACE_MARGIN = 64 << 20  # left free on the disk after the download
_HASH_CHUNK = 1 << 20
_SPEED_WINDOW_S = 3.0


class DownloadError(RuntimeError):
    """A download could not be done; the message says why (nothing with a model's name is left)."""


class DownloadCancelled(DownloadError):
    """Cancelled by the user; what was fetched stays in the `.part` file for a resume."""

    def __init__(self) -> None:
        super().__init__("download cancelled (what was fetched is kept: starting it again resumes)")


class NotEnoughSpace(DownloadError):
    """The disk lacks the space; said before a byte is fetched."""


@dataclass(frozen=True)
class Progress:
    """Where a download is: `phase` "download" / "verify" / "done", bytes of all its files."""

    phase: str
    file: str
    done: int
    total: int
    speed: float  # bytes/s over the last few seconds (0 while verifying)
    eta_s: float | None  # seconds left at that speed; None when unknown

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


ProgressCallback = Callable[[Progress], None]


@dataclass
class DownloadJob:
    """What one `get` fetches: a quantization's files (+ projector) into `folder`."""

    repo_id: str
    commit: str
    quant: str
    files: list[HubFile]
    folder: Path  # <models>/<owner>/<name>
    projector: HubFile | None = None
    resumed_bytes: int = field(default=0, init=False)

    def path_of(self, f: HubFile) -> Path:
        return self.folder / f.path

    @property
    def model_path(self) -> Path:
        """The file llama.cpp opens: the first shard."""
        return self.path_of(self.files[0])

    @property
    def all_files(self) -> list[HubFile]:
        return self.files + ([self.projector] if self.projector else [])

    @property
    def total(self) -> int:
        return sum(f.size for f in self.all_files)


def plan(listing: RepoListing, group: QuantGroup, models_folder: Path) -> DownloadJob:
    """The job that fetches `group` of `listing` (pinned to the listing's commit)."""
    owner, _, name = listing.repo_id.partition("/")
    return DownloadJob(listing.repo_id, listing.commit, group.quant, list(group.files),
                       models_folder / owner / name, listing.projector_for(group))


def _part(path: Path) -> Path:
    return path.with_name(f".{path.name}.part")


def _part_meta(path: Path) -> Path:
    return path.with_name(f".{path.name}.part.json")


def _have(job: DownloadJob, f: HubFile) -> bool:
    """The final file is there already and whole (a verified earlier download)."""
    path = job.path_of(f)
    return path.is_file() and library.is_verified(path, f.sha256)


def _part_bytes(job: DownloadJob, f: HubFile) -> int:
    """Bytes of `f` a previous run left that belong to this very version, else 0."""
    part, meta = _part(job.path_of(f)), _part_meta(job.path_of(f))
    try:
        record = json.loads(meta.read_text(encoding="utf-8"))
        size = part.stat().st_size
    except (OSError, ValueError):
        return 0
    same = isinstance(record, dict) and record.get("sha256") == f.sha256 and record.get("size") == f.size
    return size if same and size <= f.size else 0


def bytes_left(job: DownloadJob) -> int:
    """What is still to fetch (files there already and resumable parts counted off)."""
    return sum(f.size - _part_bytes(job, f) for f in job.all_files if not _have(job, f))


def check_space(job: DownloadJob) -> None:
    """Raise NotEnoughSpace when the disk holding the folder lacks what is left to fetch."""
    need = bytes_left(job)
    probe = job.folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need + SPACE_MARGIN > free:
        raise NotEnoughSpace(
            f"not enough disk space for {job.repo_id}:{job.quant}: it needs {need / 1e9:.2f} GB "
            f"(+{SPACE_MARGIN >> 20} MB kept free) and {probe} has {free / 1e9:.2f} GB free")


class _Meter:
    """Bytes over time -> speed and time left; calls the callback, polls the cancel check."""

    def __init__(self, job: DownloadJob, report: ProgressCallback, cancel: Callable[[], bool]) -> None:
        self.total, self.report, self.cancel = job.total, report, cancel
        self.done = 0
        self.file = ""
        self.samples: deque[tuple[float, int]] = deque()
        self.fetched = 0  # bytes that came over the network in this run

    def add(self, n: int) -> None:
        if self.cancel():
            raise DownloadCancelled()
        self.done += n
        self.fetched += n
        now = time.monotonic()
        self.samples.append((now, self.fetched))
        while len(self.samples) > 2 and now - self.samples[0][0] > _SPEED_WINDOW_S:
            self.samples.popleft()
        t0, b0 = self.samples[0]
        speed = (self.fetched - b0) / (now - t0) if now > t0 else 0.0
        eta = (self.total - self.done) / speed if speed > 0 else None
        self.report(Progress("download", self.file, self.done, self.total, speed, eta))

    def bar_class(self) -> type:
        meter = self

        class Bar:  # the progress bar huggingface_hub's http_get drives (tqdm's interface)
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.n = kwargs.get("initial", 0) or 0

            def update(self, n: int = 1) -> None:
                self.n += n
                meter.add(n)

            def __enter__(self) -> "Bar":
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

            def close(self) -> None:
                return None

        return Bar


def _verify(path: Path, f: HubFile, meter: _Meter) -> str:
    digest, done = hashlib.sha256(), 0
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            if meter.cancel():
                raise DownloadCancelled()
            digest.update(chunk)
            done += len(chunk)
            meter.report(Progress("verify", f.name, done, f.size, 0.0, None))
    return digest.hexdigest()


def _fetch_one(job: DownloadJob, f: HubFile, meter: _Meter) -> None:
    from huggingface_hub import constants, get_hf_file_metadata
    from huggingface_hub.file_download import http_get

    # http_get reads, reports and writes in chunks of this size (10 MB by default): 1 MiB
    # makes Cancel, the progress and a resume after a cut connection finer.
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, _HASH_CHUNK)

    final = job.path_of(f)
    final.parent.mkdir(parents=True, exist_ok=True)
    part, meta = _part(final), _part_meta(final)
    resume = _part_bytes(job, f)
    if resume == 0:
        part.unlink(missing_ok=True)
        meta.write_text(json.dumps({"repo": job.repo_id, "commit": job.commit, "path": f.path,
                                    "sha256": f.sha256, "size": f.size}), encoding="utf-8")
    job.resumed_bytes += resume
    meter.file, meter.done = f.name, meter.done + resume
    if resume < f.size:
        url = file_url(job.repo_id, f.path, job.commit)
        try:
            quiet()
            info = get_hf_file_metadata(url, token=hub_token() or False, library_name="turbospark",
                                        library_version=__version__)
        except Exception as exc:  # noqa: BLE001
            raise DownloadError(str(explain(exc, f"cannot download {f.path}"))) from exc
        if info.size is not None and info.size != f.size:
            raise DownloadError(f"{f.path}: the Hub lists {f.size:,} bytes but serves {info.size:,}")
        headers = request_headers()
        if info.location and info.location != url:
            headers.pop("authorization", None)  # the file store gets no token (as hf_hub_download)
        with part.open("ab") as out:
            out.seek(resume)
            try:
                http_get(info.location or url, out, resume_size=resume, headers=headers,
                         expected_size=f.size, displayed_filename=f.name,
                         tqdm_class=meter.bar_class())
            except DownloadCancelled:
                raise
            except OSError as exc:
                raise DownloadError(f"download of {f.path} failed: {exc} (starting it again "
                                    "resumes)") from exc
            except Exception as exc:  # noqa: BLE001 - httpx errors, HfHubHTTPError
                raise DownloadError(f"download of {f.path} failed: {type(exc).__name__}: {exc} "
                                    "(starting it again resumes)") from exc
            out.flush()
            os.fsync(out.fileno())
    got = _verify(part, f, meter)
    if f.sha256 and got != f.sha256:
        part.unlink(missing_ok=True)
        meta.unlink(missing_ok=True)
        raise DownloadError(f"{f.path}: sha256 mismatch (the Hub lists {f.sha256}, the download "
                            f"is {got}); the file was not kept")
    os.chmod(part, 0o644)
    os.replace(part, final)
    meta.unlink(missing_ok=True)
    library.mark_verified(final, got)


def run(job: DownloadJob, *, on_progress: ProgressCallback | None = None,
        cancel: Callable[[], bool] | None = None) -> Path:
    """Fetch every file of `job` not already there; returns the model's path (first shard).
    Raises NotEnoughSpace before fetching, DownloadCancelled, DownloadError, HubError.
    One download of a model at a time: a second one (the window and the CLI at once) is refused
    rather than appending to the same `.part`."""
    from filelock import FileLock, Timeout

    report = on_progress or (lambda p: None)
    meter = _Meter(job, report, cancel or (lambda: False))
    check_space(job)
    job.folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(job.folder / f".{job.quant}.download.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise DownloadError(f"{job.repo_id}:{job.quant} is being downloaded already (by another "
                            "TurboSpark window or command)") from None
    try:
        for f in job.all_files:
            if _have(job, f):
                meter.done += f.size
                continue
            _fetch_one(job, f, meter)
    finally:
        lock.release()
        Path(lock.lock_file).unlink(missing_ok=True)
    library.record_download(job.model_path, repo=job.repo_id, commit=job.commit, quant=job.quant,
                            files=[job.path_of(f) for f in job.files],
                            mmproj=job.path_of(job.projector) if job.projector else None)
    report(Progress("done", job.files[0].name, job.total, job.total, 0.0, 0.0))
    return job.model_path


__all__ = ["DownloadCancelled", "DownloadError", "DownloadJob", "HubError", "NotEnoughSpace",
           "Progress", "bytes_left", "check_space", "plan", "run"]
