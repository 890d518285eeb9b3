"""The QA panel's engine figures, as text from a system_info snapshot (no Qt): the KV cache
(its types, what a token weighs, the bytes allocated and held now) and the host overhead per
decode step (engine.host_gauge: the wall time outside llama_decode, by streams in a step)."""

from __future__ import annotations

from typing import Any, Mapping

from ..formatting import bytes_label, nested


def kv_cache_text(info: Mapping[str, Any]) -> str:
    """"q8_0 · 12.0 KB/token · 48.0 MB for 4,096 tokens · 3.1 MB held now"; "no model" before one."""
    kv = nested(info, "model.kv_cache")
    per_token = nested(info, "model.kv_bytes_per_token") or 0
    if not kv or not per_token:
        return "no model loaded"
    held = sum(int(s.get("kv_bytes") or 0) for s in info.get("sessions") or [])
    cells = int(nested(info, "model.max_context") or 0)
    flash = " (flash attention)" if kv.get("flash_attention") else ""
    return (f"{kv.get('label', 'f16')}{flash} · {bytes_label(per_token)}/token · "
            f"{bytes_label(kv.get('bytes') or per_token * cells)} for {cells:,} tokens · "
            f"{bytes_label(held)} held now")


def host_overhead_text(info: Mapping[str, Any]) -> str:
    """"1 stream: 183 µs a step (2% of it) · 4 streams: 412 µs, 103 µs a stream (4%)"; "no
    decode step yet" before one."""
    figures = nested(info, "model.host_overhead") or {}
    parts = []
    for rows, f in figures.items():
        if rows == "1":
            parts.append(f"1 stream: {f['step_us']:.0f} µs a step ({100 * f['share']:.0f}% of it)")
        else:
            parts.append(f"{rows} streams: {f['step_us']:.0f} µs, {f['per_stream_us']:.0f} µs a stream "
                         f"({100 * f['share']:.0f}%)")
    return " · ".join(parts) or "no decode step yet"
