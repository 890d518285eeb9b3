"""The engine thread without Qt: fair round-robin stepping, pacing, cancellation, isolation."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ui_fakes import FakeBackend, StepGate, failing_factory, fake_factory

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine.config import GenerationConfig, RateConfig
from turbospark_app.engine.progress import StopReason
from turbospark_app.service import (
    BackendFailed,
    BackendLoading,
    BackendReady,
    EngineThread,
    Failed,
    Finished,
    Prefilling,
    Queued,
    Started,
    Tail,
    Token,
    TurnRequest,
)

LONG_REPLY = " ".join(f"w{i}" for i in range(200))


class Recorder:
    """Collects events (with the thread each arrived on) and lets a test wait for them."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.threads: set[int] = set()
        self._cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self._cond:
            self.events.append(event)
            self.threads.add(threading.get_ident())
            self._cond.notify_all()

    def wait(self, pred: Callable[[list[Any]], bool], timeout: float = 5.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: pred(self.events), timeout)
        assert ok, f"timed out; events so far: {[type(e).__name__ for e in self.events]}"

    def of(self, rid: int) -> list[Any]:
        with self._cond:
            return [e for e in self.events if getattr(e, "request_id", None) == rid]

    def terminal(self, rid: int) -> Any:
        self.wait(lambda evs: any(isinstance(e, (Finished, Failed)) and e.request_id == rid
                                  for e in evs))
        return next(e for e in self.of(rid) if isinstance(e, (Finished, Failed)))

    def tokens(self, rid: int) -> list[Token]:
        return [e for e in self.of(rid) if isinstance(e, Token)]


def request(cid: str, text: str = "hi", **gen: Any) -> TurnRequest:
    settings = TurnSettings(generation=GenerationConfig(**gen))
    return TurnRequest(cid, (ChatMessage("user", text),), settings)


@pytest.fixture
def make_engine():
    """Build EngineThreads that are always shut down (gates opened first)."""
    made: list[tuple[EngineThread, FakeBackend | None]] = []

    def make(backend: FakeBackend | None = None, *, factory=None, **kw: Any):
        rec = Recorder()
        eng = EngineThread(factory or fake_factory(backend), rec, **kw)
        made.append((eng, backend))
        eng.start()
        return eng, rec

    yield make
    for eng, backend in made:
        if backend is not None and backend.gate is not None:
            backend.gate.open()
        assert eng.shutdown(timeout=5.0)


def test_one_turn_streams_and_finishes_on_the_engine_thread(make_engine) -> None:
    backend = FakeBackend(replies=("Hello there, **world**.",), chunk_size=4, tail="!")
    eng, rec = make_engine(backend)
    rid = eng.submit(request("c1", "say hello"))
    fin = rec.terminal(rid)
    assert isinstance(fin, Finished)
    kinds = [type(e) for e in rec.of(rid)]
    assert kinds[0] is Queued and kinds[1] is Started and kinds[-1] is Finished
    assert kinds.index(Prefilling) < kinds.index(Token) < kinds.index(Tail)
    assert fin.text == "Hello there, **world**.!"
    assert fin.result.reason is StopReason.END_OF_TURN
    assert list(fin.generated_ids) == [t.id for t in rec.tokens(rid)]
    assert fin.stats.new_tokens == len(rec.tokens(rid)) == 3
    assert fin.stats.prompt_tokens == len(fin.prompt_ids) > 0
    assert fin.stats.time_to_first_token is not None and fin.stats.stop_latency is None
    prefill = [e for e in rec.of(rid) if isinstance(e, Prefilling)]
    assert prefill[-1].done == prefill[-1].total == len(fin.prompt_ids)
    assert {e.reused for e in prefill} == {fin.stats.reused_prefix_tokens}
    # Every event came from the engine thread, and only it touched the backend.
    assert rec.threads == {eng.engine_thread_ident}
    assert {tid for _, tid in backend.calls} == {eng.engine_thread_ident}
    assert isinstance(rec.events[0], BackendLoading) and isinstance(rec.events[1], BackendReady)


