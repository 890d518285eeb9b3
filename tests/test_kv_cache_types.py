"""KV cache types (f16, q8_0, q4_0 for K and V apart, llama-server's --cache-type-k / -v): what a
token weighs as llama.cpp stores it, flash attention on for a quantized V, a type the model's head
size cannot take refused with a clear error before llama.cpp sees it (a context, a load, the
command line), the choice's precedence, and the figures on the default model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.model.choice.common import LoadChoiceError
from turbospark_app.model.choice.kv_cache import (
    CacheTypeError,
    KVCacheTypes,
    cache_types_of,
    choose_cache_types,
)
from turbospark_app.model.llamacpp.context import LlamaCppContext
from turbospark_app.model.llamacpp.model import LlamaCppModel
from turbospark_app.model.llamacpp.producer import LlamaCppProducer

ALL = [KVCacheTypes(k, v) for k in ("f16", "q8_0", "q4_0") for v in ("f16", "q8_0", "q4_0")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[LlamaCppModel, dict]:
    path = tmp_path_factory.mktemp("kv") / "tiny.gguf"
    _, cfg = write_tiny_gguf(path)  # head size 64: two blocks of 32
    model = LlamaCppModel.open(path)
    yield model, cfg
    model.close()


@pytest.fixture(scope="module")
def odd_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kv48") / "heads48.gguf"
    write_tiny_gguf(path, head_dim=48, tokenizer={})  # head size 48: not whole blocks of 32
    return path


def _state_bytes(ctx: LlamaCppContext, n: int) -> int:
    producer = LlamaCppProducer(ctx, 0)
    producer.produce_chunk(list(range(3, 3 + n)), 0, np.zeros(ctx.n_vocab, np.float32))
    size = len(ctx.state_get(0))
    producer.reset()
    return size


@pytest.mark.parametrize("types", ALL, ids=lambda t: f"{t.k}-{t.v}")
def test_a_token_weighs_what_llama_cpp_stores(tiny, types: KVCacheTypes) -> None:
    model, cfg = tiny
    ctx = LlamaCppContext(model, n_ctx=256, n_seq_max=1, n_batch=64, threads=2, cache_types=types)
    try:
        per_token = (_state_bytes(ctx, 96) - _state_bytes(ctx, 32)) // 64
        head = cfg.get("head_dim") or 256 // 4
        # (each saved cell also carries its position, sequence count and sequence id: 12 bytes)
        assert per_token - 12 == types.bytes_per_token(2, 2, head, head)
        logits = np.zeros(ctx.n_vocab, np.float32)
        LlamaCppProducer(ctx, 0).produce_chunk([5, 6, 7], 0, logits)
        assert np.isfinite(logits).all() and logits.any()  # it decodes
    finally:
        ctx.close()


def test_q8_0_is_0_53x_and_q4_0_0_28x_of_f16() -> None:
    f16 = KVCacheTypes().bytes_per_token(30, 3, 64, 64)  # the default model's shape
    assert f16 == 23_040
    assert KVCacheTypes("q8_0", "q8_0").bytes_per_token(30, 3, 64, 64) / f16 == pytest.approx(0.53, abs=0.005)
    assert KVCacheTypes("q4_0", "q4_0").bytes_per_token(30, 3, 64, 64) / f16 == pytest.approx(0.28, abs=0.005)
    assert KVCacheTypes("q8_0", "f16").flash_attention is False
    assert KVCacheTypes("f16", "q4_0").flash_attention is True  # llama.cpp keeps a quantized V only so


def test_a_type_the_head_size_cannot_take_is_refused_before_llama_cpp(odd_heads: Path) -> None:
    from turbospark_app.chat.backend import load_backend

    model = LlamaCppModel.open(odd_heads)
    try:
        for types, name in ((KVCacheTypes("q8_0", "f16"), "K"), (KVCacheTypes("f16", "q4_0"), "V")):
            with pytest.raises(CacheTypeError, match=f"the {name} cache cannot be q\\d_0 for this model: "
                               f"its blocks hold 32 numbers and a {name} row of the model has 48; use f16"):
                LlamaCppContext(model, n_ctx=256, threads=2, cache_types=types)
        LlamaCppContext(model, n_ctx=256, threads=2).close()  # f16 runs
    finally:
        model.close()
    with pytest.raises(CacheTypeError, match="row of the model has 48"):
        load_backend(odd_heads, cache_types=KVCacheTypes("q8_0", "q8_0"))
    with pytest.raises(CacheTypeError, match="not a V cache type"):
        KVCacheTypes("f16", "q5_1")


def test_the_command_line_says_so_and_exits_2(odd_heads: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "turbospark_app", "chat", "--model", str(odd_heads),
                           "--prompt", "hi", "--max-new", "2", "-ctv", "q8_0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "the V cache cannot be q8_0 for this model" in proc.stderr and "Traceback" not in proc.stderr


def test_flag_wins_over_environment_over_setting() -> None:
    k, v = choose_cache_types("q4_0", None, "f16", "q8_0", environ={"TURBOSPARK_CACHE_TYPE_K": "q8_0"})
    assert (k.mode, k.source, v.mode, v.source) == ("q4_0", "--cache-type-k", "q8_0", "setting")
    k, v = choose_cache_types(None, None, None, None, environ={"TURBOSPARK_CACHE_TYPE_V": "Q8_0"})
    assert (k.mode, k.source, v.mode, v.source) == ("f16", "default", "q8_0", "TURBOSPARK_CACHE_TYPE_V")
    with pytest.raises(LoadChoiceError, match="TURBOSPARK_CACHE_TYPE_K='q2' is not a KV cache type"):
        choose_cache_types(environ={"TURBOSPARK_CACHE_TYPE_K": "q2"})
    from turbospark_app.cli.main import build_parser

    for command in ("chat", "serve"):
        args = build_parser().parse_args([command, "-ctk", "q8_0", "--cache-type-v", "q4_0"])
        assert cache_types_of(args, environ={}) == KVCacheTypes("q8_0", "q4_0")
    assert build_parser().parse_args(["--cache-type-k", "q8_0"]).cache_type_k == "q8_0"  # the app


@pytest.mark.real_model
def test_the_default_model_with_q8_0_reports_its_kv_bytes(default_model_path: Path) -> None:
    from turbospark_app.cli.serve_command import backend_factory

    # (`turbospark serve`'s loader: what its --cache-type-k / -v reach)
    backend = backend_factory(str(default_model_path), 1, None, max_context=512,
                              cache_types=KVCacheTypes("q8_0", "q8_0"))()
    try:
        info = backend.model_info()
        assert info["kv_cache"]["label"] == "q8_0" and info["kv_cache"]["flash_attention"]
        assert info["kv_bytes_per_token"] == 12_240 and info["kv_cache"]["bytes"] == 512 * 12_240
        assert backend.pool.slots[0].producer.kv_bytes_per_token == 12_240
    finally:
        backend.close()
    env = {**os.environ, "TURBOSPARK_CACHE_TYPE_K": "q4_0", "TURBOSPARK_CACHE_TYPE_V": "q4_0"}
    proc = subprocess.run([sys.executable, "-m", "turbospark_app", "chat", "--model", str(default_model_path),
                           "--prompt", "What is 2+2?", "--max-new", "8"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
