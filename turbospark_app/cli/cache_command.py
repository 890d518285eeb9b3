"""`turbospark model cache [list|clear [NAME]]`: what the weight cache holds, and freeing it."""

from __future__ import annotations

import argparse
import sys


def cache_command(args: argparse.Namespace) -> int:
    """List the cache (per model: kinds, size, last use, source files) or clear all of it, or
    one model's (`clear NAME`: model name, file name, source path or key prefix), or those
    whose GGUF is gone (`clear --missing`)."""
    from ..host.folders import cache_dir
    from ..model.weight_cache import budget, report, store

    root = cache_dir()
    action = args.cache_action or "list"
    name = args.name
    if action == "list":
        if name is not None:
            print("error: `model cache list` takes no name", file=sys.stderr)
            return 2
        models = store.list_models(root)
        total = store.total_size(root)
        setting = budget.budget_setting()
        print(f"weight cache {store.weights_root(root)}: "
              + report.summary(total, budget.effective_budget(store.weights_root(root), total),
                               setting is None))
        print(f"prepacked sessions kept per model: {budget.SESSION_POLICY_LABELS[budget.session_policy()]}")
        if not models:
            print("(empty)")
        for m in models:
            print("\n".join(report.model_lines(m)))
        gone = report.missing_line(models)
        if gone:
            print(f"{gone}: `turbospark model cache clear --missing` frees it")
        return 0
    result = store.clear(root, name, missing=args.missing)
    if name is not None and not result.removed and not result.kept_in_use:
        print(f"error: nothing in the weight cache matches {name!r} "
              "(`turbospark model cache list` shows the names)", file=sys.stderr)
        return 1
    print(f"freed {report.human_size(result.freed)} ({len(result.removed)} folders)")
    for path in result.kept_in_use:
        print(f"kept {path.name}: in use by a running TurboSpark (close it, then clear again)",
              file=sys.stderr)
    return 0