def test_two_turns_are_stepped_round_robin(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,), chunk_size=8, load_delay=0.2)
    eng, rec = make_engine(backend)
    a = eng.submit(request("a", "x" * 40, max_new_tokens=30))  # both wait for the load,
    b = eng.submit(request("b", "y" * 40, max_new_tokens=30))  # so both start together
    rec.terminal(a), rec.terminal(b)
    steps = [e.request_id for e in rec.events if isinstance(e, (Prefilling, Token))]
    # Same length prompts and budgets: strict alternation, one step each in turn.
    assert steps == [a, b] * (len(steps) // 2)
    assert len(steps) >= 2 * 30


def test_a_paced_turn_does_not_hold_up_the_other(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,))
    eng, rec = make_engine(backend)
    rec.wait(lambda evs: any(isinstance(e, BackendReady) for e in evs))
    slow = eng.submit(request("slow", max_new_tokens=50, rate=RateConfig(max_tokens_per_sec=2.0)))
    rec.wait(lambda evs: len(rec.tokens(slow)) >= 1)
    t0 = time.monotonic()
    fast = eng.submit(request("fast", max_new_tokens=40))
    fin = rec.terminal(fast)
    assert isinstance(fin, Finished) and fin.stats.new_tokens == 40
    assert time.monotonic() - t0 < 0.45  # never waited for the paced turn's next slot
    assert len(rec.tokens(slow)) <= 2  # the slow one kept its pace meanwhile
    eng.cancel(slow)
    assert rec.terminal(slow).result.reason is StopReason.CANCELLED


def test_cancel_mid_decode_ends_within_one_forward_step(make_engine) -> None:
    gate = StepGate()
    backend = FakeBackend(replies=(LONG_REPLY,), gate=gate, chunk_size=64)
    eng, rec = make_engine(backend)
    rid = eng.submit(request("c", "hi"))
    gate.allow(4)  # prefill (1 step) + 3 tokens
    rec.wait(lambda evs: len(rec.tokens(rid)) == 3)
    assert gate.wait_blocked()  # the engine is inside the next forward step
    passed = gate.passed
    eng.cancel(rid)
    gate.open()
    fin = rec.terminal(rid)
    assert fin.result.reason is StopReason.CANCELLED
    assert gate.passed - passed <= 1  # only the step already in flight ran
    assert len(rec.tokens(rid)) <= 4 and fin.text == "".join(t.delta for t in rec.tokens(rid))
    assert fin.stats.stop_latency is not None and 0 <= fin.stats.stop_latency < 1.0


def test_cancel_mid_prefill_ends_within_one_step(make_engine) -> None:
    gate = StepGate()
    backend = FakeBackend(chunk_size=8, gate=gate)
    eng, rec = make_engine(backend)
    rid = eng.submit(request("c", "p" * 400))
    gate.allow(2)
    rec.wait(lambda evs: sum(isinstance(e, Prefilling) and e.request_id == rid for e in evs) == 2)
    assert gate.wait_blocked()
    passed = gate.passed
    eng.cancel(rid)
    gate.open()
    fin = rec.terminal(rid)
    assert fin.result.reason is StopReason.CANCELLED and fin.result.new_tokens == 0
    assert gate.passed - passed <= 1
    assert not rec.tokens(rid) and fin.stats.started
    assert fin.stats.stop_latency is not None and fin.stats.decode_tokens_per_sec == 0.0


def test_cancel_wakes_a_parked_turn_at_once(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,))
    eng, rec = make_engine(backend)
    rid = eng.submit(request("c", rate=RateConfig(max_tokens_per_sec=0.2)))  # 5 s per token
    rec.wait(lambda evs: len(rec.tokens(rid)) == 1)
    time.sleep(0.05)  # parked on its PaceWait now
    t0 = time.monotonic()
    eng.cancel(rid)
    fin = rec.terminal(rid)
    assert time.monotonic() - t0 < 0.5
    assert fin.result.reason is StopReason.CANCELLED and len(rec.tokens(rid)) == 1
    assert fin.stats.stop_latency < 0.5


