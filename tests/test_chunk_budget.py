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


def test_batched_passes_are_sized_from_their_cost_per_row_wide_while_it_fits() -> None:
    """A chunk going into the streams' pass: the pass (decode rows + chunk) sized to the target
    gap from the last such pass's cost per row; a wide pass (llama.cpp's tiled attention) tried,
    kept while it fits, left for narrow ones (dearer per row) when it stops fitting."""
    from turbospark_app.engine.chunk_budget import WIDE_ROWS

    crowded = [True]
    budget = ChunkBudget(lambda: crowded[0], target_gap_seconds=0.2)
    assert budget.limit(batched=True) == 32  # nothing measured: a small first chunk
    budget.observe_batch(0, 3, 0.02)  # a decode-only pass: the streams' step, 3 rows
    assert budget.step_rows == 3 and budget.step_seconds == 0.02
    budget.observe_batch(30, 33, 33 * 0.003, depth=30)  # narrow: 3 ms a row
    assert budget.pass_rows() == int(0.2 / (0.003 * 1.05)) < WIDE_ROWS  # 64 such rows would not fit
    budget.observe_batch(30, 33, 33 * 0.0025, depth=60)  # 2.5 ms a row: 64 of them would
    assert budget.pass_rows() == WIDE_ROWS  # so a wide pass is tried
    assert budget.limit(batched=True) == WIDE_ROWS - 3
    budget.offered(WIDE_ROWS - 3)  # taken by one prompt: another one's chunk gets the floor
    assert budget.limit(batched=True) == 8
    budget.observe_batch(61, 64, 64 * 0.0022, depth=121)  # wide: 2.2 ms a row, cheaper
    assert budget.claimed == 0 and budget.pass_rows() == int(0.2 / (0.0022 * 1.05)) > WIDE_ROWS
    budget.observe_batch(70, 73, 73 * 0.0035, depth=191)  # deeper: 64 rows no longer fit
    assert budget.pass_rows() == int(0.2 / (1.5 * 0.0035 * 1.05)) < WIDE_ROWS
    budget.observe_batch(30, 33, 33 * 0.006, depth=221)  # measured narrow: 6 ms a row
    assert budget.pass_rows() == int(0.2 / (0.006 * 1.05))  # and no wide pass tried again
    budget.observe_batch(20, 23, 23 * 0.002, depth=20)  # a new prompt (lower position): forgets
    assert budget.wide_row == 0 and budget.pass_rows() == WIDE_ROWS
    crowded[0] = False
    assert budget.limit(batched=True) is None


def test_a_chunk_is_offered_to_the_driver_only_when_cut_for_streams() -> None:
    from fakes import ScriptedProducer

    from turbospark_app.engine.progress import PrefillStep

    class Limit(_Fixed):
        def __init__(self, sizes: list[int | None], crowded: bool) -> None:
            super().__init__(sizes)
            self.crowded, self.taken = crowded, 0

        def limit(self, batched: bool = False) -> int | None:
            return 4 if self.crowded else None  # (asked again when offering: no side effects)

        def offered(self, tokens: int) -> None:
            self.taken += tokens

    class Batchable(ScriptedProducer):
        batchable = True

    tok = PieceTokenizer([bytes([97 + i % 26]) for i in range(60)])
    for crowded in (True, False):
        limit = Limit([4, 4], crowded)
        producer = Batchable(vocab_size=63, default=5)
        stream = stream_raw_completion_chunked(producer, tok, list(range(12)), GenerationConfig(max_new_tokens=1),
                                               64, 63, chunk_size=16, chunk_limit=limit)
        offered, event = [], next(stream)
        try:
            while True:
                if isinstance(event, PrefillStep):
                    offered.append(event)
                    event = stream.send(None)  # a driver that does not batch: the loop feeds it
                else:
                    event = next(stream)
        except StopIteration as done:
            result = done.value
        assert result.new_tokens == 1 and producer.kv[:12] == list(range(12))  # fed once each, by the loop
        assert [m for m in producer.methods() if m.startswith("produce_chunk")] == ["produce_chunk"] * (3 if crowded else 1)
        if crowded:
            assert [(e.tokens, e.position) for e in offered] == [((0, 1, 2, 3), 0), ((4, 5, 6, 7), 4), ((8, 9, 10, 11), 8)]
            assert offered[-1].logits is not None and offered[0].logits is None and limit.taken == 12
        else:
            assert offered == [] and limit.taken == 0


def test_the_longest_stream_gap_is_a_serve_flag_or_variable_and_sets_the_pass_target(default_model_path) -> None:
    import argparse

    from turbospark_app.cli.main import build_parser
    from turbospark_app.cli.serve_command import backend_factory, stream_gap_of
    from turbospark_app.engine.chunk_budget import TARGET_GAP_SECONDS, target_gap_for

    assert target_gap_for(250) == pytest.approx(TARGET_GAP_SECONDS)  # the default promise
    assert target_gap_for(500) == pytest.approx(0.46) and target_gap_for(10) == 0.04
    with pytest.raises(ValueError):
        target_gap_for(0)
    args = build_parser().parse_args(["serve", "--max-stream-gap-ms", "400"])
    assert stream_gap_of(args, {"TURBOSPARK_MAX_STREAM_GAP_MS": "300"}) == 400  # the flag wins
    none = argparse.Namespace(max_stream_gap_ms=None)
    assert stream_gap_of(none, {"TURBOSPARK_MAX_STREAM_GAP_MS": "300"}) == 300
    assert stream_gap_of(none, {}) is None
    for bad in ("0", "-5", "fast", "nan"):
        with pytest.raises(ValueError, match="TURBOSPARK_MAX_STREAM_GAP_MS"):
            stream_gap_of(none, {"TURBOSPARK_MAX_STREAM_GAP_MS": bad})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-stream-gap-ms", "0"])
    backend = backend_factory(str(default_model_path), 2, None, max_stream_gap_ms=400)()
    try:
        assert backend.chunk_budget.target_gap_seconds == pytest.approx(0.36)
    finally:
        backend.close()
