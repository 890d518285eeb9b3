"""A controllable ChatBackend for engine-thread and UI tests (no model, no Qt).

`FakeBackend` implements the `ChatBackend` protocol with its own small step generator that
behaves like the engine's: prefill in chunks (PrefillProgress), one TokenProgress per forward
step, PaceWait when a rate cap is set, the cancel predicate polled before every forward step,
and a RawDecodeResult returned through StopIteration. Speed is controllable:

* `step_delay` sleeps in every forward step (wall-time pacing for UI tests);
* `gate` (a `StepGate`) blocks every forward step until the test releases it, for exact
  "ends within one step" assertions.

Every backend call records the calling thread, so tests can assert that only the engine
thread touched the model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from turbospark_app.chat.api import ChatMessage, PreparedTurn, TurnSettings
from turbospark_app.engine.errors import ContextOverflow, EmptyPrompt, ProducerError
from turbospark_app.engine.power import MemoryPressure
from turbospark_app.engine.progress import (
    PaceWait,
    PrefillProgress,
    RawDecodeResult,
    StopReason,
    TailProgress,
    TokenProgress,
)


class StepGate:
    """Blocks each forward step until the test grants one. `waiting` counts blocked steps."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._permits = 0
        self.waiting = 0
        self.passed = 0

    def allow(self, n: int = 1) -> None:
        """Let `n` more forward steps run."""
        with self._cond:
            self._permits += n
            self._cond.notify_all()

    def open(self) -> None:
        """Let every future step run (tear-down)."""
        self.allow(10**9)

    def wait_blocked(self, timeout: float = 5.0) -> bool:
        """Wait until a step is blocked at the gate."""
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting > 0, timeout)

    def pass_step(self) -> None:
        with self._cond:
            self.waiting += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._permits > 0)
            self._permits -= 1
            self.waiting -= 1
            self.passed += 1


def reply_pieces(text: str) -> list[str]:
    """Split a reply into token-like pieces: words with their leading space, newlines alone."""
    pieces: list[str] = []
    word = ""
    for ch in text:
        if ch == "\n" or (ch == " " and word.strip()):
            if word:
                pieces.append(word)
            word = "" if ch == "\n" else ch
            if ch == "\n":
                pieces.append("\n")
        else:
            word += ch
    if word:
        pieces.append(word)
    return pieces


