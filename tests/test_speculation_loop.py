"""Prompt-lookup speculation in the decode loop, on scripted producers: the same tokens, events,
stops and KV as plain decoding; drafts verified in one pass; rejected rows trimmed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import pytest
from fakes import ByteTokenizer, Call, FakeClock, ScriptedProducer, drain, timeless

from turbospark_app.chat.logprobs import LogprobTap, ScoredTokenProgress, log_softmax
from turbospark_app.engine import (
    DecodeStep,
    GenerationConfig,
    LookupSpeculation,
    PaceWait,
    RateConfig,
    Shaping,
    StopReason,
    TokenProgress,
    stream_raw_completion,
    stream_raw_completion_chunked,
)

V = ByteTokenizer.VOCAB_SIZE
EAGER = LookupSpeculation(ngram_min=1, ngram_max=3)  # drafts on any match


class RowsProducer(ScriptedProducer):
    """A ScriptedProducer that also verifies drafts: row i of a pass is the script's logits
    at position + i; `trim` drops KV ids past n."""

    batchable = False

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        self.calls.append(Call("produce_rows", tuple(tokens), position, True, self._now()))
        self._feed(tokens, position)
        for i in range(len(tokens)):
            rows_out[i] = self.logits_at(position + i)

    def trim(self, n: int) -> None:
        assert 0 <= n <= len(self.kv), (n, len(self.kv))
        self.calls.append(Call("trim", None, n))
        del self.kv[n:]

    def passes(self) -> list[Call]:
        return [c for c in self.calls if c.method == "produce_rows"]


def _echo_case(reply: Sequence[int]) -> tuple[list[int], dict[int, int]]:
    """A prompt that holds `reply`'s text, and a script whose argmax spells `reply`."""
    prompt = [ord(c) for c in "copy: "] + list(reply) + [ord("\n")]
    return prompt, {len(prompt) - 1 + i: t for i, t in enumerate(reply)}


def _run(producer: Any, prompt: list[int], config: GenerationConfig, spec: LookupSpeculation | None,
         chunked: bool = True, cancel: Any = None) -> tuple[list[Any], Any]:
    kw = {} if cancel is None else {"cancel": cancel}
    if chunked:
        stream = stream_raw_completion_chunked(producer, ByteTokenizer(), prompt, config, 4096, V,
                                               speculation=spec, **kw)
    else:
        stream = stream_raw_completion(producer, ByteTokenizer(), prompt, config, 4096, V,
                                       speculation=spec, **kw)
    return drain(stream)


def _both(script: Any, prompt: list[int], config: GenerationConfig, spec: LookupSpeculation = EAGER,
          **kw: Any) -> tuple[tuple[list[Any], Any], tuple[list[Any], Any], RowsProducer]:
    plain = _run(RowsProducer(V, script, default=ByteTokenizer.EOS), prompt, config, None, **kw)
    producer = RowsProducer(V, script, default=ByteTokenizer.EOS)
    return plain, _run(producer, prompt, config, spec, **kw), producer


def _same(plain: tuple[list[Any], Any], spec: tuple[list[Any], Any]) -> None:
    assert [e for e in spec[0] if not isinstance(e, DecodeStep)] == \
        [e for e in plain[0] if not isinstance(e, DecodeStep)]
    assert replace(timeless(spec[1]), drafted_tokens=0, accepted_tokens=0) == timeless(plain[1])


@pytest.mark.parametrize("chunked", [True, False])
def test_echo_is_verified_in_passes_and_identical_to_plain(chunked: bool) -> None:
    reply = [ord(c) for c in "the quick brown fox jumps over the lazy dog"]
    prompt, script = _echo_case(reply)
    plain, spec, producer = _both(script, prompt, GenerationConfig(max_new_tokens=100), chunked=chunked)
    _same(plain, spec)
    result = spec[1]
    assert result.reason == StopReason.EOS
    assert result.drafted_tokens > 0 and result.accepted_tokens > 0.8 * len(reply)
    # Far fewer forward passes than tokens: most tokens came from verified rows.
    passes = [c for c in producer.feeds() if c.position is not None and c.position >= len(prompt) - 1
              and c.method != "produce_chunk" and c.method != "produce_prefill"]
    assert len(passes) < len(reply) / 2
    assert producer.kv == result.kv_backed_token_ids


def test_rejected_drafts_are_trimmed_from_the_kv() -> None:
    # The reply copies the prompt, then leaves it: the drafts past the fork are rejected.
    copied = [ord(c) for c in "abcdefgh"]
    reply = copied + [ord(c) for c in "XYZ"]
    prompt = [ord(c) for c in "abcdefghijklmnop "]
    script = {len(prompt) - 1 + i: t for i, t in enumerate(reply)}
    plain, spec, producer = _both(script, prompt, GenerationConfig(max_new_tokens=40))
    _same(plain, spec)
    trims = [c for c in producer.calls if c.method == "trim"]
    assert trims, "a rejected draft must be trimmed"
    for trim in trims:  # each trim drops rows of the pass before it, down to the confirmed tokens
        before = producer.calls[:producer.calls.index(trim)]
        last_pass = [c for c in before if c.method == "produce_rows"][-1]
        assert last_pass.position < trim.position < last_pass.position + len(last_pass.token)
    assert producer.kv == spec[1].kv_backed_token_ids
    assert spec[1].accepted_tokens < spec[1].drafted_tokens


