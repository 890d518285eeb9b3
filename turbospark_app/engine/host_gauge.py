"""What Python adds around `llama_decode` per decode step: the host overhead, as its own figure.

The producer reports the moments each decode step's `llama_decode` began and ended
(`observe`); the gap from one step's end to the next step's start is everything else a step costs
(the logits' access, masking and sampling, stop matching, detokenizing, the events, the writes
of whoever reads them, the GIL held by other threads), measured per batch size: with N streams
in one batched step it is shared by N. Only gaps between two decode steps count: a prompt chunk
between them, or a gap past MAX_GAP_S (a turn's end, a pacing wait), starts over.
"""

from __future__ import annotations

import statistics
from collections import deque

MAX_GAP_S = 0.1  # longer is a wait (pacing, the next turn), not work done for the step
KEEP = 512  # gaps kept per batch size: the figures follow the last few seconds


class HostGauge:
    """Gaps between consecutive decode steps, and the steps' own `llama_decode` times, by rows."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._gaps: dict[int, deque[float]] = {}
        self._decodes: dict[int, deque[float]] = {}
        # No lock: only the engine thread writes, and describe()'s copies (list() of a deque,
        # dict()) are single C calls under the GIL, so a reader never sees one half done.

    def observe(self, rows: int, start: float, end: float) -> None:
        """A `llama_decode` ran from `start` to `end` (perf_counter seconds): a decode step of
        `rows` streams, or rows 0 for anything else (a prompt chunk, a verify pass)."""
        last, self._last_end = self._last_end, (end if rows else None)
        if not rows or last is None or start - last > MAX_GAP_S:
            return
        gaps = self._gaps.get(rows)
        if gaps is None:
            gaps = self._gaps[rows] = deque(maxlen=KEEP)
            self._decodes[rows] = deque(maxlen=KEEP)
        self._decodes[rows].append(end - start)
        gaps.append(start - last)

    def describe(self) -> dict[str, dict[str, float]]:
        """{"1": {"step_us", "per_stream_us", "mean_us", "decode_ms", "share", "steps"}, "4": ...}:
        medians of the kept gaps (per step, per stream; the mean too: rare long gaps, a snapshot
        read, count there) and of the decode times, and the gap's share of a step."""
        kept = {n: (list(g), list(self._decodes.get(n, ()))) for n, g in dict(self._gaps).items()}
        out: dict[str, dict[str, float]] = {}
        for rows, (gaps, decodes) in sorted(kept.items()):
            if not gaps or not decodes:
                continue
            gap, dec = statistics.median(gaps), statistics.median(decodes)
            out[str(rows)] = {"step_us": round(gap * 1e6, 1), "per_stream_us": round(gap * 1e6 / rows, 1),
                              "mean_us": round(statistics.fmean(gaps) * 1e6, 1),
                              "decode_ms": round(dec * 1e3, 2), "share": round(gap / (gap + dec), 4),
                              "steps": len(gaps)}
        return out

    def clear(self) -> None:
        self._gaps, self._decodes, self._last_end = {}, {}, None

