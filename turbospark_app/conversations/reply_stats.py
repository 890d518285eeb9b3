"""A reply's figures across runs: a Continue adds a run, a crash leaves an untimed one.

Pure functions over the stats dicts stored with a reply (TurnStats.to_json() + model_id).
"""

from __future__ import annotations

from typing import Any

INTERRUPTED = "interrupted"  # stop_reason of a reply still streaming (or cut off by a crash)


def previous_runs(stats: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The runs a reply's figures already hold (none for a reply that never started)."""
    if not stats:
        return []
    if stats.get("runs"):
        return list(stats["runs"])
    if stats.get("started", True) and "prompt_tokens" in stats:
        return [_run(stats)]
    return []


def combine_stats(previous: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A continued reply's figures: one run per Continue, combined honestly.

    Token counts (drafted and accepted ones too) and seconds add up; the decode rate is the timed runs' tokens / their decode
    seconds (not an average of rates; a run cut off by a crash counts its saved tokens but has
    no timing); the prompt, reuse, stop reason and stop latency are the LAST run's (what the KV
    held when the reply was resumed); time to first token is the FIRST run's (what the user
    waited for the reply to begin). `runs` keeps every run's own figures.
    """
    runs = previous_runs(previous) + [_run(new)]
    if len(runs) == 1:
        return dict(new)
    timed = [r for r in runs if not r.get("interrupted")]
    out = dict(new)
    for key in ("new_tokens", "drafted_tokens", "accepted_tokens"):
        out[key] = sum(int(r.get(key) or 0) for r in runs)
    for key in ("prefill_seconds", "decode_seconds", "queued_seconds"):
        out[key] = sum(float(r.get(key) or 0.0) for r in timed)
    timed_tokens = sum(int(r.get("new_tokens") or 0) for r in timed)
    out["decode_tokens_per_sec"] = timed_tokens / out["decode_seconds"] if out["decode_seconds"] > 0 else 0.0
    out["time_to_first_token"] = next((r.get("time_to_first_token") for r in timed
                                       if r.get("time_to_first_token") is not None), None)
    out["slot_evicted"] = any(r.get("slot_evicted") for r in runs)
    out["runs"] = runs
    return out


def partial_stats(previous: dict[str, Any] | None, new_tokens: int, model_id: str) -> dict[str, Any]:
    """The figures a checkpoint saves with a streaming reply: the runs before it, and this
    run's tokens so far (its timing dies with a crash, so it has none)."""
    runs = previous_runs(previous) + [{"new_tokens": new_tokens, "interrupted": True}]
    return {"model_id": model_id, "stop_reason": INTERRUPTED, "started": True,
            "new_tokens": sum(int(r.get("new_tokens") or 0) for r in runs), "runs": runs}


def _run(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "runs"}
