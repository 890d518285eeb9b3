"""Indexing yields to generation: a reply's decode rate and the GUI's frames in the real window,
idle and while a collection indexes in the background (the issue's targets: decode >= 0.9x
its idle rate, GUI p99 frame <= 16 ms).

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_docs_yield.py [--rounds 3]
        [--max-new 256] [--modes low,pause,none] [--model GGUF]

The window (build_window, the default chat model) answers the same prompt greedily, each time
in a fresh conversation. Conditions, in a rotating order each round:

    idle       nothing indexes
    low        a big collection indexes: the index thread at nice 19 (its compute threads
               inherit it), 1 thread while the reply generates
    pause      (the app's default) the index thread, at nice 19, waits while a reply generates
               (documents.service.YieldGate)
    none       no yielding at all: normal priority, 2 threads throughout (what yielding buys)

A 16 ms precise QTimer stands for a 60 Hz animation; its tick-to-tick gaps are the frames
(p99 printed; the GUI thread's CPU time per frame beside it, since on a loaded machine the
gaps also count other processes' turns). Also printed: the chunks the indexer embedded during
the reply (a "pause" run embeds none while the reply runs) and `uptime`'s load.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_code_stream import FrameProbe, percentile  # noqa: E402  (the same 60 Hz probe)

PROMPT = "Write a long story about a dragon who learns to bake bread. Make it at least 400 words."
WORDS = ("river harbour ledger valve shipment permit gauge inventory route budget survey manifest orchard "
         "bridge archive timetable glaze hive tide hut dye telescope bread fermentation kiln mill").split()


def write_big_corpus(folder: Path, files: int = 400, words: int = 1500) -> None:
    """Markdown files of filler: far more than a reply's time can index (each run is stopped)."""
    rng = random.Random(1)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        paras = [" ".join(rng.choice(WORDS) for _ in range(100)) + "." for _ in range(words // 100)]
        (folder / f"doc-{i:03d}.md").write_text(f"# Document {i}\n\n" + "\n\n".join(paras), encoding="utf-8")


def reply_round(window, max_new: int) -> tuple[float, int, list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Send PROMPT in a new conversation: (decode tok/s, tokens, frame gaps ms, GUI CPU ms per frame)."""
    from PySide6.QtCore import QEventLoop, QTimer

    window.new_conversation()
    pane = window.area.current_pane()
    pane.settings_form.max_new.setValue(max_new)
    pane.settings_form.temperature.setValue(0.0)
    probe = FrameProbe()
    loop = QEventLoop()
    pane.busyChanged.connect(lambda _cid, busy: None if busy else QTimer.singleShot(100, loop.quit))
    QTimer.singleShot(600_000, loop.quit)
    pane.input.setPlainText(PROMPT)
    probe.start()
    pane.send()
    if pane.busy:
        loop.exec()
    probe.stop()
    reply = window.store.messages(pane.conversation_id)[-1]
    return float(reply.stats["decode_tokens_per_sec"]), int(reply.stats["new_tokens"]), probe.gaps, probe.cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--modes", default="low,pause,none")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-docs-yield-") as tmp:
        return _run(args, Path(tmp))


def _run(args: argparse.Namespace, tmp: Path) -> int:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from turbospark_app.chat.backend import load_backend
    from turbospark_app.documents.store import DocumentStore
    from turbospark_app.model.embedder_fetch import ensure_embedder
    from turbospark_app.model.fetch import resolve_model_path
    from turbospark_app.ui.app import build_window
    from turbospark_app.ui.services.docs_hub import DocsHub

    app = QApplication.instance() or QApplication([])
    path = resolve_model_path(args.model)  # (before the data folder moves to the temp one)
    os.environ.setdefault("TURBOSPARK_EMBEDDER", str(ensure_embedder(download=True)))
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp / "data")
    corpus = tmp / "corpus"
    write_big_corpus(corpus)
    w = build_window(lambda: load_backend(path), session_slots=2, store_path=tmp / "store.db",
                     settings=QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat))
    w.resize(1280, 820)
    w.show()
    while w.bridge.backend_state not in ("ready", "failed"):
        app.processEvents()
        time.sleep(0.01)
    if w.bridge.backend_state == "failed":
        raise SystemExit(f"the model did not load: {w.bridge.backend_error}")
    # One embedder loaded and run in every condition, idle included: libgomp throttles its
    # threads' spin-waiting once the process has more OpenMP threads than cores, which on a
    # loaded machine changed the decode rate 3-10x by itself (GOMP_SPINCOUNT=1000 did the same):
    # without this, "idle" would be the slow one. In the app the hub's embedders are loaded
    # from the first collection on.
    from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder

    resident = LlamaCppEmbedder(os.environ["TURBOSPARK_EMBEDDER"], threads=2)
    resident.embed(["warm-up", "the OpenMP team of the embedder"])
    reply_round(w, 16)  # warm-up: the first turn's one-off costs
    modes = [m for m in args.modes.split(",") if m]
    names = ["idle", *modes]
    rows: dict[str, dict[str, list[float]]] = {n: {"rate": [], "p99": [], "cpu99": [], "chunks": []} for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            hub = None
            if name != "idle":
                hub = DocsHub(w.bridge, DocumentStore(tmp / f"index-{name}-{r}.db"), yield_mode=name if name != "none"
                              else "none", lower_priority=name != "none")
                hub.add("big", [corpus])
                start = time.monotonic()
                while hub.service.embedding is None or hub.service.embedding.embedded == 0:
                    app.processEvents()
                    time.sleep(0.02)
                    if time.monotonic() - start > 120:
                        raise SystemExit("the indexer did not start")
            before = hub.service.embedding.embedded if hub else 0
            rate, n, gaps, cpu = reply_round(w, args.max_new)
            during = (hub.service.embedding.embedded - before) if hub else 0
            still = hub.service.busy("big") if hub else True
            if hub is not None:
                hub.service.cancel("big")
                hub.close()
            rows[name]["rate"].append(rate)
            rows[name]["p99"].append(percentile(gaps, 0.99))
            rows[name]["cpu99"].append(percentile(cpu, 0.99))
            rows[name]["chunks"].append(during)
            print(f"round {r + 1}: {name:<6} decode {rate:6.1f} tok/s ({n} tok) · frames p99 "
                  f"{percentile(gaps, 0.99):5.1f} ms max {max(gaps):6.1f} ms · GUI CPU/frame p99 "
                  f"{percentile(cpu, 0.99):4.1f} ms · {during} chunks embedded during the reply"
                  + ("" if still else " (indexing ENDED before the reply: corpus too small)"), flush=True)
    w.close()
    resident.close()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    idle = statistics.median(rows["idle"]["rate"])
    print(f"\n{path.name} · {os.cpu_count()} cores · greedy, {args.max_new} new tokens · medians of "
          f"{args.rounds} · QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')}\nload: {load}")
    for name in names:
        med = statistics.median(rows[name]["rate"])
        print(f"  {name:<6} decode {med:6.1f} tok/s  {med / idle:5.2f}x idle · frames p99 "
              f"{statistics.median(rows[name]['p99']):5.1f} ms · GUI CPU/frame p99 "
              f"{statistics.median(rows[name]['cpu99']):4.1f} ms · chunks during reply "
              f"{statistics.median(rows[name]['chunks']):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
