"""QA evidence: what a tester attaches to a pacing or cancellation bug report.

From one base name three files are written:

    <base>.png   the cadence plot as the panel shows it (the chart view, grabbed)
    <base>.csv   one row per record, `kind` first: token (time, turn, index, rolling rate, the
                 cap and levels in force), turn (prompt, reused prefix, new tokens, slot
                 eviction, ending), stop (phase, tokens, Stop-to-ended latency), and the plotted
                 series: cap, thermal, memory (time, value)
    <base>.json  the same data, grouped, with the summary figures and the machine

Times are seconds on the panel's clock (since it was created).
"""

from __future__ import annotations

import csv
import io
import json
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .data import QAData

CSV_COLUMNS = (
    "kind", "t_s", "request_id", "conversation_id", "token_index", "rate_tok_s", "cap_tok_s",
    "thermal", "memory", "value", "phase", "prompt_tokens", "reused_prefix_tokens", "new_tokens",
    "slot_evicted", "stop_reason", "stop_latency_ms",
)


def evidence_json(data: QAData, *, summary: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything the panel recorded, as one JSON-ready document."""
    return {
        "format": "turbospark-qa-evidence",
        "version": 1,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"system": platform.system(), "machine": platform.machine(),
                    "python": platform.python_version()},
        "summary": summary or {},
        "tokens": [asdict(r) for r in data.token_log],
        "turns": [asdict(r) for r in data.turn_log],
        "stops": [asdict(r) for r in data.stops],
        "series": {
            "cadence_tok_s": [list(p) for p in data.cadence],
            "cap_tok_s": [list(p) for p in data.cap],  # -1 = uncapped
            "thermal_step": [list(p) for p in data.thermal],  # -1 = unavailable
            "memory_step": [list(p) for p in data.memory],
        },
        "totals": {"turns": data.turns, "evictions": data.evictions,
                   "reused_prefix_tokens": data.reused_total, "prompt_tokens": data.prompt_total},
    }


def evidence_csv(data: QAData) -> str:
    """The records as CSV (see the module docstring)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in data.token_log:
        writer.writerow({"kind": "token", "t_s": f"{r.at:.4f}", "request_id": r.request_id,
                         "conversation_id": r.conversation_id, "token_index": r.index,
                         "rate_tok_s": "" if r.rate is None else f"{r.rate:.3f}",
                         "cap_tok_s": "" if r.cap is None else f"{r.cap:g}",
                         "thermal": r.thermal, "memory": r.memory})
    for t in data.turn_log:
        writer.writerow({"kind": "turn", "t_s": f"{t.at:.4f}", "request_id": t.request_id,
                         "conversation_id": t.conversation_id, "prompt_tokens": t.prompt_tokens,
                         "reused_prefix_tokens": t.reused_prefix_tokens, "new_tokens": t.new_tokens,
                         "slot_evicted": int(t.slot_evicted), "stop_reason": t.stop_reason,
                         "stop_latency_ms": _ms(t.stop_latency)})
    for s in data.stops:
        writer.writerow({"kind": "stop", "t_s": f"{s.at:.4f}", "conversation_id": s.conversation_id,
                         "phase": s.phase, "new_tokens": s.new_tokens, "stop_latency_ms": _ms(s.latency)})
    for kind, series in (("cap", data.cap), ("thermal", data.thermal), ("memory", data.memory)):
        for at, value in series:
            writer.writerow({"kind": kind, "t_s": f"{at:.4f}", "value": f"{value:g}"})
    return out.getvalue()


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:.1f}"


def write_evidence(base: str | Path, data: QAData, chart_png: Any, *,
                   summary: dict[str, str] | None = None) -> list[Path]:
    """Write <base>.png / .csv / .json; `chart_png(path) -> bool` saves the plot. Returns the
    paths written. Raises OSError when a file cannot be written."""
    base = Path(base)
    if base.suffix.lower() in (".png", ".csv", ".json"):
        base = base.with_suffix("")
    png, csv_path, json_path = (base.with_name(base.name + ext) for ext in (".png", ".csv", ".json"))
    if not chart_png(str(png)):
        raise OSError(f"the plot could not be saved to {png}")
    csv_path.write_text(evidence_csv(data), encoding="utf-8")
    json_path.write_text(json.dumps(evidence_json(data, summary=summary), indent=2) + "\n", encoding="utf-8")
    return [png, csv_path, json_path]
