"""`turbospark model search TEXT | get REPO[:QUANT] | list | token`: the Hugging Face catalog
on the console (turbospark_app.catalog). Only `search` and `get` contact the Hub."""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import datetime
from pathlib import Path

from ..catalog import config, download, estimate, hub, inspect, library, names


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _fit_text(fit: estimate.Fit | None) -> str:
    if fit is None:
        return "fit unknown (header unreadable)"
    return f"{fit.verdict} ({estimate.gb(fit.need.total)} at {fit.need.n_ctx:,} tokens)"


def _print_repo(report: inspect.RepoReport, n_ctx: int | None, downloads: int | None = None) -> None:
    listing = report.listing
    bits = [listing.repo_id, f"{report.architecture or '?'}", f"{_params(report.parameters)} params",
            f"context {report.context_length:,}" if report.context_length else "context ?"]
    if downloads is not None:
        bits.append(f"{downloads:,} downloads")
    print("  ".join(bits))
    if not report.runnable:
        print(f"  cannot run: {report.problem}")
    if report.note:
        print(f"  note: {report.note}")
    for group in listing.groups:
        extra = " (incomplete split)" if not group.complete else ""
        proj = " + projector" if listing.projector_for(group) else ""
        verdict = _fit_text(inspect.fit(report, group, n_ctx)) if report.runnable else "-"
        print(f"  {listing.repo_id}:{group.quant:<10} {_size(group.size):>10}{proj}{extra}  {verdict}")


def _search(args: argparse.Namespace) -> int:
    text = " ".join(args.operands)
    ref = names.parse_repo_ref(text)
    try:
        if ref is not None:  # a repo id or URL: that repo
            report = inspect.inspect_repo(hub.repo_listing(ref.repo_id, ref.revision))
            _print_repo(report, args.ctx_size)
            return 0
        hits = hub.search(text, sort=args.sort, limit=args.limit)
        if not hits:
            print(f"no GGUF model repo matches {text!r}", file=sys.stderr)
            return 1
        for hit in hits:
            try:
                report = inspect.inspect_repo(hub.repo_listing(hit.repo_id))
            except hub.HubError as exc:
                print(f"{hit.repo_id}: {exc}")
                continue
            _print_repo(report, args.ctx_size, hit.downloads)
    except hub.HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


class _Bar:
    """A download's progress on stderr: a live bar on a terminal, a line per 10% otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last: tuple[str, int] | None = None

    def __call__(self, p: download.Progress) -> None:
        pct = int(100 * p.fraction)
        step = pct if self.tty else pct // 10 * 10
        if self.last == (p.phase, step) or p.phase == "done":
            return
        self.last = (p.phase, step)
        if p.phase == "verify":
            line = f"verifying {p.file}: {pct}%"
        else:
            bar = "#" * (pct // 4)
            eta = f", {p.eta_s:.0f} s left" if p.eta_s is not None else ""
            line = (f"[{bar:<25}] {pct:3d}% {_size(p.done)}/{_size(p.total)} "
                    f"{p.speed / 1e6:.1f} MB/s{eta}")
        sys.stderr.write("\r" + line.ljust(78) if self.tty else line + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\n")


def _get(args: argparse.Namespace) -> int:
    ref = names.parse_repo_ref(args.operands[0])
    if ref is None:
        print(f"error: {args.operands[0]!r} is not a repo id (owner/name[:QUANT]) or a Hub URL",
              file=sys.stderr)
        return 2
    try:
        listing = hub.repo_listing(ref.repo_id, ref.revision)
        if ref.quant:
            group = listing.group(ref.quant)
            if group is None:
                have = ", ".join(g.quant for g in listing.groups)
                print(f"error: {ref.repo_id} has no {ref.quant} (it has {have})", file=sys.stderr)
                return 1
        elif len(listing.groups) == 1:
            group = listing.groups[0]
        else:
            have = ", ".join(f"{g.quant} ({_size(g.size)})" for g in listing.groups)
            print(f"error: {ref.repo_id} has several quantizations; name one as "
                  f"{ref.repo_id}:QUANT: {have}", file=sys.stderr)
            return 2
        report, fit = inspect.exact_fit(inspect.inspect_repo(listing, group), group, args.ctx_size)
    except hub.HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not report.runnable:
        print(f"error: llama.cpp cannot run {ref.repo_id}: {report.problem}", file=sys.stderr)
        return 1
    print(f"{ref.repo_id}:{group.quant}  {_size(group.size)}  {_fit_text(fit)}", file=sys.stderr)
    if fit is not None and fit.verdict == estimate.WONT_FIT:
        print("warning: " + "; ".join(fit.lines()), file=sys.stderr)
    job = download.plan(listing, group, config.models_folder())
    left = download.bytes_left(job)
    if 0 < left < job.total:
        print(f"resuming: {_size(job.total - left)} already here, {_size(left)} to fetch", file=sys.stderr)
    bar = _Bar()
    try:
        path = download.run(job, on_progress=bar)
    except KeyboardInterrupt:
        bar.end()
        print("download interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    except (download.DownloadError, hub.HubError) as exc:
        bar.end()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    bar.end()
    print(path)
    return 0


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "never"


def _list(args: argparse.Namespace) -> int:
    models = library.list_models()
    print(f"models folder: {config.models_folder()}")
    if not models:
        print("no models yet: `turbospark model search TEXT`, then `turbospark model get REPO:QUANT`")
        return 0
    for m in models:
        extra = "  + projector" if m.mmproj else ""
        print(f"{m.name}  {_size(m.size)}  last used {_when(m.last_used)}  {m.path}{extra}")
    return 0


def _token(args: argparse.Namespace) -> int:
    store = config.token_store()
    prompt = "Hugging Face token (empty to forget it): "
    token = getpass.getpass(prompt) if sys.stdin.isatty() else sys.stdin.readline().strip()
    store.set(config.TOKEN_NAME, token.strip())
    print(f"token {'stored' if token.strip() else 'forgotten'} ({store.location})", file=sys.stderr)
    return 0


def run_catalog_command(args: argparse.Namespace) -> int:
    """`model search|get|list|token`; returns the exit code."""
    action = args.action
    if action == "search":
        if not args.operands:
            print("error: `model search` needs words to search for (or a repo id / URL)", file=sys.stderr)
            return 2
        return _search(args)
    if action == "get":
        if len(args.operands) != 1:
            print("error: `model get` takes one REPO[:QUANT]", file=sys.stderr)
            return 2
        return _get(args)
    if args.operands:
        print(f"error: `model {action}` takes no operand", file=sys.stderr)
        return 2
    return _list(args) if action == "list" else _token(args)


def resolve_model_name(value: str | None) -> str | None:
    """`--model REPO:QUANT` -> the downloaded file's path; a path (or nothing) as it is. Raises
    SystemExit(2) with the reason when it names a repo that is not downloaded."""
    if not value or Path(value).expanduser().exists() or names.is_gguf(value):
        return value
    if names.parse_repo_ref(value) is None:
        return value
    path = library.resolve(value)
    if path is None:
        print(f"error: no downloaded model named {value!r}: run `turbospark model get {value}` "
              "(`turbospark model list` shows what is here)", file=sys.stderr)
        raise SystemExit(2)
    library.mark_used(path)
    return str(path)
