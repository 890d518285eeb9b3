"""Models › Find Models… driven as a person would, for the README: real clicks (xdotool) in
the real app under X (Xvfb), against the stand-in Hub (tests/hub_standin.py, HF_ENDPOINT):
search → pick the repo → Download → the model opens → a question → its answer.

    xvfb-run -a -s "-screen 0 1600x1000x24" python tools/screenshot_catalog.py [--out docs/screenshots]

The app starts on a tiny model written here; the stand-in serves the default model (from the
data folder, `make model`) paced so the capture shows the download under way. Everything goes to
a throw-away data folder. Writes:

    find-models.png         the dialog: the repo, its quantization, the fit verdict and numbers,
                            the download's progress, speed and time left (dialog + status bar)
    find-models-answer.png  the downloaded model loaded (status bar) and its answer

Needs xdotool and ImageMagick's `import`; exits non-zero when a step does not happen.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "smollm2-135m-instruct-q4_1.gguf"


def xdo(*args: str) -> str:
    return subprocess.run(["xdotool", *args], check=True, capture_output=True, text=True).stdout


def click(x: int, y: int) -> None:
    xdo("mousemove", str(x), str(y), "click", "1")


def window(name: str, timeout: float = 60) -> tuple[int, int, int, int]:
    """(x, y, width, height) of the first visible window called `name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", name],
                               capture_output=True, text=True).stdout.split()
        for wid in found:
            geo = xdo("getwindowgeometry", "--shell", wid)
            values = dict(line.split("=") for line in geo.split())
            if int(values["WIDTH"]) > 100:
                return int(values["X"]), int(values["Y"]), int(values["WIDTH"]), int(values["HEIGHT"])
        time.sleep(0.3)
    raise SystemExit(f"screenshot_catalog: no window {name!r}")


def wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshot_catalog: timed out waiting for {what}")
        time.sleep(0.2)


def shot(path: Path) -> None:
    subprocess.run(["import", "-window", "root", str(path)], check=True)
    print(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("DISPLAY"):
        raise SystemExit("screenshot_catalog: needs an X display (run it under xvfb-run)")
    sys.path.insert(0, str(ROOT / "tests"))
    from hub_standin import standard_hub
    from tiny_gguf import write_tiny_gguf

    from turbospark_app.model.fetch import ensure_default_model

    default = ensure_default_model(download=False)
    work = Path(tempfile.mkdtemp(prefix="turbospark-catalog-shot-"))
    hub = standard_hub(work / "hub", default)
    hub.slow[SMOL_FILE] = 0.06  # s per MiB: ~6 s for the 94 MiB, to see the progress
    hub.start()
    tiny = work / "tiny-chat.gguf"
    write_tiny_gguf(tiny, tokenizer={})
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, TURBOSPARK_DATA_DIR=str(work / "data"),
               TURBOSPARK_CONFIG_DIR=str(work / "config"), TURBOSPARK_CACHE_DIR=str(work / "cache"))
    app = subprocess.Popen([sys.executable, "-m", "turbospark_app", "--model", str(tiny)], env=env,
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(work / "app.log", "w"))
    try:
        wx, wy, ww, wh = window("TurboSpark")
        time.sleep(3)  # the tiny model loads
        click(wx + ww // 2, wy + wh // 3)
        xdo("key", "ctrl+shift+m")
        dx, dy, dw, dh = window("Find Models")
        time.sleep(0.5)
        xdo("type", "--delay", "40", "smollm2")
        xdo("key", "Return")
        wait(lambda: any(p == "/api/models" for _m, p, _q, _h in hub.requests), 20, "the search")
        time.sleep(1.5)
        click(dx + 150, dy + 53)  # the first hit in the repo list
        wait(lambda: any("/tree/" in p for _m, p, _q, _h in hub.requests), 20, "the repo listing")
        time.sleep(3)  # the header's ranged read, llama.cpp's verdict on the architecture
        click(dx + dw - 140, dy + dh - 23)  # Download
        wait(lambda: hub.served.get(SMOL_FILE, 0) > 40_000_000, 60, "half the download")
        shot(args.out / "find-models.png")
        folder = work / "data" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
        wait(lambda: (folder / SMOL_FILE).is_file(), 120, "the verified download")
        time.sleep(6)  # the file is checked, then loaded
        click(dx + dw - 50, dy + dh - 23)  # Close
        time.sleep(0.5)
        click(wx + ww // 2, wy + wh - 70)  # the message input
        xdo("type", "--delay", "30", "Hi! Who are you? Answer in one sentence.")
        xdo("key", "Return")
        from turbospark_app.conversations.reply_stats import INTERRUPTED
        from turbospark_app.conversations.store import Store

        def answered() -> bool:
            path = work / "data" / "conversations.sqlite3"
            if not path.exists():
                return False
            store = Store(path)
            try:
                return any(m.role == "assistant" and m.content.strip() and m.stop_reason not in (None, INTERRUPTED)  # ended
                           for c in store.conversations() for m in store.messages(c.id))
            finally:
                store.close()

        wait(answered, 300, "the model's answer (saved when the turn ends)")
        time.sleep(1)
        shot(args.out / "find-models-answer.png")
    finally:
        app.terminate()
        app.wait(20)
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
