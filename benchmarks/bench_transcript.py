"""Cost of one streamed delta in the transcript, against what is above it (offscreen Qt).

Prints the median microseconds per `append_delta` (layout and a repaint included) for a reply
streamed under an empty transcript and under a 5,000-token one, and for a reply that is one long
paragraph vs one with a paragraph break every ~100 tokens.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_transcript.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication  # noqa: E402

from turbospark_app.ui.pane.transcript import Entry, Transcript  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def history(tokens: int) -> list[Entry]:
    """Finished user/assistant messages totalling about `tokens` word-tokens."""
    entries: list[Entry] = []
    for n in range(0, tokens, 100):
        words = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(100))
        entries += [Entry("user", f"question {n}"), Entry("assistant", words, footer="new 100 tok")]
    return entries


def deltas(n: int) -> list[str]:
    """Word deltas with a paragraph break every 97 tokens."""
    return ["\n\n" if i % 97 == 96 else " " + WORDS[i % len(WORDS)] for i in range(n)]


def per_delta_us(view: Transcript, stream: list[str], batch: int = 250, per_turn: int = 8) -> list[float]:
    """Median cost per delta of each `batch` appends, in order (µs): the deltas are written
    once per event-loop turn (`flush_stream`: every `per_turn` deltas here, about what a turn
    brings at 400 tok/s), a repaint after each batch."""
    out = []
    for i in range(0, len(stream), batch):
        t0 = time.perf_counter()
        for j, d in enumerate(stream[i : i + batch]):
            view.append_delta(d)
            if j % per_turn == per_turn - 1:
                view.flush_stream()
        view.flush_stream()
        view.viewport().repaint()
        out.append((time.perf_counter() - t0) / batch * 1e6)
    return out


def fresh(entries_tokens: int) -> Transcript:
    view = Transcript()
    view.resize(700, 500)
    view.show()
    if entries_tokens:
        view.set_entries(history(entries_tokens))
    view.begin_reply()
    return view


def main() -> None:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    stream = deltas(2000)  # a paragraph break every 97 tokens
    flat = [d if d != "\n\n" else " x" for d in stream]  # one 2,000-token paragraph
    rows = [
        ("empty transcript, paragraphs", per_delta_us(fresh(0), stream)),
        ("5,000-token transcript, paragraphs", per_delta_us(fresh(5000), stream)),
        ("empty transcript, one paragraph", per_delta_us(fresh(0), flat)),
    ]
    for name, costs in rows:
        print(f"{name:38s} median {statistics.median(costs):7.1f} µs/delta  "
              f"first {costs[0]:7.1f}  last {costs[-1]:7.1f}")
    base, big = statistics.median(rows[0][1]), statistics.median(rows[1][1])
    print(f"5,000-token transcript vs empty: {big / base:.2f}x")
    app.processEvents()


if __name__ == "__main__":
    main()