def test_cancel_of_a_queued_turn_never_touches_the_model(make_engine) -> None:
    gate = StepGate()
    backend = FakeBackend(gate=gate)
    eng, rec = make_engine(backend, max_active=1)
    a = eng.submit(request("a"))
    assert gate.wait_blocked()
    b = eng.submit(request("b"))
    gate.allow(1)  # events come from the engine thread: b is announced after this step
    rec.wait(lambda evs: any(isinstance(e, Queued) and e.request_id == b for e in evs))
    assert gate.wait_blocked()
    assert [e.position for e in rec.of(b) if isinstance(e, Queued)] == [0]
    assert eng.cancel(b)
    gate.allow(1)  # it ends as soon as the step in flight is done, a's turn goes on
    fin = rec.terminal(b)
    assert isinstance(fin, Finished) and fin.result.reason is StopReason.CANCELLED
    assert not fin.stats.started and fin.result.new_tokens == 0 and fin.stats.stop_latency < 1
    assert [name for name, _ in backend.calls].count("prepare_turn") == 1  # only a's
    assert not any(isinstance(e, Finished) for e in rec.of(a))
    gate.open()
    assert rec.terminal(a).result.reason is StopReason.END_OF_TURN
    assert not eng.cancel(a)  # over: unknown now


def test_max_active_queues_fifo(make_engine) -> None:
    backend = FakeBackend()
    eng, rec = make_engine(backend, max_active=1)
    ids = [eng.submit(request(f"c{i}")) for i in range(3)]
    for rid in ids:
        rec.terminal(rid)
    started = [e.request_id for e in rec.events if isinstance(e, Started)]
    assert started == ids
    # One active at a time: each finished before the next started.
    order = [(type(e).__name__, e.request_id) for e in rec.events if isinstance(e, (Started, Finished))]
    assert order == [(k, r) for r in ids for k in ("Started", "Finished")]


def test_a_failing_turn_does_not_kill_the_thread(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,), fail_on_step=3, fail_session="bad", chunk_size=64)
    eng, rec = make_engine(backend)
    bad = eng.submit(request("bad", max_new_tokens=10))
    good = eng.submit(request("good", max_new_tokens=10))
    failed = rec.terminal(bad)
    assert isinstance(failed, Failed)
    assert (failed.kind, failed.error_type) == ("model_failure", "ProducerError")
    assert "simulated model failure" in failed.message
    assert isinstance(rec.terminal(good), Finished)
    later = eng.submit(request("later", max_new_tokens=5))
    assert isinstance(rec.terminal(later), Finished) and eng.is_alive()


def test_a_non_engine_exception_is_isolated_too(make_engine) -> None:
    backend = FakeBackend()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("template bug")

    backend.prepare_turn = broken  # type: ignore[method-assign]
    eng, rec = make_engine(backend)
    fail = rec.terminal(eng.submit(request("c")))
    assert (fail.kind, fail.error_type) == ("internal", "KeyError") and eng.is_alive()


def test_context_overflow_fails_before_touching_the_model(make_engine) -> None:
    backend = FakeBackend(max_context=64)
    eng, rec = make_engine(backend)
    fail = rec.terminal(eng.submit(request("c", "z" * 100)))
    assert isinstance(fail, Failed)
    assert (fail.kind, fail.error_type) == ("context_overflow", "ContextOverflow")
    assert "stream_turn" not in [name for name, _ in backend.calls]


def test_load_failure_is_an_event_and_requests_fail_cleanly(make_engine) -> None:
    eng, rec = make_engine(factory=failing_factory("model.gguf: no such file"))
    rec.wait(lambda evs: any(isinstance(e, BackendFailed) for e in evs))
    failed = next(e for e in rec.events if isinstance(e, BackendFailed))
    assert failed.error_type == "FileNotFoundError" and "no such file" in failed.message
    fail = rec.terminal(eng.submit(request("c")))
    assert fail.kind == "backend_unavailable" and "no such file" in fail.message
    assert eng.is_alive() and eng.state == "failed"
    assert eng.system_info()["engine"]["error"]


