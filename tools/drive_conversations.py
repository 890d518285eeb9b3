"""Drive the real app under Xvfb with real keys (xdotool): Regenerate, the ‹ › switch, a
kill -9 mid-reply, the restart that shows the reply "interrupted", and Continue. Takes the
README screenshots of a message with alternatives and of an interrupted reply.

    python tools/drive_conversations.py [--out docs/screenshots] [--display :97]

Needs Xvfb, xdotool and ImageMagick's `import` (apt-get install xvfb xdotool imagemagick).
Works in a throw-away data folder; checks the store after each step and says what it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
WINDOW = "TurboSpark"


def rows(store: Path) -> list[tuple]:
    """(id, role, stop_reason, content, n token ids, active) of every message."""
    try:
        db = sqlite3.connect(str(store))
        out = db.execute("SELECT id, role, stop_reason, content, token_ids, active FROM messages ORDER BY id").fetchall()
        db.close()
    except sqlite3.Error:
        return []
    return [(r[0], r[1], r[2], r[3], len(json.loads(r[4])) if r[4] else 0, r[5]) for r in out]


def wait(what: str, predicate: Callable[[], bool], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"drive: timed out waiting for {what}")
        time.sleep(0.25)


class Session:
    def __init__(self, display: str, data: Path, model: str) -> None:
        self.env = {**os.environ, "DISPLAY": display, "TURBOSPARK_DATA_DIR": str(data / "data"),
                    "TURBOSPARK_CONFIG_DIR": str(data / "config")}
        self.store = data / "data" / "conversations.sqlite3"
        self.model = model
        self.app: subprocess.Popen | None = None

    def start(self) -> None:
        self.app = subprocess.Popen([sys.executable, "-m", "turbospark_app", "--model", self.model],
                                    cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait("the window", lambda: bool(self.window()), 60)
        time.sleep(3)  # the model loads on the engine thread; typing is fine meanwhile

    def window(self) -> str:
        out = subprocess.run(["xdotool", "search", "--name", WINDOW], env=self.env, capture_output=True, text=True)
        for wid in out.stdout.split():
            geo = subprocess.run(["xdotool", "getwindowgeometry", wid], env=self.env, capture_output=True, text=True)
            if "Geometry: 1x1" not in geo.stdout:
                return wid
        return ""

    def keys(self, *keys: str) -> None:
        subprocess.run(["xdotool", "key", *keys], env=self.env, check=True)  # XTEST: real key events
        time.sleep(0.4)

    def type(self, text: str) -> None:
        subprocess.run(["xdotool", "type", "--delay", "15", text], env=self.env, check=True)

    def shot(self, path: Path) -> None:
        subprocess.run(["import", "-window", self.window(), str(path)], env=self.env, check=True)
        print(f"drive: wrote {path}")

    def kill9(self) -> None:
        assert self.app is not None
        os.kill(self.app.pid, signal.SIGKILL)
        self.app.wait(10)

    def quit(self) -> None:
        if self.app is not None and self.app.poll() is None:
            self.keys("ctrl+q")
            try:
                self.app.wait(20)
            except subprocess.TimeoutExpired:
                self.app.terminate()
                self.app.wait(10)


def replies(store: Path) -> list[tuple]:
    return [r for r in rows(store) if r[1] == "assistant"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--display", default=":97")
    args = parser.parse_args()
    from turbospark_app.model.fetch import resolve_model_path

    model = str(resolve_model_path(None))
    xvfb = subprocess.Popen(["Xvfb", args.display, "-screen", "0", "1400x900x24"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    s = Session(args.display, Path(tempfile.mkdtemp(prefix="turbospark-drive-")), model)
    try:
        s.start()
        s.type("Write a haiku about the sea.")
        s.keys("Return")
        wait("the first reply to end", lambda: any(r[2] not in (None, "interrupted") for r in replies(s.store)))
        s.keys("ctrl+r")  # Regenerate
        wait("the second reply", lambda: len(replies(s.store)) == 2
             and all(r[2] != "interrupted" for r in replies(s.store)))
        s.keys("ctrl+alt+Left")  # back to the first alternative: ‹ 1/2 ›
        first, second = replies(s.store)
        assert first[5] == 1 and second[5] == 0, "the first alternative is on screen"
        s.shot(args.out / "alternatives.png")

        s.keys("ctrl+n")
        s.type("Explain how a lighthouse works, step by step.")
        s.keys("Return")
        wait("12 tokens checkpointed", lambda: len(replies(s.store)) == 3 and replies(s.store)[-1][4] >= 12)
        s.kill9()
        saved = replies(s.store)[-1]
        print(f"drive: killed mid-reply; the store holds {saved[4]} tokens, {saved[2]!r}")
        s.start()
        time.sleep(2)
        s.shot(args.out / "interrupted.png")
        s.keys("ctrl+shift+Return")  # Continue
        wait("the continued reply to grow", lambda: replies(s.store)[-1][4] > saved[4])
        s.keys("Escape")
        wait("the stop", lambda: replies(s.store)[-1][2] == "cancelled")
        grown = replies(s.store)[-1]
        assert grown[0] == saved[0] and grown[3].startswith(saved[3]), "continued in the same message"
        print(f"drive: continued in the same message: {saved[4]} -> {grown[4]} tokens")
    finally:
        s.quit()
        xvfb.terminate()
        xvfb.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
