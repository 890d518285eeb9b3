"""Streaming replies are checkpointed off the GUI thread; a killed app loses at most one
interval and reopens the reply as "interrupted", with Continue."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ui_fakes import FakeBackend, wait_idle

from turbospark_app.conversations.checkpoint import CheckpointPolicy, ReplyRecorder, ReplySnapshot
from turbospark_app.conversations.store import INTERRUPTED, STORE_FILENAME, Store


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_policy_saves_the_first_token_then_every_32_tokens_or_second() -> None:
    clock = Clock()
    policy = CheckpointPolicy(clock=clock)
    due = [policy.due() for _ in range(70)]
    assert [i for i, d in enumerate(due) if d] == [0, 32, 64]
    clock.t = 1.0  # a slow reply: one second passes with few tokens
    assert policy.due()
    clock.t = 1.5
    assert not policy.due()


def test_the_writer_saves_snapshots_and_never_overwrites_a_finished_reply(tmp_path: Path) -> None:
    store = Store(tmp_path / STORE_FILENAME)
    c = store.create_conversation()
    _, reply = store.start_turn(c.id, None, "q")
    writer = store.checkpointer()
    writer.save(ReplySnapshot(reply.id, "partial", (1, 2), {"new_tokens": 2}))
    assert writer.flush()
    got = store.message(reply.id)
    assert (got.content, got.token_ids, got.stop_reason) == ("partial", (1, 2), INTERRUPTED)
    writer.finish(reply.id)
    store.update_reply(reply.id, "final", token_ids=(1, 2, 3), stats={}, stop_reason="end_of_turn")
    writer.save(ReplySnapshot(reply.id, "late", (1,), None))  # a straggler after the final write
    assert writer.flush()
    assert store.message(reply.id).content == "final"
    assert writer.counters.writes == 2 and not writer.errors
    store.close()


def test_writes_happen_on_the_writer_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from turbospark_app.conversations import checkpoint

    threads: list[str] = []
    original = checkpoint.write_snapshot
    monkeypatch.setattr(checkpoint, "write_snapshot",
                        lambda db, s: (threads.append(threading.current_thread().name), original(db, s)))
    store = Store(tmp_path / STORE_FILENAME)
    c = store.create_conversation()
    _, reply = store.start_turn(c.id, None, "q")
    recorder = ReplyRecorder(store.checkpointer(), reply.id, prefix="Once ", prefix_ids=(7,), model_id="m")
    for i in range(40):
        recorder.token(f"w{i} ", 100 + i)
    store.checkpointer().flush()
    saved = store.message(reply.id)
    assert recorder.saves == 2  # token 1 and token 33
    assert saved.content == "Once " + "".join(f"w{i} " for i in range(33))
    assert saved.token_ids == (7,) + tuple(range(100, 133))
    assert saved.stats["runs"][-1] == {"new_tokens": 33, "interrupted": True}
    assert set(threads) == {"turbospark-checkpoint"}
    store.close()


@pytest.mark.slow
def test_a_killed_app_reopens_the_partial_reply_as_interrupted_and_continues_it(ui, qtbot, tmp_path: Path) -> None:
    data = ui.data_dir
    data.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "crash_child.py"), str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "TURBOSPARK_DATA_DIR": str(data)},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "streaming"
        # Watch the store from outside, like the next start will: wait for > 40 tokens saved.
        deadline = time.monotonic() + 30
        saved = ""
        while time.monotonic() < deadline:
            try:
                db = sqlite3.connect(str(data / STORE_FILENAME))
                row = db.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
                db.close()
            except sqlite3.Error:
                row = None
            saved = row[0] if row else ""
            if len(saved.split()) > 40:
                break
            time.sleep(0.05)
        assert len(saved.split()) > 40, saved
        os.kill(child.pid, signal.SIGKILL)  # mid-reply, no chance to save anything more
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL

    backend = FakeBackend(replies=(" and the rest.",))
    prompts: list[tuple[int, ...]] = []
    prepare = backend.prepare_turn
    backend.prepare_turn = lambda *a, **k: (lambda t: (prompts.append(t.prompt_ids), t)[1])(prepare(*a, **k))
    w = ui.window(backend)  # the next start
    pane = w.area.current_pane()
    user, reply = w.store.messages(pane.conversation_id)
    assert user.content == "tell me everything" and reply.stop_reason == INTERRUPTED
    words = reply.content.split()
    assert len(words) > 40 and words == [f"word{i}" for i in range(len(words))]
    assert len(reply.token_ids) == len(words)  # the ids saved with the text, in step
    plain = pane.transcript.document().toPlainText()
    assert "■ interrupted" in plain and reply.content.strip() in plain
    assert pane.continue_button.isEnabled()
    qtbot.mouseClick(pane.continue_button, qtbot_left())
    wait_idle(qtbot, pane)
    again = w.store.messages(pane.conversation_id)
    assert len(again) == 2 and again[-1].id == reply.id
    assert again[-1].content == reply.content + " and the rest." and again[-1].stop_reason == "end_of_turn"
    # The prompt left the reply open: it ends with the saved ids, no end-of-turn after them.
    (prompt,) = prompts
    assert prompt[-len(reply.token_ids):] == reply.token_ids
    assert len(again[-1].stats["runs"]) == 2 and again[-1].stats["runs"][0]["interrupted"]


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton

