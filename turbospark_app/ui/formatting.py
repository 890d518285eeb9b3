"""Text for figures: stats lines, rates, sizes, readings. Pure functions (no Qt)."""

from __future__ import annotations

from typing import Any, Mapping

from ..service import TurnStats

_REASONS = {
    "end_of_turn": "end of turn",
    "tool_calls": "tool call",
    "eos": "end of sequence",
    "stop_string": "stop string",
    "max_tokens": "token limit",
    "cancelled": "stopped",
}


_FENCES = ("```", "~~~")


def with_line_breaks(markdown: str) -> str:
    """`markdown` with each line break inside a paragraph made a hard break (two trailing
    spaces), as chat apps show replies: a poem or an address keeps its lines, where Markdown
    would join them into one. Fenced and indented code are left as they are; blank lines still
    end paragraphs."""
    lines = markdown.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines[:-1]):
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        opener = next((f for f in _FENCES if stripped.startswith(f)), None)
        if opener is not None:
            fence = opener
            continue
        nxt = lines[i + 1].lstrip()
        indented = line.startswith(("    ", "\t"))  # indented code keeps its bytes (Copy Code Block)
        if line.strip() and nxt and not indented and not nxt.startswith(_FENCES) \
                and not line.endswith(("  ", "\\")):
            lines[i] = line + "  "
    return "\n".join(lines)


def reason_label(reason: str | None) -> str:
    """A StopReason value in words."""
    if not reason:
        return "unknown"
    return _REASONS.get(reason, reason.replace("_", " "))


def seconds_label(seconds: float | None) -> str:
    """0.0123 -> "12 ms", 2.5 -> "2.50 s"."""
    if seconds is None:
        return "–"
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def rate_label(tokens_per_sec: float | None) -> str:
    """Tokens per second with one decimal."""
    if not tokens_per_sec:
        return "– tok/s"
    return f"{tokens_per_sec:.1f} tok/s"


SHORT_PREFILL_TOKENS = 16  # below this a rate is mostly fixed cost: say tokens and time instead


def prefill_label(stats: TurnStats) -> str:
    """The status bar's prefill figure: a rate, or for a short prefill (a conversation that
    continued its cached prefix, a Regenerate) the tokens fed and how long they took."""
    fed = max(0, stats.prompt_tokens - stats.reused_prefix_tokens)
    if stats.started and fed < SHORT_PREFILL_TOKENS and stats.source != "remote":
        return _fed_in(fed, stats.prefill_seconds)
    return f"prefill {rate_label(stats.prefill_tokens_per_sec)}"


def _fed_in(fed: int, seconds: float) -> str:
    return f"prefill {fed} tok in {seconds_label(seconds)}"


def live_prefill_label(fed: int, seconds: float, done: bool) -> str:
    """`prefill_label` of a prompt going in: `fed` new tokens in `seconds` so far; `done`: all
    of them (a short prefill is said as tokens and time only then)."""
    if fed < SHORT_PREFILL_TOKENS:
        return _fed_in(fed, seconds) if done else "prefill …"
    return f"prefill {rate_label(fed / seconds if seconds > 0 else 0.0)}"


def bytes_label(n: int | float | None) -> str:
    """312_000_000 -> "298 MB" (binary units, like Activity Monitor)."""
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit in ("B", "KB", "MB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover - unreachable


def stats_line(stats: TurnStats, with_reason: bool = True) -> str:
    """The line under a reply: prompt, reused, new, TTFT, decode rate, drafts, stop reason, latency
    (`with_reason` False: a reason the reply's badge already says is left out)."""
    remote = stats.source == "remote"
    if not stats.started:
        latency = f" after {seconds_label(stats.stop_latency)}" if stats.stop_latency is not None else ""
        if remote:
            return f"stopped before the server answered{latency} · {stats.remote}"
        return f"stopped while queued{latency} · the model was not run"
    parts = [
        f"prompt {stats.prompt_tokens} tok" if stats.usage_reported or not remote else "prompt unavailable",
        f"reused {stats.reused_prefix_tokens}" if stats.reuse_source or not remote else "reused unavailable",
        f"new {stats.new_tokens} tok",
        *([f"reasoning {stats.reasoning_tokens} · answer {stats.answer_tokens} tok"]
          if stats.reasoning_tokens else []),
        f"TTFT {seconds_label(stats.time_to_first_token)}",
        f"decode {rate_label(stats.decode_tokens_per_sec)}",
    ]
    if remote:
        parts.insert(0, f"remote {stats.remote}")
    if stats.drafted_tokens:
        parts.append(f"draft {stats.accepted_tokens}/{stats.drafted_tokens} accepted")
    if stats.cap:
        parts.append(f"cap {stats.cap}")
    if stats.stop_reason == "cancelled":
        stop = "stopped"
        if stats.stop_latency is not None:
            stop += f" in {seconds_label(stats.stop_latency)}"
        if stats.new_tokens == 0:
            stop += " (during prefill)"
        parts.append(stop)
    elif with_reason:
        parts.append(reason_label(stats.stop_reason))
    if stats.restored_tokens:
        parts.append(f"{stats.restored_tokens:,} tok restored from RAM")
    if stats.document_tokens:
        parts.append(f"documents +{stats.document_tokens:,} tok")
    if stats.image_tokens:
        parts.append(f"image: {stats.image_tokens} tok, encoded in {seconds_label(stats.image_encode_seconds)}")
    if stats.slot_evicted:
        parts.append("evicted another conversation's KV")
    return " · ".join(parts)


def slot_outcome(stats: TurnStats, last_turn: Mapping[str, Any] | None = None) -> str:
    """hit / miss / evicted for the last turn: the backend's word when it gives one."""
    if last_turn:
        for key in ("slot_outcome", "outcome", "slot"):
            value = last_turn.get(key)
            if isinstance(value, str) and value:
                return value
    if stats.slot_evicted:
        return "evicted"
    return "hit" if stats.reused_prefix_tokens > 0 else "miss"


def reading_label(reading: Any) -> str:
    """A thermal / memory reading from system_info: its label, honest about simulation and
    absence ("serious (simulated)", "unavailable")."""
    if not isinstance(reading, Mapping):
        return "unavailable"
    label = reading.get("label")
    if isinstance(label, str) and label:
        return label
    level = reading.get("level")
    if level is None or reading.get("available") is False:
        return "unavailable"
    text = str(level).lower()
    return f"{text} (simulated)" if reading.get("simulated") else text


def nested(info: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """`nested(info, "process.rss_bytes")`; also accepts a flat "process.rss_bytes" key."""
    if dotted in info:
        return info[dotted]
    node: Any = info
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node