@pytest.mark.parametrize("seed", range(6))
def test_temperature_sampling_keeps_drafts_only_while_samples_match(seed: int) -> None:
    """Row by row with the same sampler: the tokens are exactly plain decoding's (the script's
    logits depend on the position only, and each sampled row draws one number, as plain)."""
    rng = np.random.default_rng(seed)
    prompt = [int(t) for t in rng.integers(97, 101, 30)]  # 4 letters: n-grams recur
    logits = {p: rng.normal(0, 1.5, V).astype(np.float32) for p in range(200)}
    for vec in logits.values():
        vec[256:] = -np.inf  # no stop tokens: the whole budget is sampled
        vec[:97] -= 8
        vec[101:256] -= 8
    config = GenerationConfig(max_new_tokens=60, shaping=Shaping(temperature=0.9, top_k=3, seed=seed))
    plain, spec, producer = _both(logits, prompt, config)
    _same(plain, spec)
    tokens = [e.id for e in spec[0] if isinstance(e, TokenProgress)]
    # Recount by hand: a draft is accepted iff the token sampled at its row equals it.
    accepted = drafted = 0
    n = len(prompt)
    for call in producer.passes():
        drafts = call.token[1:]
        first = call.position + 1 - n  # reply index of the token sampled from row 0
        drafted += len(drafts)  # every draft of a pass is verified (counted), kept or not
        for i, d in enumerate(drafts):
            if first + i >= len(tokens) or tokens[first + i] != d:
                break
            accepted += 1
    assert (drafted, accepted) == (spec[1].drafted_tokens, spec[1].accepted_tokens)
    assert producer.kv == spec[1].kv_backed_token_ids


def test_hand_built_rows_accept_exactly_when_the_sample_equals_the_draft() -> None:
    """Prompt "abcab": the first token is "c" (forced), so "abc" drafts "a(bc)" again. Row 0
    allows "a" or "e" (even odds), row 1 only "d": the draft "a" is kept iff "a" is drawn. Both outcomes occur over the seeds, each exactly as plain decoding draws it."""
    prompt = [ord(c) for c in "abcab"]

    def only(*ids: str) -> np.ndarray:
        v = np.full(V, -np.inf, np.float32)
        for c in ids:
            v[ord(c)] = 0.0
        return v

    script = {4: only("c"), 5: only("a", "e"), 6: only("d")}
    outcomes = set()
    for seed in range(12):
        config = GenerationConfig(max_new_tokens=3, shaping=Shaping(temperature=1.0, seed=seed))
        plain, spec, producer = _both(script, prompt, config)
        _same(plain, spec)
        tokens = "".join(chr(e.id) for e in spec[0] if isinstance(e, TokenProgress))
        assert tokens in ("cad", "ced")
        (first, *rest) = producer.passes()
        # "c" + one draft: the budget leaves two tokens, row 0's and row 1's.
        assert first.token == tuple(ord(c) for c in "ca")
        assert spec[1].accepted_tokens == (1 if tokens == "cad" else 0)
        assert spec[1].drafted_tokens == 1 + sum(len(c.token) - 1 for c in rest)
        assert producer.kv == spec[1].kv_backed_token_ids
        outcomes.add(tokens)
    assert outcomes == {"cad", "ced"}


def test_stop_string_inside_a_verified_run() -> None:
    reply = [ord(c) for c in "alpha beta STOP gamma delta"]
    prompt, script = _echo_case(reply)
    config = GenerationConfig(max_new_tokens=100, stop_strings=("STOP",))
    plain, spec, producer = _both(script, prompt, config)
    _same(plain, spec)
    assert spec[1].reason == StopReason.STOP_STRING
    assert producer.kv == spec[1].kv_backed_token_ids


@pytest.mark.parametrize("cap", [1, 5, 9, 17])
def test_max_new_tokens_inside_a_draft(cap: int) -> None:
    reply = [ord(c) for c in "one two three four five six seven"]
    prompt, script = _echo_case(reply)
    plain, spec, producer = _both(script, prompt, GenerationConfig(max_new_tokens=cap))
    _same(plain, spec)
    assert spec[1].new_tokens == cap and spec[1].reason == StopReason.MAX_TOKENS
    n = len(prompt)
    for call in producer.passes():  # never drafts past the budget
        assert call.position + len(call.token) <= n - 1 + cap
    assert producer.kv == spec[1].kv_backed_token_ids