@dataclass
class FakeBackend:
    """See the module docstring. `replies` are used in turn order (the last one repeats)."""

    replies: Sequence[str] = ("Hello! I am a **fake** model.",)
    max_context: int = 4096
    chunk_size: int = 16  # prompt tokens (bytes) per prefill step
    step_delay: float = 0.0
    gate: StepGate | None = None
    fail_on_step: int | None = None  # raise ProducerError in this forward step ...
    fail_session: str | None = None  # ... of this session's turns (None: every session)
    tail: str = ""  # released as TailProgress at the end of a run
    load_delay: float = 0.0
    calls: list[tuple[str, int]] = field(default_factory=list)
    kv: dict[str, list[int]] = field(default_factory=dict)
    turns_started: int = 0
    last_outcome: str = "miss"
    dropped: list[str] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic

    def _record(self, name: str) -> None:
        self.calls.append((name, threading.get_ident()))

    def prepare_turn(
        self, session_id: str, messages: Sequence[ChatMessage], settings: TurnSettings,
        *, continue_final: bool = False,
    ) -> PreparedTurn:
        """Bytes of a plain rendering are the prompt ids; assistant ids are spliced in (a
        reply to continue is left open: no generation prompt after it)."""
        self._record("prepare_turn")
        ids: list[int] = []
        for m in messages:
            ids.extend(f"<{m.role}>".encode())
            if m.role == "assistant" and m.token_ids is not None:
                ids.extend(m.token_ids)
            else:
                ids.extend(m.content.encode())
        if not continue_final:
            ids.extend(b"<assistant>")
        if not messages or not messages[-1].content.strip():
            raise EmptyPrompt()
        max_new = settings.generation.max_new_tokens
        if len(ids) + max_new > self.max_context:
            raise ContextOverflow(len(ids), max_new, self.max_context)
        return PreparedTurn(session_id, tuple(ids), settings)

    def _forward(self, session_id: str, step: int) -> None:
        if self.gate is not None:
            self.gate.pass_step()
        if self.step_delay:
            time.sleep(self.step_delay)
        if (
            self.fail_on_step is not None
            and step == self.fail_on_step
            and self.fail_session in (None, session_id)
        ):
            raise ProducerError(RuntimeError("simulated model failure"))

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]):
        """The step generator (see the module docstring)."""
        self._record("stream_turn")
        reply = self.replies[min(self.turns_started, len(self.replies) - 1)]
        self.turns_started += 1
        return self._run(turn, cancel, reply_pieces(reply))

    def _run(self, turn: PreparedTurn, cancel: Callable[[], bool], pieces: list[str]):
        self._record("step")
        prompt = list(turn.prompt_ids)
        held = self.kv.get(turn.session_id)
        reused = 0
        if held is not None:
            while reused < min(len(held), len(prompt)) and held[reused] == prompt[reused]:
                reused += 1
            reused = min(reused, len(prompt) - 1)
            self.last_outcome = "hit"
        else:
            self.last_outcome = "miss"
        kv = prompt[:reused]
        self.kv[turn.session_id] = kv
        gen = turn.settings.generation
        step = 0
        t0 = self.clock()
        reason: StopReason | None = None
        while len(kv) < len(prompt):
            if cancel():
                reason = StopReason.CANCELLED
                break
            self._forward(turn.session_id, step)
            step += 1
            kv.extend(prompt[len(kv):len(kv) + self.chunk_size])
            yield PrefillProgress(len(kv), len(prompt), reused, self.clock() - t0)
        prefill_seconds = self.clock() - t0
        t1 = self.clock()
        new = 0
        ids: list[int] = []
        cap = gen.rate.max_tokens_per_sec
        next_at = t1
        if reason is None:
            for index, piece in enumerate(pieces):
                if index >= gen.max_new_tokens:
                    reason = StopReason.MAX_TOKENS
                    break
                if cap:
                    if self.clock() < next_at:
                        yield PaceWait(next_at)
                    next_at = max(next_at, self.clock()) + 1.0 / cap
                if cancel():
                    reason = StopReason.CANCELLED
                    break
                self._forward(turn.session_id, step)
                step += 1
                token_id = 1000 + index
                ids.append(token_id)
                kv.append(token_id)
                new += 1
                yield TokenProgress(index, token_id, piece)
            else:
                reason = StopReason.END_OF_TURN
        if self.tail:
            yield TailProgress(self.tail)
        assert reason is not None
        return RawDecodeResult(
            prompt_tokens=len(prompt),
            new_tokens=new,
            prefill_seconds=prefill_seconds,
            decode_seconds=(self.clock() - t1) if new else 0.0,
            reason=reason,
            kv_position=len(kv),
            kv_backed_token_ids=list(kv),
            reused_prefix_tokens=reused,
            session_slot_evicted=False,
            peak_memory_pressure=MemoryPressure.NORMAL,
        )

    def drop_session(self, session_id: str) -> None:
        """Forget the session's KV."""
        self._record("drop_session")
        self.kv.pop(session_id, None)
        self.dropped.append(session_id)

    def system_info(self) -> dict[str, Any]:
        """A document shaped like readings.system_info's."""
        self._record("system_info")
        return {
            "process": {"rss_bytes": 123 * 2**20, "cpu_percent": 0.0},
            "system": {"available_memory_bytes": 8 * 2**30},
            "thermal": {"level": "nominal", "label": "nominal", "source": "fake",
                        "simulated": False, "available": True},
            "memory_pressure": {"level": None, "label": "unavailable", "source": "fake",
                                "simulated": False, "available": False},
            "model": {"name": "fake-model"},
            "sessions": [
                {"slot": i, "session_id": sid, "kv_bytes": len(kv) * 64, "lru_rank": i}
                for i, (sid, kv) in enumerate(self.kv.items())
            ],
            "last_turn": {"slot_outcome": self.last_outcome, "turns": self.turns_started},
        }

    def model_info(self) -> dict[str, Any]:
        """Static model facts."""
        self._record("model_info")
        return {"name": "fake-model", "architecture": "fake", "context_length": self.max_context}


