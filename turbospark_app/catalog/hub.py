"""The Hugging Face Hub through `huggingface_hub`'s HfApi: GGUF repo search, one repo's GGUF
files grouped by quantization with their sizes and sha256, and the Hub's own GGUF metadata
(architecture, parameters, context length).

Nothing here runs on import and nothing contacts the Hub until a function is called (the
dialog's first search, or a `turbospark model search|get`). The endpoint is $HF_ENDPOINT read at
each call; the token is the app's own (config.hub_token), never one another tool stored: a
user who did not give TurboSpark a token sends none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import names
from .config import hub_endpoint, hub_token

SORTS = {"downloads": "downloads", "recent": "last_modified", "likes": "likes",
         "trending": "trending_score"}
SEARCH_EXPAND = ["downloads", "likes", "lastModified", "gguf", "gated"]
REPO_EXPAND = ["sha", "downloads", "likes", "lastModified", "gguf", "gated"]


class HubError(RuntimeError):
    """The Hub could not answer; the message says what went wrong in plain words."""


@dataclass(frozen=True)
class HubFile:
    """One file of a repo at a commit: its path, size, and the sha256 the Hub lists (LFS files)."""

    path: str
    size: int
    sha256: str | None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class QuantGroup:
    """One quantization of a repo: one file, or the shards of a split GGUF in order."""

    quant: str
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def first(self) -> HubFile:
        """The file llama.cpp opens (the first shard of a split model)."""
        return self.files[0]

    @property
    def complete(self) -> bool:
        """Every shard a split model names is listed."""
        s = names.shard(self.first.path)
        return s is None or len(self.files) == s[1]


@dataclass(frozen=True)
class HubFacts:
    """What the Hub says of a repo's GGUF (its `gguf` field), None where it says nothing."""

    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None

    @classmethod
    def from_api(cls, gguf: Any) -> "HubFacts":
        if not isinstance(gguf, dict):
            return cls()
        arch = gguf.get("architecture")
        total = gguf.get("total")
        ctx = gguf.get("context_length")
        return cls(arch if isinstance(arch, str) else None,
                   total if isinstance(total, int) and not isinstance(total, bool) else None,
                   ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None)


@dataclass(frozen=True)
class RepoSummary:
    """One search hit."""

    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    gated: bool
    facts: HubFacts


@dataclass
class RepoListing:
    """A repo's GGUFs at one commit: quantizations smallest first, and its projector files."""

    repo_id: str
    commit: str
    facts: HubFacts
    groups: list[QuantGroup] = field(default_factory=list)
    mmproj: list[HubFile] = field(default_factory=list)
    gated: bool = False

    def group(self, quant: str) -> QuantGroup | None:
        """The group named `quant` (case-insensitive), or holding the file of that name."""
        q = quant.upper()
        for g in self.groups:
            if g.quant.upper() == q or any(f.path == quant or f.name == quant for f in g.files):
                return g
        return None

    def projector_for(self, group: QuantGroup) -> HubFile | None:
        """The projector downloaded with `group` when the repo has one: the one of the same
        precision, else F16, else the first."""
        if not self.mmproj:
            return None
        by_quant = {names.quant_of(f.name): f for f in self.mmproj}
        return by_quant.get(group.quant) or by_quant.get("F16") or self.mmproj[0]


def quiet() -> None:
    """No telemetry in what huggingface_hub sends: its user agent would otherwise add the torch
    version and the name of an AI agent it detects in the environment. Read at each request."""
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True


def api() -> Any:
    """An HfApi on $HF_ENDPOINT with the app's token or none (`token=False`)."""
    from huggingface_hub import HfApi

    quiet()

    return HfApi(endpoint=hub_endpoint(), token=hub_token() or False,
                 library_name="turbospark", library_version=_version())


def _version() -> str:
    from .. import __version__

    return __version__