@pytest.mark.parametrize("stop_after", [1, 3, 6, 11])
def test_cancel_mid_draft(stop_after: int) -> None:
    reply = [ord(c) for c in "one two three four five six seven"]
    prompt, script = _echo_case(reply)

    def canceller() -> Any:
        seen = {"n": 0}

        def cancel() -> bool:
            return seen["n"] >= stop_after

        return seen, cancel

    results = []
    for spec in (None, EAGER):
        seen, cancel = canceller()
        producer = RowsProducer(V, script, default=ByteTokenizer.EOS)
        stream = stream_raw_completion_chunked(producer, ByteTokenizer(), prompt,
                                               GenerationConfig(max_new_tokens=100), 4096, V,
                                               cancel, speculation=spec)
        events = []
        for event in _counting(stream, seen):
            events.append(event)
        results.append((events, seen["result"], producer))
    (plain_events, plain, _), (spec_events, spec, producer) = results
    assert spec.reason == StopReason.CANCELLED and spec.new_tokens == stop_after
    assert [e for e in spec_events if not isinstance(e, DecodeStep)] == \
        [e for e in plain_events if not isinstance(e, DecodeStep)]
    assert replace(timeless(spec), drafted_tokens=0, accepted_tokens=0) == timeless(plain)
    assert producer.kv == spec.kv_backed_token_ids


def _counting(stream: Any, seen: dict[str, Any]) -> Any:
    """Yield the stream's events, counting TokenProgress into seen["n"]; result in seen."""
    while True:
        try:
            event = next(stream)
        except StopIteration as done:
            seen["result"] = done.value
            return
        if isinstance(event, TokenProgress):
            seen["n"] += 1
        yield event


def test_pacing_spaces_verified_tokens_to_the_cap() -> None:
    reply = [ord(c) for c in "paced tokens come out one by one"]
    prompt, script = _echo_case(reply)
    cap = 10.0
    runs = []
    for spec in (None, EAGER):
        clock = FakeClock()
        config = GenerationConfig(max_new_tokens=100,
                                  rate=RateConfig(max_tokens_per_sec=cap, clock=clock.clock, sleep=clock.sleep))
        producer = RowsProducer(V, script, default=ByteTokenizer.EOS)
        stream = stream_raw_completion_chunked(producer, ByteTokenizer(), prompt, config, 4096, V,
                                               speculation=spec)
        times: list[float] = []
        while True:
            try:
                event = next(stream)
            except StopIteration as done:
                result = done.value
                break
            if isinstance(event, PaceWait):
                clock.now = max(clock.now, event.until)  # the driver waits it out
            elif isinstance(event, TokenProgress):
                times.append(clock.now)
        runs.append((times, result))
    (plain_times, _), (spec_times, spec) = runs
    assert spec.accepted_tokens > 0
    gaps = np.diff(spec_times)
    assert gaps.min() >= 1 / cap - 1e-9  # the cap holds for tokens of one verified pass too
    assert spec_times == plain_times


def test_crowded_decodes_plainly_with_batchable_steps() -> None:
    reply = [ord(c) for c in "crowded streams batch instead"]
    prompt, script = _echo_case(reply)

    class Batchable(RowsProducer):
        batchable = True

    producer = Batchable(V, script, default=ByteTokenizer.EOS)
    crowded = replace(EAGER, crowded=lambda: True)
    events, result = _run(producer, prompt, GenerationConfig(max_new_tokens=100), crowded)
    assert not producer.passes() and result.drafted_tokens == 0
    assert sum(isinstance(e, DecodeStep) for e in events) == len(reply)  # every step offered


def test_logprob_tap_scores_each_accepted_token_from_its_own_row() -> None:
    rng = np.random.default_rng(3)
    reply = [ord(c) for c in "scored rows scored rows scored rows"]
    prompt, argmax = _echo_case(reply)
    script = {}
    for p, t in argmax.items():  # distinct, non-trivial distributions per row
        v = rng.normal(0, 1, V).astype(np.float32)
        v[t] = v.max() + 2.0
        script[p] = v
    producer = RowsProducer(V, script, default=ByteTokenizer.EOS)
    tap = LogprobTap(producer, 2)
    stream = stream_raw_completion_chunked(tap, ByteTokenizer(), prompt, GenerationConfig(max_new_tokens=100),
                                           4096, V, speculation=EAGER)
    events, result = drain(tap.scored(stream))
    assert result.accepted_tokens > 0
    scored = [e for e in events if isinstance(e, ScoredTokenProgress)]
    assert len(scored) == len(reply)
    n = len(prompt)
    for e in scored:
        expected = log_softmax(producer.logits_at(n - 1 + e.index))
        assert e.logprob == pytest.approx(float(expected[e.id]), abs=1e-5)


def test_a_producer_without_rows_cannot_speculate() -> None:
    with pytest.raises(TypeError, match="produce_rows"):
        stream_raw_completion(ScriptedProducer(V), ByteTokenizer(), [1, 2], GenerationConfig(), 4096, V,
                              speculation=EAGER)