def test_shutdown_cancels_and_drains_active_turns(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,), step_delay=0.01)
    eng, rec = make_engine(backend, max_active=1)
    a = eng.submit(request("a"))
    b = eng.submit(request("b"))
    rec.wait(lambda evs: len(rec.tokens(a)) >= 2)
    assert eng.shutdown(timeout=5.0)
    fa, fb = rec.terminal(a), rec.terminal(b)
    assert fa.result.reason is StopReason.CANCELLED and fa.text  # partial kept for saving
    assert fb.result.reason is StopReason.CANCELLED and not fb.stats.started
    with pytest.raises(RuntimeError):
        eng.submit(request("c"))


def test_system_info_never_waits_behind_a_forward_step(make_engine) -> None:
    gate = StepGate()
    backend = FakeBackend(gate=gate)
    eng, rec = make_engine(backend)
    eng.submit(request("c"))
    assert gate.wait_blocked()  # the engine thread is stuck inside a forward step
    t0 = time.monotonic()
    info = eng.system_info()
    assert time.monotonic() - t0 < 0.5
    assert info["process"]["rss_bytes"] > 10 * 2**20  # live reading, this process
    assert info["thermal"]["label"] == "nominal"  # from the backend's snapshot
    assert info["engine"] == {**info["engine"], "state": "ready", "active_turns": 1}


def test_a_broken_listener_does_not_kill_the_thread(make_engine) -> None:
    calls: list[Any] = []

    def listener(event: Any) -> None:
        calls.append(event)
        if isinstance(event, Token):
            raise RuntimeError("listener bug")

    backend = FakeBackend()
    eng = EngineThread(fake_factory(backend), listener)
    eng.start()
    try:
        eng.submit(request("c"))
        deadline = time.monotonic() + 5
        while not any(isinstance(e, Finished) for e in calls) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(isinstance(e, Finished) for e in calls) and eng.is_alive()
    finally:
        assert eng.shutdown()


def test_drop_session_waits_for_the_turn_and_runs_on_the_engine_thread(make_engine) -> None:
    backend = FakeBackend(replies=(LONG_REPLY,), step_delay=0.005)
    eng, rec = make_engine(backend)
    rid = eng.submit(request("gone"))
    rec.wait(lambda evs: len(rec.tokens(rid)) >= 1)
    eng.drop_session("gone")
    assert rec.terminal(rid).result.reason is StopReason.CANCELLED
    deadline = time.monotonic() + 5
    while "gone" not in backend.dropped and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.dropped == ["gone"] and "gone" not in backend.kv
    drops = [tid for name, tid in backend.calls if name == "drop_session"]
    assert drops == [eng.engine_thread_ident]
    # The stream was finished before the slot was dropped.
    names = [name for name, _ in backend.calls]
    assert names.index("drop_session") > names.index("step")


def test_second_turn_reuses_the_first_turns_kv(make_engine) -> None:
    backend = FakeBackend(replies=("one two", "three"))
    eng, rec = make_engine(backend)
    first = rec.terminal(eng.submit(request("c", "hello")))
    messages = (
        ChatMessage("user", "hello"),
        ChatMessage("assistant", first.text, first.generated_ids),
        ChatMessage("user", "again"),
    )
    second = rec.terminal(eng.submit(TurnRequest("c", messages, TurnSettings())))
    assert second.stats.reused_prefix_tokens == len(first.prompt_ids) + len(first.generated_ids)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=st.lists(
        st.tuples(st.integers(1, 12), st.booleans(), st.floats(0, 0.01)), min_size=1, max_size=6
    ),
    max_active=st.integers(1, 3),
)
def test_every_request_ends_exactly_once_in_order(plan, max_active) -> None:
    """Random submits and cancels: each request gets Queued first and one terminal event last."""
    backend = FakeBackend(replies=(LONG_REPLY,), chunk_size=8)
    rec = Recorder()
    eng = EngineThread(fake_factory(backend), rec, max_active=max_active)
    eng.start()
    try:
        ids = []
        for max_new, cancel, pause in plan:
            ids.append(eng.submit(request(f"c{len(ids)}", "q" * 20, max_new_tokens=max_new)))
            time.sleep(pause)
            if cancel:
                eng.cancel(ids[-1])
        for rid in ids:
            rec.terminal(rid)
        for rid, (max_new, cancel, _) in zip(ids, plan):
            evs = rec.of(rid)
            assert isinstance(evs[0], Queued)
            assert sum(isinstance(e, (Finished, Failed)) for e in evs) == 1
            assert isinstance(evs[-1], Finished)
            assert len(rec.tokens(rid)) <= max_new
            if not cancel:
                assert evs[-1].result.reason is StopReason.MAX_TOKENS
        active = 0
        peak = 0
        for e in rec.events:
            active += isinstance(e, Started) - (isinstance(e, Finished) and e.stats.started)
            peak = max(peak, active)
        assert peak <= max_active
    finally:
        assert eng.shutdown()