def explain(exc: BaseException, what: str) -> HubError:
    """A huggingface_hub failure in plain words (what to do for a gated repo, a missing one)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return HubError(f"{what}: the repo is gated: accept its terms on the Hub and give TurboSpark "
                        "a token (Models › Find Models… › Hub Token…, or `turbospark model token`)")
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"{what}: no such model repo on {hub_endpoint()} (or it is private)")
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{what}: no such revision")
    if isinstance(exc, HfHubHTTPError):
        return HubError(f"{what}: the Hub answered {exc}")
    return HubError(f"{what}: cannot reach {hub_endpoint()} ({type(exc).__name__}: {exc})")


def search(text: str, *, sort: str = "downloads", limit: int = 30) -> list[RepoSummary]:
    """GGUF repos matching `text`, most downloaded (or most recent...) first."""
    try:
        hits = list(api().list_models(search=text or None, filter="gguf", sort=SORTS.get(sort, sort),
                                      limit=limit, expand=SEARCH_EXPAND))
    except Exception as exc:  # noqa: BLE001 - said in plain words
        raise explain(exc, f"search for {text!r}") from exc
    return [RepoSummary(m.id, m.downloads or 0, m.likes or 0, m.last_modified, bool(m.gated),
                        HubFacts.from_api(m.gguf)) for m in hits]


def _lfs_sha(entry: Any) -> str | None:
    lfs = getattr(entry, "lfs", None)
    if lfs is None:
        return None
    sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
    return sha if isinstance(sha, str) else None


def group_files(files: list[HubFile]) -> tuple[list[QuantGroup], list[HubFile]]:
    """GGUF files into quantization groups (shards together, in order), smallest first; the
    projectors apart."""
    projectors = [f for f in files if names.is_mmproj(f.path)]
    groups: dict[tuple[str, str], list[HubFile]] = {}
    for f in files:
        if not names.is_gguf(f.path) or names.is_mmproj(f.path):
            continue
        # one group per model: a split model's shards together
        groups.setdefault((names.quant_of(f.path), names.without_shard(f.path)), []).append(f)
    out: list[QuantGroup] = []
    for (quant, _stem), members in groups.items():
        members.sort(key=lambda f: (names.shard(f.path) or (0, 0))[0])
        out.append(QuantGroup(quant, tuple(members)))
    # Two files with the same quantization name (e.g. in two folders) stay apart: name by file.
    seen: dict[str, int] = {}
    for g in out:
        seen[g.quant] = seen.get(g.quant, 0) + 1
    out = [g if seen[g.quant] == 1 else QuantGroup(g.first.name, g.files) for g in out]
    out.sort(key=lambda g: g.size)
    return out, projectors


def repo_listing(repo_id: str, revision: str | None = None) -> RepoListing:
    """The repo's GGUFs at `revision` (default: main), with sizes and sha256, pinned to the
    commit the Hub resolved it to (so every later download fetches that exact version)."""
    hub = api()
    what = f"list {repo_id}"
    try:
        info = hub.model_info(repo_id, revision=revision, expand=REPO_EXPAND)
        commit = info.sha or revision or "main"
        tree = list(hub.list_repo_tree(repo_id, revision=commit, recursive=True))
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, what) from exc
    files = [HubFile(e.path, int(getattr(e, "size", 0) or 0), _lfs_sha(e))
             for e in tree if hasattr(e, "size") and names.is_gguf(e.path)]
    groups, projectors = group_files(files)
    if not groups:
        raise HubError(f"{repo_id} has no GGUF file (TurboSpark runs GGUF models; look for a "
                       "repo whose name ends in -GGUF)")
    return RepoListing(repo_id, commit, HubFacts.from_api(info.gguf), groups, projectors,
                       bool(info.gated))


def file_url(repo_id: str, path: str, commit: str) -> str:
    """The `resolve` URL of a file at a commit, on $HF_ENDPOINT."""
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, path, revision=commit, endpoint=hub_endpoint())


def request_headers() -> dict[str, str]:
    """The headers huggingface_hub sends for the app (its user agent; the token when there is
    one)."""
    from huggingface_hub.utils import build_hf_headers

    quiet()
    return build_hf_headers(token=hub_token() or False, library_name="turbospark",
                            library_version=_version())