def fake_factory(backend: FakeBackend) -> Callable[[], FakeBackend]:
    """A backend factory for EngineThread that honours `backend.load_delay`."""

    def make() -> FakeBackend:
        backend._record("load")
        delay = getattr(backend, "load_delay", 0.0)
        if delay:
            time.sleep(delay)
        return backend

    return make


def failing_factory(message: str = "no such model file") -> Callable[[], Any]:
    """A backend factory whose load fails."""

    def make() -> Any:
        raise FileNotFoundError(message)

    return make


# ---------------------------------------------------------------------------------------------
# The same protocol over the REAL engine step loop (stream_raw_completion_chunked) with the
# engine helper's ScriptedProducer + ByteTokenizer, and the real prompt builder.
# ---------------------------------------------------------------------------------------------


class ChatMLTemplate:
    """A tiny ChatML renderer (what SmolLM2's template produces)."""

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class EngineLoopBackend:
    """ChatBackend whose turns run the engine's chunked step loop over a ScriptedProducer per
    session (true prefix reuse), spelling `replies` byte by byte. `step_delay` / `gate` slow
    every producer call down like FakeBackend's. `chat_template=False`: a base model (raw
    completion only); `raw=True` turns build the backend's raw prompt (texts, no roles)."""

    def __init__(
        self,
        replies: Sequence[str] = ("Hi from the *engine* loop.",),
        *,
        max_context: int = 2048,
        chunk_size: int = 16,
        step_delay: float = 0.0,
        gate: StepGate | None = None,
        chat_template: bool = True,
    ) -> None:
        from fakes import ByteTokenizer

        self.replies = list(replies)
        self.max_context = max_context
        self.chunk_size = chunk_size
        self.step_delay = step_delay
        self.gate = gate
        self.tokenizer = ByteTokenizer()
        self.template = ChatMLTemplate() if chat_template else None
        self.producers: dict[str, Any] = {}
        self.turns = 0
        self.calls: list[tuple[str, int]] = []

    def _record(self, name: str) -> None:
        self.calls.append((name, threading.get_ident()))

    def _producer(self, session_id: str) -> Any:
        from fakes import ScriptedProducer

        backend = self

        class Slowed(ScriptedProducer):
            def _feed(self, tokens: Sequence[int], position: int) -> None:
                backend._record("forward")
                if backend.gate is not None:
                    backend.gate.pass_step()
                if backend.step_delay:
                    time.sleep(backend.step_delay)
                super()._feed(tokens, position)

        if session_id not in self.producers:
            self.producers[session_id] = Slowed(self.tokenizer.VOCAB_SIZE, reuse=None, poison_prefill=False)
        return self.producers[session_id]

    def prepare_turn(self, session_id: str, messages: Sequence[ChatMessage], settings: TurnSettings,
                     *, continue_final: bool = False, raw: bool = False) -> PreparedTurn:
        from turbospark_app.chat.prompt import build_prompt_ids, raw_prompt_ids
        from turbospark_app.engine.raw_completion import check_admission

        self._record("prepare_turn")
        if raw or self.template is None:
            ids = raw_prompt_ids(self.tokenizer, messages, continue_final=continue_final)
        else:
            ids = build_prompt_ids(self.template, self.tokenizer, messages, settings.system_prompt,
                                   continue_final=continue_final)
        check_admission(ids, settings.generation, self.max_context)
        return PreparedTurn(session_id, tuple(ids), settings)

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]):
        from turbospark_app.engine import stream_raw_completion_chunked

        self._record("stream_turn")
        reply = self.replies[min(self.turns, len(self.replies) - 1)]
        self.turns += 1
        producer = self._producer(turn.session_id)
        n = len(turn.prompt_ids)
        spelled = list(reply.encode("utf-8")) + [self.tokenizer.END_OF_TURN]
        producer.script = {n - 1 + i: tok for i, tok in enumerate(spelled)}
        return stream_raw_completion_chunked(
            producer, self.tokenizer, turn.prompt_ids, turn.settings.generation, self.max_context,
            self.tokenizer.VOCAB_SIZE, cancel, chunk_size=self.chunk_size,
        )

    def drop_session(self, session_id: str) -> None:
        self._record("drop_session")
        self.producers.pop(session_id, None)

    def system_info(self) -> dict[str, Any]:
        self._record("system_info")
        return {
            "thermal": {"level": "fair", "label": "fair (simulated)", "source": "simulated",
                        "simulated": True, "available": True},
            "memory_pressure": {"level": "normal", "label": "normal", "source": "fake",
                                "simulated": False, "available": True},
            "sessions": [{"slot": i, "session_id": s, "kv_bytes": len(p.kv)} for i, (s, p) in
                         enumerate(self.producers.items())],
        }

    def model_info(self) -> dict[str, Any]:
        self._record("model_info")
        return {"name": "scripted-bytes", "file": "scripted.gguf", "context_length": self.max_context,
                "has_chat_template": self.template is not None}


