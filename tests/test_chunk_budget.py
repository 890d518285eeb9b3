"""A prompt arriving while other streams decode goes in chunks sized to a time budget (so their
token gaps stay short); alone, in whole chunks."""

from __future__ import annotations

import pytest
from fakes import PieceTokenizer

from turbospark_app.engine import GenerationConfig
from turbospark_app.engine.chunk_budget import ChunkBudget
from turbospark_app.engine.raw_completion_chunked import Chunked, stream_raw_completion_chunked
from turbospark_app.service.batching import stalls_running_streams
from turbospark_app.service.jobs import Job


def test_no_limit_alone_and_the_rate_times_the_budget_when_crowded() -> None:
    crowded = [False]
    budget = ChunkBudget(lambda: crowded[0], budget_seconds=0.1)
    assert budget.limit() is None
    crowded[0] = True
    assert budget.limit() == 32  # no rate yet: a small first chunk
    budget.observe(100, 0.5)  # 200 tok/s
    assert budget.limit() == 20
    budget.observe(100, 0.1)  # 1000 tok/s, folded into the running mean
    assert 20 < budget.limit() <= 100
    budget.observe(100, 1000.0)  # very slow: never below the smallest chunk
    budget.observe(1, 1000.0)
    assert budget.limit() >= 8
    with pytest.raises(ValueError):
        ChunkBudget(lambda: True, budget_seconds=0)


class _Fixed:
    def __init__(self, sizes: list[int | None]) -> None:
        self.sizes = sizes
        self.seen: list[int] = []

    def limit(self) -> int | None:
        return self.sizes.pop(0) if self.sizes else None

    def observe(self, tokens: int, seconds: float) -> None:
        self.seen.append(tokens)


def test_spans_are_sized_when_due_and_cover_the_prompt_once() -> None:
    limit = _Fixed([3, None, 5, 100])
    spans = list(Chunked(8, limit).spans(30))
    assert spans == [(0, 3), (3, 11), (11, 16), (16, 24), (24, 30)]  # None and 100: the chunk size
    assert list(Chunked(8).spans(20)) == [(0, 8), (8, 16), (16, 20)]


def test_the_step_loop_feeds_the_sized_chunks_and_reports_each() -> None:
    from fakes import ScriptedProducer  # a producer that records what it is fed

    tok = PieceTokenizer([bytes([97 + i % 26]) for i in range(60)])
    producer = ScriptedProducer(vocab_size=63, default=5)
    limit = _Fixed([4, 4, 4])
    stream = stream_raw_completion_chunked(producer, tok, list(range(20)), GenerationConfig(max_new_tokens=2),
                                           64, 63, chunk_size=16, chunk_limit=limit)
    for _ in stream:
        pass
    assert limit.seen == [4, 4, 4, 8]  # three sized chunks, then the rest in one (None: 16)


def test_a_slow_batched_step_leaves_the_chunk_what_the_target_gap_allows() -> None:
    budget = ChunkBudget(lambda: True, budget_seconds=0.15, target_gap_seconds=0.22)
    budget.observe(1000, 1.0)  # 1000 prompt tokens/s
    assert budget.limit() == 150  # no step timed yet: the whole budget
    budget.observe_step(0.01)  # a fast step (the default model): the budget stays whole
    assert budget.limit() == 150
    budget.observe_step(0.11)  # a 1B's batched step: chunk + step stays near the target gap
    budget.observe_step(0.11)
    budget.observe_step(0.11)
    step = budget.step_seconds
    assert 0.07 < step < 0.11 and budget.limit() == int(1000 * (0.22 - step))
    for _ in range(20):
        budget.observe_step(0.5)  # slower than the gap itself: never below the smallest budget
    assert budget.limit() == 40
    budget.observe_step(0.0)  # not a measurement
    assert budget.limit() == 40


def test_only_a_stream_decoding_before_the_prompt_began_cuts_its_chunks() -> None:
    def job(started: float | None, first_token: float | None) -> Job:
        j = Job(0, None, 0.0)  # type: ignore[arg-type]
        j.started_at, j.first_token_at = started, first_token
        return j

    me = job(10.0, None)
    together = job(9.9, 10.2)  # began with it, had its first token after: a co-arrival
    running = job(1.0, 2.0)  # decoding before it began: its gaps are what the budget keeps short
    prefilling = job(5.0, None)
    assert not stalls_running_streams(me, [me])
    assert not stalls_running_streams(me, [me, together, prefilling])
    assert stalls_running_streams(me, [together, me, running])
    # a queued job that starts later is cut for streams that started meanwhile
    assert stalls_running_streams(job(10.5, None), [together])
    # outside a step (nothing stepped, or not started): any other active job counts
    assert stalls_running_streams(None, [together, prefilling])
    assert not stalls_running_streams(None, [together])
    assert stalls_running_streams(job(None, None), [together, prefilling])
