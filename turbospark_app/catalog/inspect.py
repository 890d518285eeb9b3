"""A repo sized up before download: its model's figures (the Hub's GGUF metadata where it gives
them, else the header of one file, read with a ranged request), whether llama.cpp runs its
architecture, and for each quantization the memory it needs here and the verdict.

The model's shape (layers, KV heads, head sizes, vocabulary) is the same in every quantization
of a repo, so one header serves them all; only the weights differ, and for those the size the
Hub lists is exact. The one term a quantization changes beyond its size is the CPU repack copy
(estimate.repack_types): exact for a file whose own header was read (`exact_fit`), else taken
from its quantization's name (Q4_0, IQ4_NL: all matrices; Q4_K_S / Q4_K_M: most of them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..model.gguf.header import ModelFileError
from . import estimate
from .hub import HubError, QuantGroup, RepoListing
from .remote_header import architecture_problem, fetch_header

# The share of a file's weights in a repacked type, by quantization name, and that type.
_REPACK_SHARE = {"Q4_0": ("Q4_0", 0.95), "IQ4_NL": ("IQ4_NL", 0.95), "Q4_K_S": ("Q4_K", 0.9),
                 "Q4_K_M": ("Q4_K", 0.75), "Q8_0": ("Q8_0", 0.95)}


def repack_guess(group: QuantGroup) -> int:
    """The CPU repack copy of a quantization whose header was not read, from its name."""
    kind, share = _REPACK_SHARE.get(group.quant.removeprefix("UD-"), ("", 0.0))
    return int(group.size * share) if kind in estimate.repack_types() else 0


@dataclass
class RepoReport:
    """What the catalog knows of a repo's model before download."""

    listing: RepoListing
    architecture: str | None
    parameters: int | None
    context_length: int | None
    source: str  # "hub" (its GGUF metadata) or "header" (read from a file's first MBs)
    shape: estimate.ModelShape | None
    shape_file: str | None  # the file whose header gave the shape
    problem: str | None  # llama.cpp's reason it cannot run this model; None: it runs
    note: str | None = None  # why the header could not be read (a gated repo without a token)

    @property
    def runnable(self) -> bool:
        return self.problem is None


def inspect_repo(listing: RepoListing, group: QuantGroup | None = None) -> RepoReport:
    """Read one file's header (`group`'s, by default the smallest) and judge the repo."""
    group = group or listing.groups[0]
    facts = listing.facts
    shape, problem, note = None, None, None
    try:
        header, data = fetch_header(listing.repo_id, group.first, listing.commit)
        shape = estimate.shape_of(header)
        problem = architecture_problem(header, data)
    except ModelFileError as exc:
        problem = exc.reason
    except HubError as exc:
        if facts.architecture is None:
            raise
        note = str(exc)
    from_hub = facts.architecture is not None
    return RepoReport(
        listing,
        facts.architecture or (shape.architecture if shape else None),
        facts.parameters or (shape.parameters if shape else None),
        facts.context_length or (shape.context_length if shape else None),
        "hub" if from_hub else "header",
        shape,
        group.first.path if shape else None,
        problem,
        note,
    )


def fit(report: RepoReport, group: QuantGroup, n_ctx: int | None = None,
        machine: estimate.Machine | None = None) -> estimate.Fit | None:
    """The memory `group` needs at `n_ctx` (default: what TurboSpark opens it with) against this
    machine; None without a shape (the header could not be read)."""
    shape = report.shape
    if shape is None:
        return None
    if report.shape_file != group.first.path:  # another quantization: its repack by its name
        shape = dataclasses.replace(shape, repack_bytes=repack_guess(group))
    n_ctx = n_ctx or estimate.default_context(shape)
    return estimate.judge(estimate.need(shape, group.size, n_ctx), machine)


def exact_fit(report: RepoReport, group: QuantGroup, n_ctx: int | None = None) -> tuple[RepoReport, estimate.Fit | None]:
    """`fit` from `group`'s own header (one more ranged read when it is not the one read)."""
    if report.shape_file != group.first.path:
        report = inspect_repo(report.listing, group)
    return report, fit(report, group, n_ctx)