class _FixedSource:
    """A platform source that always reads one level."""

    def __init__(self, name: str, level: Any) -> None:
        self.name = name
        self.level = level

    def read(self) -> tuple[Any, str]:
        return self.level, "fixed for the test"


def test_system_info_reads_the_monitors_live_while_a_step_blocks(make_engine) -> None:
    from turbospark_app.engine.power import MemoryPressure, ThermalLevel
    from turbospark_app.readings import MemoryMonitor, ThermalMonitor

    thermal = ThermalMonitor(_FixedSource("test thermal", ThermalLevel.NOMINAL))
    memory = MemoryMonitor(_FixedSource("test memory", None))
    gate = StepGate()
    backend = FakeBackend(gate=gate)
    eng, rec = make_engine(backend, monitors=(thermal, memory))
    eng.submit(request("c"))
    assert gate.wait_blocked()  # the engine thread is inside a forward step
    info = eng.system_info()
    assert info["thermal"]["label"] == "nominal" and info["memory_pressure"]["label"] == "unavailable"
    assert info["model"] == {"name": "fake-model"}  # from the engine thread's snapshot
    thermal.set_simulated(ThermalLevel.SERIOUS)  # what a QA control does, on the GUI thread
    memory.set_simulated(MemoryPressure.WARNING)
    info = eng.system_info()  # still inside the same step: the levels are live anyway
    assert gate.passed == 0
    assert info["thermal"]["label"] == "serious (simulated)"
    assert info["memory_pressure"]["label"] == "warning (simulated)"
    assert info["process"]["rss_bytes"] > 0 and info["engine"]["active_turns"] == 1


def test_replace_backend_stops_every_turn_then_loads_the_new_model(make_engine) -> None:
    old = FakeBackend(replies=(LONG_REPLY,), step_delay=0.005)
    new = FakeBackend(replies=("from the new model",))
    new.model_info = lambda: {"name": "new-model"}  # type: ignore[method-assign]
    eng, rec = make_engine(old, max_active=1)
    running = eng.submit(request("a"))
    queued = eng.submit(request("b"))
    rec.wait(lambda evs: len(rec.tokens(running)) >= 2)
    eng.replace_backend(fake_factory(new))
    later = eng.submit(request("c"))  # submitted during the switch: waits for the new model
    assert rec.terminal(running).result.reason is StopReason.CANCELLED
    assert rec.terminal(queued).result.reason is StopReason.CANCELLED
    done = rec.terminal(later)
    assert isinstance(done, Finished) and done.text == "from the new model"
    readies = [e for e in rec.events if isinstance(e, BackendReady)]
    assert [r.model_info["name"] for r in readies] == ["fake-model", "new-model"]
    # The old model served nothing after the switch was asked for; the new one only "c".
    assert [n for n, _ in new.calls if n == "prepare_turn"] == ["prepare_turn"]
    assert eng.system_info()["engine"]["state"] == "ready"


def test_a_failed_switch_is_reported_and_turns_fail_cleanly(make_engine) -> None:
    eng, rec = make_engine(FakeBackend())
    rec.wait(lambda evs: any(isinstance(e, BackendReady) for e in evs))
    eng.replace_backend(failing_factory("broken.gguf: not a GGUF file"))
    rec.wait(lambda evs: any(isinstance(e, BackendFailed) for e in evs))
    fail = rec.terminal(eng.submit(request("c")))
    assert fail.kind == "backend_unavailable" and "not a GGUF" in fail.message
    eng.replace_backend(fake_factory(FakeBackend(replies=("back",))))  # and recovers
    assert rec.terminal(eng.submit(request("d"))).text == "back"
