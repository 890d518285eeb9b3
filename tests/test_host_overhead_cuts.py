"""What a decode step no longer pays on the host, and that each cut changes nothing else: a step's
logits row is lent to the loop's buffer (copied only when the context decodes something else
first), a lone stream's step runs without the scheduler's round yet a newcomer still joins it,
and the engine thread reads no psutil figure while readers still get live ones."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from test_llamacpp_producer import ctx, model  # noqa: F401 (fixtures: a tiny model, 4 sequences)
from tiny_gguf import write_tiny_gguf

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import GenerationConfig
from turbospark_app.model.llamacpp.context import LlamaCppContext
from turbospark_app.model.llamacpp.producer import LlamaCppProducer, produce_batch
from turbospark_app.service import EngineThread, Finished, Token, TurnRequest

PROMPT = [3, 14, 15, 92, 65, 35, 89, 79]


def _prefilled(ctx: LlamaCppContext, seq: int) -> LlamaCppProducer:
    p = LlamaCppProducer(ctx, seq)
    p.produce_chunk(PROMPT, 0, None)
    return p


def test_a_lent_row_is_the_copied_row_and_survives_another_decode(ctx: LlamaCppContext) -> None:
    a, b = _prefilled(ctx, 0), _prefilled(ctx, 1)
    copied = np.zeros(ctx.n_vocab, np.float32)
    a.produce(7, len(PROMPT), copied)
    a.trim(len(PROMPT))
    lent = np.zeros(ctx.n_vocab, np.float32)
    a.produce_lent(7, len(PROMPT), lent)
    assert not lent.any()  # nothing copied into the buffer...
    now = a.logits_now(lent)
    assert now is not lent and np.array_equal(now, copied)  # ...the row itself is read
    b.produce_chunk([5, 6, 7], len(PROMPT), None)  # another sequence decodes: the row is copied
    assert a.logits_now(lent) is lent and np.array_equal(lent, copied)


def test_the_next_step_of_the_same_buffer_copies_nothing(ctx: LlamaCppContext) -> None:
    a = _prefilled(ctx, 0)
    buf = np.zeros(ctx.n_vocab, np.float32)
    a.produce_lent(7, len(PROMPT), buf)
    first = a.logits_now(buf).copy()
    a.produce_lent(9, len(PROMPT) + 1, buf)  # the loop's next step refills the same buffer
    assert not buf.any()  # the first row was never copied into it
    assert not np.array_equal(a.logits_now(buf), first)


def test_batched_rows_are_lent_each_to_its_own_buffer(ctx: LlamaCppContext) -> None:
    ps = [_prefilled(ctx, s) for s in range(3)]
    copied = [np.zeros(ctx.n_vocab, np.float32) for _ in ps]
    produce_batch([(p, 4 + i, len(PROMPT), out) for i, (p, out) in enumerate(zip(ps, copied))])
    for p in ps:
        p.trim(len(PROMPT))
    lent = [np.zeros(ctx.n_vocab, np.float32) for _ in ps]
    produce_batch([(p, 4 + i, len(PROMPT), out) for i, (p, out) in enumerate(zip(ps, lent))], lend=True)
    assert not any(out.any() for out in lent)
    for p, out, want in zip(ps, lent, copied):
        assert np.array_equal(p.logits_now(out), want)
    ctx.close()  # a context closed under lent rows leaves their values in the buffers
    assert all(np.array_equal(out, want) for out, want in zip(lent, copied))


def _turn(cid: str, n: int) -> TurnRequest:
    return TurnRequest(cid, (ChatMessage("user", f"Count to ten, {cid}."),),
                       TurnSettings(generation=GenerationConfig(max_new_tokens=n)), raw=True)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("engine") / "tiny.gguf"
    write_tiny_gguf(path)
    b = load_backend(path, session_slots=2, threads=2, chat_template="chatml")
    yield b
    b.close()


class _Events:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: list = []

    def __call__(self, e) -> None:
        with self.cond:
            self.events.append(e)
            self.cond.notify_all()

    def wait(self, pred, timeout: float = 120) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self.events), timeout)


def _engine(backend, rec: _Events) -> EngineThread:
    from fakes import Shared

    eng = EngineThread(lambda: Shared(backend), rec, max_active=2)
    eng.start()
    return eng


def test_a_lone_stream_still_batches_with_a_newcomer_and_replies_as_alone(backend) -> None:
    alone_rec = _Events()
    eng = _engine(backend, alone_rec)
    try:
        rid = eng.submit(_turn("a", 24))
        alone_rec.wait(lambda evs: any(isinstance(e, Finished) and e.request_id == rid for e in evs))
        alone = next(e for e in alone_rec.events if isinstance(e, Finished)).generated_ids
        assert eng.batch.steps == 0 and eng.batch.last_size == 1
        eng.drop_session("a")  # (a fresh start for the same prompt: no reuse)
        a = eng.submit(_turn("a", 24))
        alone_rec.wait(lambda evs: sum(isinstance(e, Token) and e.request_id == a for e in evs) >= 2)
        b = eng.submit(_turn("b", 6))  # while `a` decodes alone: it joins a's steps
        alone_rec.wait(lambda evs: {a, b} <= {e.request_id for e in evs if isinstance(e, Finished)})
        done = {e.request_id: e for e in alone_rec.events if isinstance(e, Finished)}
        assert eng.batch.steps > 0  # the newcomer was not starved by a's lone steps
        assert done[a].generated_ids == alone  # greedy: the same reply alone and batched
    finally:
        assert eng.shutdown(30)


def test_the_engine_thread_reads_no_process_figure_and_readers_get_live_ones(backend, monkeypatch) -> None:
    import turbospark_app.readings.system_info as si

    threads: list[int] = []
    real = si._sampler.sample
    monkeypatch.setattr(si._sampler, "sample", lambda: threads.append(threading.get_ident()) or real())
    rec = _Events()
    eng = _engine(backend, rec)
    try:
        rid = eng.submit(_turn("c", 40))
        rec.wait(lambda evs: any(isinstance(e, Finished) and e.request_id == rid for e in evs))
        info = eng.system_info()  # this thread: the process and the backend's monitors, live
        assert threads and set(threads) == {threading.get_ident()}
        assert eng.engine_thread_ident not in threads
        assert info["process"]["rss_bytes"] > 0 and info["thermal"]["label"]
        assert info["model"]["host_overhead"]["1"]["steps"] > 0  # the engine's own figures
        assert info["sessions"] and info["last_turn"]["new_tokens"] > 0
    finally:
        assert eng.shutdown(30)
