"""Batched decode in the engine thread on the real default model: streams decoding at once
share ONE forward pass per step (batching.py), and each stream's reply is token for token what
it is alone; Stop, caps and prefill interleaving while batched."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fakes import Shared

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import GenerationConfig, StopReason
from turbospark_app.engine.progress import DecodeStep, PrefillStep
from turbospark_app.service.engine_thread import EngineThread
from turbospark_app.service.events import Failed, Finished, Prefilling, Token, TurnRequest

QUESTIONS = ["Name three colours.", "What is the capital of France?", "Count from one to ten.",
             "Write a haiku about rain."]


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_done(self, rids: list[int], timeout: float = 120.0) -> dict[int, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                done = {e.request_id: e for e in self.events if isinstance(e, (Finished, Failed))}
                if all(r in done for r in rids):
                    return done
                left = deadline - time.monotonic()
                assert left > 0, f"turns {rids} did not end"
                self.cond.wait(left)


def turn(cid: str, text: str, tokens: int = 24) -> TurnRequest:
    config = GenerationConfig(max_new_tokens=tokens)  # temperature 0 by default: greedy
    return TurnRequest(cid, (ChatMessage("user", text),), TurnSettings(generation=config))


@pytest.fixture(scope="module")
def backend(default_model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    return load_backend(default_model_path, session_slots=4)


def _run(backend: Any, requests: list[TurnRequest], max_active: int = 4) -> tuple[dict[int, Any], EngineThread]:
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=max_active)
    engine.start()
    try:
        rids = [engine.submit(r) for r in requests]
        done = rec.wait_done(rids)
        return {i: done[r] for i, r in enumerate(rids)}, engine
    finally:
        assert engine.shutdown(timeout=10)


def test_streams_decoding_at_once_are_batched_and_reply_as_alone(backend) -> None:
    alone = []
    for i, q in enumerate(QUESTIONS):  # one at a time: never batched
        done, engine = _run(backend, [turn(f"alone-{i}", q)], max_active=1)
        assert engine.batch.steps == 0
        alone.append(done[0].generated_ids)
        assert len(alone[-1]) > 5
    done, engine = _run(backend, [turn(f"together-{i}", q) for i, q in enumerate(QUESTIONS)])
    assert [done[i].generated_ids for i in range(4)] == alone
    figures = engine.batch.describe()
    assert figures["batched_steps"] > 10 and max(figures["batch_sizes"]) == 4
    assert engine.system_info()["engine"]["batched_steps"] == figures["batched_steps"]
    # The batched steps were timed for the chunk budget (a slow step leaves a prompt smaller chunks).
    assert 0 < backend.chunk_budget.step_seconds < 5


def test_stop_and_caps_per_stream_while_batched(backend) -> None:
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    engine.start()
    try:
        long = [engine.submit(turn(f"long-{i}", "Tell me a long story about a dragon.", 300)) for i in range(2)]
        short = engine.submit(turn("short", "Count from one to ten.", 5))
        with rec.cond:  # wait until the long ones are decoding side by side
            rec.cond.wait_for(lambda: sum(isinstance(e, Token) and e.request_id == long[0]
                                          for e in rec.events) >= 8, timeout=60)
        engine.cancel(long[0])
        done = rec.wait_done([long[0], short])
        assert done[long[0]].result.reason is StopReason.CANCELLED
        assert done[short].result.reason is StopReason.MAX_TOKENS and len(done[short].generated_ids) == 5
        assert engine.batch.steps > 0
        # the other long stream goes on alone after the cancelled one ended
        engine.cancel(long[1])
        assert rec.wait_done([long[1]])[long[1]].result.reason is StopReason.CANCELLED
    finally:
        assert engine.shutdown(timeout=10)


def test_a_new_prompt_prefills_between_batched_steps(backend) -> None:
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    engine.start()
    try:
        first = engine.submit(turn("decoding", "Tell me a long story about a castle.", 200))
        with rec.cond:
            rec.cond.wait_for(lambda: any(isinstance(e, Token) and e.request_id == first
                                          for e in rec.events), timeout=60)
        words = " ".join(f"item {i} costs {i * 7 % 100} coins," for i in range(120))
        config = GenerationConfig(max_new_tokens=4)
        settings = TurnSettings(generation=config, chunked_prefill=True, chunk_size=32)
        late = engine.submit(TurnRequest("late", (ChatMessage("user", f"Sum up: {words}"),), settings))
        done = rec.wait_done([late])
        # between the late prompt's first and last chunk the decoding stream kept producing tokens
        events = rec.events
        chunks = [i for i, e in enumerate(events) if isinstance(e, Prefilling) and e.request_id == late]
        assert len(chunks) > 4
        between = [e for e in events[chunks[0]:chunks[-1]] if isinstance(e, Token) and e.request_id == first]
        assert len(between) >= len(chunks) - 2
        # ...and never more than one chunk went in between two of its tokens: a decoding stream
        # reaches its next step before the next chunk (the gap is one chunk plus one step).
        marks = [("t" if e.request_id == first else "c") for e in events[chunks[0]:chunks[-1]]
                 if (isinstance(e, Token) and e.request_id == first)
                 or (isinstance(e, Prefilling) and e.request_id == late)]
        runs = [len(r) for r in "".join(marks).split("t") if r]
        assert max(runs) == 1, marks
        assert done[late].result.new_tokens == 4
        engine.cancel(first)
        rec.wait_done([first])
    finally:
        assert engine.shutdown(timeout=10)


def test_log_probabilities_while_batched_match_alone(backend) -> None:
    def scored(cid: str, run: str) -> TurnRequest:  # a new conversation per run: no KV reuse
        settings = TurnSettings(generation=GenerationConfig(max_new_tokens=12), top_logprobs=3)
        return TurnRequest(f"{run}-{cid}", (ChatMessage("user", f"Say something about {cid}."),), settings)

    def tokens_of(engine_events: list[Any], rid: int) -> list[tuple[int, float, tuple]]:
        return [(e.id, e.logprob, e.top_logprobs) for e in engine_events
                if isinstance(e, Token) and e.request_id == rid]

    alone = []
    for cid in ("cats", "boats"):
        rec = Recorder()
        engine = EngineThread(lambda: Shared(backend), rec, max_active=1)
        engine.start()
        rid = engine.submit(scored(cid, "alone"))
        rec.wait_done([rid])
        engine.shutdown(timeout=10)
        alone.append(tokens_of(rec.events, rid))
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    engine.start()
    rids = [engine.submit(scored(cid, "together")) for cid in ("cats", "boats")]
    rec.wait_done(rids)
    assert engine.batch.steps > 0
    engine.shutdown(timeout=10)
    together = [tokens_of(rec.events, rid) for rid in rids]
    # The same tokens; their log-probabilities as llama.cpp computes them in a batch of 2 rows
    # rather than 1 (it promises no batch invariance): its CPU flash attention accumulates in
    # F16, so where the other stream's cells sit in the shared KV moves a logit by up to ~0.26
    # (README, "Same answers"); measured here up to 0.24.
    assert [[t for t, _, _ in row] for row in together] == [[t for t, _, _ in row] for row in alone]
    for row_t, row_a in zip(together, alone):
        for (_, lp_t, top_t), (_, lp_a, top_a) in zip(row_t, row_a):
            assert lp_t is not None and lp_a is not None and abs(lp_t - lp_a) < 0.3
            assert [i for i, _ in top_t][:1] == [i for i, _ in top_a][:1]


def test_speculation_pauses_while_other_turns_decode(backend) -> None:
    text = ("Repeat this list exactly: apple, banana, cherry, apple, banana, cherry, apple, banana, "
            "cherry, apple, banana, cherry.")

    def echo(cid: str) -> TurnRequest:
        settings = TurnSettings(generation=GenerationConfig(max_new_tokens=24), speculation="lookup")
        return TurnRequest(cid, (ChatMessage("user", text),), settings)

    done, engine = _run(backend, [echo("spec-alone")], max_active=1)
    assert done[0].result.drafted_tokens > 0  # alone, the echo drafts
    done, engine = _run(backend, [echo("spec-a"), echo("spec-b")])
    assert engine.batch.steps > 0
    # side by side the turns batch instead; a turn left alone at the end may draft again
    assert min(done[i].result.drafted_tokens for i in range(2)) == 0


def test_api_requests_sharing_a_cached_prefix_decode_side_by_side(backend) -> None:
    from turbospark_app.service.events import PromptRequest

    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=16))
    ids = tuple(backend.prompts.raw_ids("Once upon a time, in a village by the sea, there lived"))
    done, _ = _run(backend, [PromptRequest(ids, settings, builder=backend.prompts)])  # an API session
    # both match that idle session; only one may take it, the other must not queue behind it
    done, engine = _run(backend, [PromptRequest(ids, settings, builder=backend.prompts) for _ in range(2)])
    assert engine.batch.steps >= 10
    assert done[0].conversation_id != done[1].conversation_id
    assert len(done[0].generated_ids) == len(done[1].generated_ids) == 16


def test_prompts_that_come_together_go_whole_and_a_late_one_in_budget_chunks(backend, monkeypatch) -> None:
    """Two requests at once: the second's prompt is not cut for the first (which had no token
    when it began, as llama-server batches simultaneous arrivals); one arriving while a stream
    decodes is."""
    monkeypatch.setattr(backend.chunk_budget, "observe", lambda tokens, seconds: None)
    monkeypatch.setattr(backend.chunk_budget, "observe_batch", lambda *args: None)
    monkeypatch.setattr(backend.chunk_budget, "narrow_row", 0.0)
    monkeypatch.setattr(backend.chunk_budget, "wide_row", 0.0)
    monkeypatch.setattr(backend.chunk_budget, "rate", 1.0)  # cut chunks: the 8-token floor
    words = " ".join(f"item {i} costs {i * 7 % 100} coins," for i in range(40))
    chunked = TurnSettings(generation=GenerationConfig(max_new_tokens=2), chunked_prefill=True, chunk_size=32)
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    first = engine.submit(turn("together-a", "Tell me a long story about a castle.", 200))
    together = engine.submit(TurnRequest("together-b", (ChatMessage("user", f"Sum up: {words}"),), chunked))
    engine.start()  # both queued before the engine runs: they begin together
    try:
        rec.wait_done([together])
        with rec.cond:
            rec.cond.wait_for(lambda: sum(isinstance(e, Token) and e.request_id == first
                                          for e in rec.events) >= 4, timeout=60)
        late = engine.submit(TurnRequest("late", (ChatMessage("user", f"List: {words}"),), chunked))
        rec.wait_done([late])
        decoding = [e.request_id for e in rec.events if isinstance(e, Token) and e.request_id == first]
        assert len(decoding) < 200, "the first stream must still be decoding as the late prompt goes in"

        def sizes(rid: int) -> list[int]:  # each chunk's new tokens (`done` counts a reused prefix)
            marks = [e for e in rec.events if isinstance(e, Prefilling) and e.request_id == rid]
            done = [e.done for e in marks]
            return [b - a for a, b in zip([marks[0].reused] + done, done)]
        whole, cut = sizes(together), sizes(late)
        assert len(whole) > 3 and set(whole[:-1]) == {32}, whole
        assert len(cut) > 12 and set(cut[:-1]) == {8}, cut
        engine.cancel(first)
        rec.wait_done([first])
    finally:
        assert engine.shutdown(timeout=10)


def test_a_late_prompt_goes_into_the_streams_passes_and_starts_as_alone(backend, monkeypatch) -> None:
    """Continuous batching: each chunk of a prompt arriving while a stream decodes goes in the
    SAME forward pass as that stream's next step (one token of it per chunk, no step apart),
    and the prompt's first token is what it is alone: passes held narrow (< 64 rows, llama.cpp's
    row-by-row attention) and the chunks alone cut the same, the prompt's logits are bit-equal.
    (Later tokens are not compared: where another sequence's cells lie in the unified KV moves
    a lone decode row's logits in the last bits, and a greedy reply can part a few dozen tokens
    on; it did so with the chunks fed apart too.)"""
    monkeypatch.setattr(backend.chunk_budget, "pass_rows", lambda: 22)
    words = " ".join(f"item {i} costs {i * 7 % 100} coins," for i in range(30))
    late_settings = TurnSettings(generation=GenerationConfig(max_new_tokens=6), chunked_prefill=True, chunk_size=21)
    late_turn = TurnRequest("late-alone", (ChatMessage("user", f"Sum up: {words}"),), late_settings)
    story = turn("story-alone", "Tell me a long story about a castle.", 60)
    done, _ = _run(backend, [late_turn], max_active=1)
    late_alone = done[0].generated_ids
    done, _ = _run(backend, [story], max_active=1)
    story_alone = done[0].generated_ids
    passes: list[tuple[int, int]] = []
    run = backend.decode_batch

    def counted(steps):  # (decode rows, chunk tokens) of each pass
        chunk = sum(len(s.tokens) for s in steps if isinstance(s, PrefillStep))
        passes.append((sum(isinstance(s, DecodeStep) for s in steps), chunk))
        return run(steps)
    monkeypatch.setattr(backend, "decode_batch", counted)

    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    engine.start()
    try:
        first = engine.submit(TurnRequest("story-batched", story.messages, story.settings))
        with rec.cond:
            rec.cond.wait_for(lambda: sum(isinstance(e, Token) and e.request_id == first
                                          for e in rec.events) >= 3, timeout=60)
        late = engine.submit(TurnRequest("late-batched", late_turn.messages, late_settings))
        done = rec.wait_done([late, first])
    finally:
        assert engine.shutdown(timeout=10)
    assert done[late].generated_ids[0] == late_alone[0]
    assert done[first].result.reason is StopReason.MAX_TOKENS and len(done[first].generated_ids) == 60
    assert done[first].generated_ids[:3] == story_alone[:3]
    marks = [e for e in rec.events if isinstance(e, Prefilling) and e.request_id == late]
    sizes = [b.done - a.done for a, b in zip(marks, marks[1:])]
    assert len(marks) > 5 and set(sizes[:-1]) == {21}, sizes
    with_chunk = [p for p in passes if p[1]]
    assert len(with_chunk) >= len(marks) - 1 and all(rows == 1 for rows, _ in with_chunk)
    # between two chunks the stream got exactly one token: from the pass that carried the chunk
    seq = "".join("t" if isinstance(e, Token) and e.request_id == first else "c"
                  for e in rec.events[rec.events.index(marks[0]):rec.events.index(marks[-1])]
                  if (isinstance(e, Token) and e.request_id == first) or e in marks)
    assert seq.count("cc") == 0 and seq.count("tt") == 0, seq


def test_stop_of_a_prompt_going_in_beside_a_stream(backend, monkeypatch) -> None:
    """Stop on the late prompt while its chunk rides the stream's pass: the pass is stopped
    inside (llama.cpp's abort callback) and nothing of it is committed for anyone; the prompt
    ends CANCELLED with the chunks before it (its KV is what it reports), the stream runs its
    step again on its own and goes on to its cap."""
    monkeypatch.setattr(backend.chunk_budget, "pass_rows", lambda: 22)
    story = turn("story-stop", "Tell me a long story about a dragon.", 50)
    words = " ".join(f"item {i} costs {i * 7 % 100} coins," for i in range(60))
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=4), chunked_prefill=True)
    rec = Recorder()
    engine = EngineThread(lambda: Shared(backend), rec, max_active=4)
    run, box, missed = backend.decode_batch, {}, []

    def stopping(steps):  # Stop pressed as the third pass carrying a chunk begins
        if any(isinstance(s, PrefillStep) for s in steps):
            box["chunks"] = box.get("chunks", 0) + 1
            if box["chunks"] == 3:
                engine.cancel(box["late"])
                missed.append(run(steps))
                return missed[-1]
        return run(steps)
    monkeypatch.setattr(backend, "decode_batch", stopping)
    engine.start()
    try:
        first = engine.submit(story)
        with rec.cond:
            rec.cond.wait_for(lambda: sum(isinstance(e, Token) and e.request_id == first
                                          for e in rec.events) >= 3, timeout=60)
        box["late"] = late = engine.submit(TurnRequest("late-stop", (ChatMessage("user", f"Sum up: {words}"),), settings))
        done = rec.wait_done([late, first])
    finally:
        assert engine.shutdown(timeout=10)
    assert len(missed) == 1 and len(missed[0]) == 2  # the pass stopped inside: neither step ran
    result = done[late].result
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 0
    marks = [e for e in rec.events if isinstance(e, Prefilling) and e.request_id == late]
    assert len(marks) == 2 and marks[-1].done == result.kv_position == len(result.kv_backed_token_ids)
    assert 0 < result.kv_position < result.prompt_tokens
    assert done[first].result.reason is StopReason.MAX_TOKENS and len(done[first].generated_ids) == 50
