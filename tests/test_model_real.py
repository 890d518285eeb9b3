"""Golden test on the real default model (SmolLM2-135M-Instruct Q4_1): greedy reply mentions Paris."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


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


@pytest.mark.real_model
@pytest.mark.parametrize("weights", ["compact", "f32"])
def test_greedy_reply_mentions_paris(weights: str) -> None:
    from turbospark_app.model.producer import LlamaProducer
    from turbospark_app.model.reference.forward import LlamaModel

    tokenizer_mod = pytest.importorskip("turbospark_app.model.text.tokenizer")
    path = _real_model_path()
    model = LlamaModel.from_gguf(path, weights=weights)  # the app's weight cache (TURBOSPARK_CACHE_DIR or per-user)
    tokenizer = tokenizer_mod.GGUFTokenizer.from_gguf(path)
    ids = tokenizer.encode(PROMPT)
    assert ids[:3] == [1, 9690, 198]  # <|im_start|> system \n

    producer = LlamaProducer(model)
    logits = np.empty(model.config.vocab_size, np.float32)
    # The app's default flow: the prompt as one prefill chunk, whose last logits pick the first
    # token. (Compact weights prefill exactly; decode steps use int8 activations, like
    # llama.cpp: fed alone through a decode step, the last prompt token's top two, "The" and
    # "L'", are 0.08 apart and swap there too, as they do in llama.cpp on this file.)
    producer.produce_chunk(ids, 0, logits)
    stop = set(tokenizer.end_of_turn_ids) | set(tokenizer.eos_ids)
    reply: list[int] = []
    for _ in range(40):
        token = int(np.argmax(logits))
        if token in stop:
            break
        reply.append(token)
        producer.produce(token, len(ids) + len(reply) - 1, logits)
    text = tokenizer.decode(reply)
    assert "Paris" in text, text
    assert producer.mirror == tuple(ids + reply)  # every fed token, the stop token not fed


_QUESTIONS = ("What is the capital of France?", "Write a haiku about the sea.", "What is 17 times 23?",
              "How do I reverse a list in Python?", "Why is the sky blue?", "hi")
_RULES = " ".join(f"Rule {i}: answer clearly, be kind and keep replies short." for i in range(20))


@pytest.mark.real_model
def test_first_reply_token_is_float32s_with_the_default_kernels() -> None:
    """What the default kernels (exact-prompt) keep exact: every prompt row of every chunk goes
    through the exact split, so the logits that pick the first reply token are float32's to
    ~2e-4 of their range (int8 activations anywhere in the prompt: ~3e-2), for prompts of one
    chunk and of several (the engine's 128-token chunks)."""
    from turbospark_app.engine.foundation import DEFAULT_PREFILL_CHUNK
    from turbospark_app.model.compact.forward import CompactLlamaModel
    from turbospark_app.model.reference.forward import LlamaModel

    tokenizer_mod = pytest.importorskip("turbospark_app.model.text.tokenizer")
    path = _real_model_path()
    f32 = LlamaModel.from_gguf(path, weights="f32")
    compact = LlamaModel.from_gguf(path, weights="compact", kernels="exact-prompt")
    assert isinstance(compact, CompactLlamaModel)
    tokenizer = tokenizer_mod.GGUFTokenizer.from_gguf(path)
    prompts = [PROMPT.replace("What is the capital of France?", q) for q in _QUESTIONS]
    prompts.append(PROMPT.replace("Hugging Face", "Hugging Face. " + _RULES))  # > 2 chunks
    lengths = []
    for text in prompts:
        ids = tokenizer.encode(text)
        lengths.append(len(ids))
        ref = f32.forward(ids, f32.new_cache())
        cache = compact.new_cache()
        for start in range(0, len(ids), DEFAULT_PREFILL_CHUNK):
            last = start + DEFAULT_PREFILL_CHUNK >= len(ids)
            got = compact.forward(ids[start:start + DEFAULT_PREFILL_CHUNK], cache, last, prompt=True)
        assert got is not None and int(np.argmax(got)) == int(np.argmax(ref)), text
        assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max(), text
    assert max(lengths) > 2 * DEFAULT_PREFILL_CHUNK
