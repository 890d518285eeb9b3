"""The models folder, as My Models and `turbospark model list` show it: every GGUF downloaded
there (named `owner/repo:QUANT`), the default model, and GGUFs the user added from elsewhere
(listed where they are, never copied), each with its size, when it was last used, its projector.

An index in the app's folder (`models.json`) keeps what the files cannot say: the repo, commit
and quantization a download came from, when a model was last opened, the files the user added,
and the sha256 each downloaded file was verified against with its size and mtime (so a later
start does not re-hash gigabytes, and a file changed since is not taken as verified).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..host.keystore import default_folder
from . import names
from .config import models_folder, previous_folders

INDEX_FILE = "models.json"


def _index_path() -> Path:
    return default_folder() / INDEX_FILE


def _load() -> dict[str, Any]:
    try:
        data = json.loads(_index_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    for key in ("models", "verified"):
        if not isinstance(data.get(key), dict):
            data[key] = {}
    return data


def _save(data: dict[str, Any]) -> None:
    path = _index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _key(path: Path) -> str:
    return str(Path(path).expanduser().resolve())


def is_verified(path: Path, sha256: str | None) -> bool:
    """`path` was verified (against `sha256` when given) and has not changed since."""
    record = _load()["verified"].get(_key(path))
    try:
        st = path.stat()
    except OSError:
        return False
    return (isinstance(record, dict) and (sha256 is None or record.get("sha256") == sha256)
            and record.get("size") == st.st_size and record.get("mtime_ns") == st.st_mtime_ns)


def mark_verified(path: Path, sha256: str) -> None:
    """Record that `path` (as it is now) hashed to `sha256`."""
    data = _load()
    st = path.stat()
    data["verified"][_key(path)] = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    _save(data)


def record_download(model_path: Path, *, repo: str, commit: str | None, quant: str,
                    files: list[Path], mmproj: Path | None) -> None:
    """Remember where a finished download came from (`download.run` calls it)."""
    data = _load()
    entry = data["models"].get(_key(model_path), {})
    entry.update(repo=repo, commit=commit, quant=quant, files=[_key(f) for f in files],
                 mmproj=_key(mmproj) if mmproj else None, downloaded=time.time())
    data["models"][_key(model_path)] = entry
    _save(data)


def add_file(path: Path) -> None:
    """List a GGUF from elsewhere in My Models (it stays where it is)."""
    data = _load()
    data["models"].setdefault(_key(path), {})["added"] = True
    _save(data)


def mark_used(path: Path) -> None:
    """Record that the model at `path` was just opened (My Models' "last used")."""
    data = _load()
    key = _key(path)
    entry = data["models"].get(key)
    if entry is None and not _in_folders(Path(key)):
        return  # a file opened once from elsewhere is not added to the list by opening it
    data["models"].setdefault(key, {})["last_used"] = time.time()
    _save(data)


def _folders() -> list[Path]:
    return [models_folder(), *[p for p in previous_folders() if p.is_dir()]]


def _in_folders(path: Path) -> bool:
    return any(path.is_relative_to(f.resolve()) for f in _folders())


@dataclass(frozen=True)
class LocalModel:
    """One model on this machine."""

    path: Path  # what llama.cpp opens (the first shard)
    name: str  # `owner/repo:QUANT` for a download, else the file name
    size: int  # bytes of all its files (shards and projector)
    last_used: float | None
    repo: str | None
    quant: str | None
    mmproj: Path | None
    files: tuple[Path, ...]  # every file it takes (shards, projector)
    added: bool  # listed from elsewhere (delete removes it from the list only... see delete)


def _entry_model(path: Path, entry: dict[str, Any]) -> LocalModel:
    repo, quant = entry.get("repo"), entry.get("quant")
    files = [Path(p) for p in entry.get("files") or [str(path)]]
    if names.shard(path.name) and len(files) == 1:  # a split model found by scanning
        stem = names.without_shard(path.name)
        files = sorted(p for p in path.parent.glob("*.gguf") if names.without_shard(p.name) == stem)
    mmproj = Path(entry["mmproj"]) if entry.get("mmproj") else None
    every = [*files, *([mmproj] if mmproj else [])]
    size = sum(p.stat().st_size for p in every if p.is_file())
    name = f"{repo}:{quant}" if repo and quant else path.name
    return LocalModel(path, name, size, entry.get("last_used"), repo, quant, mmproj,
                      tuple(every), bool(entry.get("added")))


def list_models() -> list[LocalModel]:
    """Every model in the models folder(s) and every added one still there, most recently used
    first (then by name)."""
    data = _load()
    found: dict[str, LocalModel] = {}
    for key, entry in data["models"].items():
        path = Path(key)
        if path.is_file() and isinstance(entry, dict):
            found[key] = _entry_model(path, entry)
    for folder in _folders():
        for path in folder.rglob("*.gguf"):
            s = names.shard(path.name)
            if path.name.startswith(".") or names.is_mmproj(path.name) or (s and s[0] != 1):
                continue
            key = _key(path)
            if key not in found:
                found[key] = _entry_model(Path(key), data["models"].get(key) or {})
    return sorted(found.values(), key=lambda m: (-(m.last_used or 0), m.name.lower()))


def resolve(name: str) -> Path | None:
    """The downloaded model called `owner/repo:QUANT` (or `owner/repo` when one quantization of
    it is here), else None."""
    ref = names.parse_repo_ref(name)
    if ref is None:
        return None
    matches = [m for m in list_models() if m.repo and m.repo.lower() == ref.repo_id.lower()
               and (ref.quant is None or (m.quant or "").upper() == ref.quant.upper()
                    or m.path.name == ref.quant)]
    return matches[0].path if len(matches) == 1 else None


def delete(model: LocalModel) -> list[Path]:
    """Delete a model's files (its projector too unless another model uses it) and forget it;
    an added file from elsewhere is only taken off the list. Returns the files deleted."""
    data = _load()
    key = _key(model.path)
    data["models"].pop(key, None)
    gone: list[Path] = []
    if not model.added or _in_folders(model.path):
        others = {str(m.mmproj) for m in list_models() if m.path != model.path and m.mmproj}
        for p in model.files:
            if p == model.mmproj and str(p) in others:
                continue
            for q in (p, p.with_name(f".{p.name}.part"), p.with_name(f".{p.name}.part.json")):
                if q.exists():
                    q.unlink()
                    if q == p:
                        gone.append(p)
            data["verified"].pop(_key(p), None)
        folder = model.path.parent
        roots = {f.resolve() for f in _folders()}
        while folder.resolve() not in roots and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
    _save(data)
    return gone


@dataclass(frozen=True)
class PartialDownload:
    """A download stopped half way (cancelled, cut, the app closed): the next `get` of it resumes."""

    repo: str
    quant: str
    path: Path  # the final name it will have
    part: Path
    have: int
    size: int

    @property
    def name(self) -> str:
        return f"{self.repo}:{self.quant}"


def partial_downloads() -> list[PartialDownload]:
    """Every `.part` in the models folder(s) with the record of what it belongs to."""
    out: list[PartialDownload] = []
    for folder in _folders():
        for meta in folder.rglob(".*.part.json"):
            part = meta.with_name(meta.name.removesuffix(".json"))
            try:
                record = json.loads(meta.read_text(encoding="utf-8"))
                have = part.stat().st_size if part.exists() else 0
            except (OSError, ValueError):
                continue
            if not isinstance(record, dict) or not isinstance(record.get("repo"), str):
                continue
            final = part.with_name(part.name.removeprefix(".").removesuffix(".part"))
            out.append(PartialDownload(record["repo"], names.quant_of(str(record.get("path", final.name))),
                                       final, part, have, int(record.get("size") or 0)))
    return sorted(out, key=lambda p: p.name.lower())


def discard_partial(partial: PartialDownload) -> None:
    """Delete what a stopped download fetched (frees the space; it starts over next time)."""
    partial.part.unlink(missing_ok=True)
    partial.part.with_name(partial.part.name + ".json").unlink(missing_ok=True)
