"""Speculation over llama.cpp: on a tiny model (whose kernels give a verify pass's rows exactly
the one-token steps' logits) token ids equal to plain decoding, greedy and sampled; the
producer's rows and trim through a session slot; and the default model, where a verify pass may
round differently from a one-token step: a fork is reported, never hidden."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from fakes import PieceTokenizer
from tiny_gguf import write_tiny_gguf

from turbospark_app.engine import (
    GenerationConfig,
    LookupSpeculation,
    Shaping,
    run_raw_completion_chunked,
)
from turbospark_app.engine.speculation import VerifyCost
from turbospark_app.engine.session_pool import SessionPool
from turbospark_app.model.llamacpp.context import LlamaCppContext
from turbospark_app.model.llamacpp.model import LlamaCppModel
from turbospark_app.model.llamacpp.producer import LlamaCppProducer



class FixedCost(VerifyCost):
    """A verify pass's cost not learnt from this machine's timings, so the drafts (and the trims
    after rejected ones) are the same in every run. llama.cpp's logits move in the last bits
    with where a sequence's cells lie after trims; a draft length learnt from timings made the
    sampled case flaky (~1 run in 2 under load, logits 3.6e-7 apart)."""

    def timed_step(self, seconds: float) -> None:
        pass

    def timed_pass(self, rows: int, seconds: float) -> None:
        pass


# a random model rarely repeats trigrams: draft on any match
EAGER = LookupSpeculation(ngram_min=1, cost=FixedCost())
TOKENIZER = PieceTokenizer([bytes([97 + i % 26]) for i in range(297)])  # ids 0..296 + 3 specials


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LlamaCppContext:
    folder = tmp_path_factory.mktemp("spec")
    write_tiny_gguf(folder / "tiny.gguf", tied=False)  # untied head: varied, non-echo replies
    model = LlamaCppModel.open(folder / "tiny.gguf")
    ctx = LlamaCppContext(model, n_ctx=512, n_seq_max=2, n_batch=64, threads=2)
    yield ctx
    ctx.close()
    model.close()


def _prompts(n: int) -> list[list[int]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        base = [int(t) for t in rng.integers(0, 290, 24)]
        out.append(base + base[:12])  # a repeated stretch: lookups hit
    return out


def _pair(ctx: LlamaCppContext, prompt: list[int], config: GenerationConfig, spec: LookupSpeculation):
    runs = []
    for s in (None, spec):
        producer = LlamaCppProducer(ctx, 0)
        result = run_raw_completion_chunked(producer, TOKENIZER, prompt, config, 512,
                                            ctx.n_vocab, speculation=s)
        assert list(producer.mirror) == result.kv_backed_token_ids  # trimmed back after rejects
        assert ctx.seq_pos_max(0) + 1 == result.kv_position
        runs.append(result)
    return runs


@pytest.mark.parametrize("shaping", [Shaping(), Shaping(temperature=0.8, top_p=0.9, seed=11),
                                     Shaping(repetition_penalty=1.3, penalty_last_n=16)],
                         ids=["greedy", "sampled", "penalised"])
def test_speculation_gives_the_plain_decodes_tokens(tiny: LlamaCppContext, shaping: Shaping) -> None:
    drafted = accepted = 0
    for prompt in _prompts(5):
        plain, spec = _pair(tiny, prompt, GenerationConfig(max_new_tokens=48, shaping=shaping), EAGER)
        assert spec.kv_backed_token_ids == plain.kv_backed_token_ids
        assert (spec.new_tokens, spec.reason) == (plain.new_tokens, plain.reason)
        drafted += spec.drafted_tokens
        accepted += spec.accepted_tokens
    assert drafted > 0
    if shaping == Shaping():  # greedy: both outcomes were exercised (a penalty may reject all:
        assert 0 < accepted < drafted  # its drafts repeat what it penalises; identity still holds)


def test_session_producer_passes_rows_and_trim(tiny: LlamaCppContext) -> None:
    pool = SessionPool(lambda: LlamaCppProducer(tiny, 1), slots=1)
    session = pool.checkout("s")
    assert session is not None
    session.produce_chunk([1, 2], 0, None)
    session.produce_rows([3, 4], 2, np.empty((2, tiny.n_vocab), np.float32))
    session.trim(3)
    assert tuple(pool.slots[0].producer.mirror) == (1, 2, 3) and tiny.seq_pos_max(1) == 2


# -- the default model ----------------------------------------------------------------------------

ECHO = "Repeat this sentence exactly: the small brown dog ran across the green field to the old barn."


def _default_model() -> Path:
    from test_model_real import _real_model_path

    return _real_model_path()


def _chat_ids(path: Path, text: str) -> tuple[object, object, list[int]]:
    from turbospark_app.chat.api import ChatMessage
    from turbospark_app.chat.backend import load_backend

    backend = load_backend(path, session_slots=1, max_context=1024)
    return backend, backend.tokenizer, backend.prompts.chat_ids([ChatMessage("user", text)])


@pytest.mark.real_model
def test_default_model_greedy_reply_with_lookup() -> None:
    """A verify pass of several rows may round differently from one-token steps (llama.cpp
    promises no batch invariance), so a greedy reply may fork where two tokens are near-tied:
    the fork is reported (a warning with the index), and everything before it must agree."""
    path = _default_model()
    backend, tokenizer, ids = _chat_ids(path, ECHO)
    config = GenerationConfig(max_new_tokens=48)
    results = []
    try:
        for spec in (None, LookupSpeculation()):
            producer = LlamaCppProducer(backend.context, 0)
            r = run_raw_completion_chunked(producer, tokenizer, ids, config, 1024, backend.vocab_size,
                                           speculation=spec)
            assert list(producer.mirror) == r.kv_backed_token_ids
            results.append(r)
    finally:
        backend.close()
    plain, look = results
    assert look.accepted_tokens > 0  # an echo prompt: drafts were kept
    a, b = plain.kv_backed_token_ids, look.kv_backed_token_ids
    fork = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
    if fork is not None:
        warnings.warn(f"greedy reply with lookup forks from plain at token {fork - len(ids)}")
        assert fork - len(ids) >= 1  # never the first token (it comes from the prefill's logits)
