"""Names on the Hub: quantizations from GGUF file names, split shards, projector files, and what
a user types (`owner/name`, `owner/name:Q4_K_M`, a pasted https://huggingface.co/... URL)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse

# After Qn only a quantization's own parts follow (digits, K, S, M, L, XL): in `x_Q0_Q4_K_M` the
# last one named is Q4_K_M, not "Q0_Q4_K_M".
_QUANT = re.compile(
    r"(?:^|[-._/])((?:UD-)?(?:IQ\d_[A-Z]+|Q\d(?:_(?:\d+|K|S|M|L|XL))*|BF16|F16|F32|MXFP4(?:_MOE)?|TQ\d_\d))"
    r"(?=[-._/]|$)")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def is_gguf(path: str) -> bool:
    """A GGUF file by its name."""
    return path.lower().endswith(".gguf")


def is_mmproj(path: str) -> bool:
    """A vision/audio projector (`mmproj-*.gguf`, `*.mmproj-f16.gguf`), not a language model."""
    name = path.rsplit("/", 1)[-1].lower()
    return is_gguf(name) and "mmproj" in name


def shard(path: str) -> tuple[int, int] | None:
    """(index, count) of a split GGUF (`name-00001-of-00003.gguf`), else None."""
    m = _SHARD.search(path)
    return (int(m.group(1)), int(m.group(2))) if m else None


def without_shard(path: str) -> str:
    """The name a split model's shards share (`m-00002-of-00003.gguf` -> `m`); else `path`."""
    return _SHARD.sub("", path)


def quant_of(path: str) -> str:
    """The quantization a file's name says (`Q4_K_M`, `IQ2_XXS`, `BF16`), upper-case; "other"
    when it names none. The last match wins (`Qwen3-8B-Q8_0.gguf` -> Q8_0)."""
    stem = _SHARD.sub("", path)
    stem = stem[: -len(".gguf")] if is_gguf(stem) else stem
    found = _QUANT.findall(stem.upper())
    return found[-1] if found else "other"


@dataclass(frozen=True)
class RepoRef:
    """What the user named: a repo, and maybe one quantization (or file) of it."""

    repo_id: str
    quant: str | None = None
    revision: str | None = None


def parse_repo_ref(text: str) -> RepoRef | None:
    """`owner/name`, `owner/name:Q4_K_M`, `hf.co/owner/name`, or a Hub URL
    (`https://huggingface.co/owner/name/blob/main/file.gguf`); None for search words."""
    text = text.strip()
    if not text or " " in text:
        return None
    quant = None
    if "://" in text or text.startswith(("huggingface.co/", "hf.co/")):
        url = urlparse(text if "://" in text else "https://" + text)
        path, _, tail = url.path.partition(":")  # `hf.co/owner/name:Q4_K_M`, as llama.cpp's -hf
        quant = tail.upper() or None
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["models"]:
            parts = parts[1:]
        if len(parts) < 2:
            return None
        repo_id = f"{parts[0]}/{parts[1]}"
        revision = None
        if len(parts) >= 5 and parts[2] in ("blob", "resolve", "tree"):
            revision = parts[3]
            rest = "/".join(parts[4:])
            quant = rest if is_gguf(rest) else quant_of(rest) if quant_of(rest) != "other" else None
        return RepoRef(repo_id, quant, revision) if _REPO_ID.match(repo_id) else None
    if ":" in text:
        text, _, quant = text.partition(":")
        quant = quant or None
    if not _REPO_ID.match(text):
        return None
    return RepoRef(text, quant.upper() if quant and not is_gguf(quant) else quant)