# ---------------------------------------------------------------------------------------------
# A harness for window tests: isolated data folder + QSettings, windows closed at the end.
# ---------------------------------------------------------------------------------------------


class UiHarness:
    """Builds MainWindows over one tmp data folder (store + settings.ini), so a second window
    is a "restart" of the first. Opens every gate and closes every window at tear-down."""

    def __init__(self, qtbot: Any, data_dir: Any) -> None:
        self.qtbot = qtbot
        self.data_dir = data_dir
        self.windows: list[Any] = []
        self.gates: list[StepGate] = []

    @property
    def store_path(self) -> Any:
        from turbospark_app.conversations.store import STORE_FILENAME

        return self.data_dir / STORE_FILENAME

    def settings(self) -> Any:
        from PySide6.QtCore import QSettings

        return QSettings(str(self.data_dir / "settings.ini"), QSettings.Format.IniFormat)

    def window(self, backend: Any = None, *, factory: Any = None, slots: int = 4, ready: bool = True) -> Any:
        """A shown MainWindow over `backend` (waits for the backend unless ready=False)."""
        from turbospark_app.ui.app import build_window

        if backend is not None and getattr(backend, "gate", None) is not None:
            self.gates.append(backend.gate)
        w = build_window(factory or fake_factory(backend), session_slots=slots,
                         store_path=self.store_path, settings=self.settings())
        self.qtbot.addWidget(w)
        w.show()
        self.windows.append(w)
        if ready:
            self.qtbot.waitUntil(lambda: w.bridge.backend_state in ("ready", "failed"), timeout=5000)
        return w

    def close(self, window: Any) -> None:
        """Close a window the way the user does (saves layout, stops turns, closes the store)."""
        for gate in self.gates:
            gate.open()
        window.close()

    def teardown(self) -> None:
        for gate in self.gates:
            gate.open()
        from shiboken6 import isValid

        for w in self.windows:
            if isValid(w):  # (a test that ran the qasync loop may have let Qt delete it)
                w.close()


def send(qtbot: Any, pane: Any, text: str) -> None:
    """Type `text` into the pane's input and press Enter."""
    from PySide6.QtCore import Qt

    pane.input.setFocus()
    pane.input.setPlainText(text)
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)


def wait_idle(qtbot: Any, pane: Any, timeout: int = 10000) -> None:
    """Wait for the pane's turn to end."""
    qtbot.waitUntil(lambda: not pane.busy, timeout=timeout)
