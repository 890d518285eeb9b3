"""The golden greedy test on the real default model (SmolLM2-135M-Instruct Q4_1): the app's
whole path (template, tokenizer, backend, session slot, chunked prefill, decode loop, stop on
end of turn) gives the reply a bare llama.cpp loop gives on the same ids, with the same batch
split: the prompt as one batch (`llama_batch_get_one`), then one token per decode, argmax."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

QUESTION = "What is the capital of France?"


def _real_model_path() -> Path:
    """TURBOSPARK_MODEL if set, else the fetched default model; skip when there is none."""
    env = os.environ.get("TURBOSPARK_MODEL", "").strip()
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            pytest.skip(f"TURBOSPARK_MODEL={env} does not exist")
        return path
    try:
        from turbospark_app.model.fetch import default_model_path
    except ImportError as exc:
        pytest.skip(f"no TURBOSPARK_MODEL and the default-model module is unavailable ({exc})")
    path = default_model_path()
    if not path.is_file():
        pytest.skip(f"default model not fetched yet ({path}); run `make model` or set TURBOSPARK_MODEL")
    return path


def _bare_llama_cpp(path: Path, ids: list[int], n: int, eog: frozenset[int]) -> tuple[list[int], list[float]]:
    """Greedy ids straight from the C API (no producer, batch or sampler of ours), and the top-2
    logit gap at each step."""
    from turbospark_app.model.llamacpp import library

    C = library.backend()
    mp = C.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = C.llama_model_load_from_file(str(path).encode(), mp)
    cp = C.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 1024, 512, 512, 2, 2
    ctx = C.llama_init_from_model(model, cp)
    n_vocab = C.llama_vocab_n_tokens(C.llama_model_get_vocab(model))
    try:
        arr = (C.llama_token * len(ids))(*ids)
        assert C.llama_decode(ctx, C.llama_batch_get_one(arr, len(ids))) == 0
        out, gaps = [], []
        for _ in range(n):
            logits = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            top = np.sort(logits)[-2:]
            gaps.append(float(top[1] - top[0]))
            token = int(np.argmax(logits))
            if token in eog:
                break
            out.append(token)
            one = (C.llama_token * 1)(token)
            assert C.llama_decode(ctx, C.llama_batch_get_one(one, 1)) == 0
        return out, gaps
    finally:
        C.llama_free(ctx)
        C.llama_model_free(model)


@pytest.mark.real_model
def test_greedy_reply_equals_a_bare_llama_cpp_loop() -> None:
    from turbospark_app.chat.api import ChatMessage, TurnSettings
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.engine import GenerationConfig, drive_raw_completion

    path = _real_model_path()
    backend = load_backend(path, session_slots=1, max_context=1024, threads=2)
    try:
        settings = TurnSettings(generation=GenerationConfig(max_new_tokens=40))
        turn = backend.prepare_turn("golden", [ChatMessage("user", QUESTION)], settings)
        ids = list(turn.prompt_ids)
        assert ids[:3] == [1, 9690, 198]  # <|im_start|> system \n: the template's own system prompt
        result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                      lambda: False, None)
        eog = backend.tokenizer.eog_ids
        reply = result.kv_backed_token_ids[len(ids):]
        last = backend.pool.slots[0].producer
        assert list(last.mirror) == result.kv_backed_token_ids  # every fed token, the stop token not fed
    finally:
        backend.close()
    bare, gaps = _bare_llama_cpp(path, ids, 40, eog)
    # The app's reply: every id fed, plus the last one sampled (emitted, never fed)
    assert result.new_tokens == len(bare) or result.new_tokens == len(bare) + 1
    assert reply == bare[: len(reply)], (reply, bare)
    assert min(gaps) >= 0.0 and len(bare) >= 10
