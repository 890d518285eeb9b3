"""The compact model (GGUF blocks through ONNX Runtime) against the float32 reference path, on
tiny random GGUFs written by the test: exact with float32 activations, close with int8 ones;
float32 outputs; weights within 1.3x of the GGUF's bytes; cached; Stop between layers."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from pathlib import Path

import gguf
import numpy as np
import pytest
from tiny_gguf import FAMILY_VARIANTS, write_tiny_gguf

from turbospark_app.engine import (
    GenerationConfig,
    StopEvent,
    StopReason,
    run_raw_completion_chunked_cancellable,
)
from turbospark_app.model.compact.forward import CompactLlamaModel
from turbospark_app.model.compact.weights import embed_rows, load_compact
from turbospark_app.model.producer import LlamaProducer
from turbospark_app.model.reference import weights as weights_mod
from turbospark_app.model.reference.forward import (
    ForwardCancelled,
    LlamaModel,
    weights_mode,
)

TOKENS = [5, 17, 299, 0, 42, 42, 7, 150, 3, 88, 201, 64]
VARIANTS = {
    "llama": {},
    "llama-untied-partial-rope": {"tied": False, "rope_dims": 32, "rope_freqs": True,
                                  "linear_scale": 2.0, "n_kv": 1},
    "qwen2": {"arch": "qwen2", "n_kv": 4},
    **FAMILY_VARIANTS,
}
# int8 activations lose ~1% of the logits' range. OLMo 2 reads its matmul inputs unnormalized (no
# pre-norms) and, like Gemma 2, renormalizes each branch's output: ~4-5% on these random models
# (Gemma 2's tied head also gives them the smallest logits). check_peer.py measures the same
# int8 numerics against llama.cpp's on real-shaped files.
INT8_BOUND = {"olmo2": 0.08, "gemma2": 0.06}
BLOCK_LAYERS = [  # only types with a block form
    {"attn_q": "Q4_0", "attn_k": "Q4_0", "attn_v": "Q4_0", "attn_output": "Q4_1",
     "ffn_gate": "Q4_K", "ffn_up": "Q4_K", "ffn_down": "Q8_0"},
]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "tiny.gguf"
    write_tiny_gguf(path, seed=len(request.param), **VARIANTS[request.param])
    f32 = LlamaModel.from_gguf(path, folder / "cache", weights="f32")
    compact = LlamaModel.from_gguf(path, folder / "cache", weights="compact")
    return path, folder, f32, compact, INT8_BOUND.get(request.param, 0.03)


def _positions(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    cache = model.new_cache()
    return np.stack([model.forward([t], cache).copy() for t in tokens])


def test_compact_is_the_default_and_close_to_float32(pair) -> None:
    _, _, f32, compact, bound = pair
    assert isinstance(compact, CompactLlamaModel) and isinstance(f32, LlamaModel)
    ref, got = _positions(f32, TOKENS), _positions(compact, TOKENS)
    # int8 activations per block of 32: ~1% of the logits' range, same argmax nearly always
    scale = np.abs(ref).max(axis=1, keepdims=True)
    assert (np.abs(got - ref) / scale).max() < bound
    assert np.mean(ref.argmax(1) == got.argmax(1)) >= 0.9
    one_chunk = compact.forward(TOKENS, compact.new_cache())
    assert (np.abs(one_chunk - ref[-1]) / scale[-1]).max() < bound


@pytest.mark.parametrize("kernels", ["exact", "exact-prompt"])
def test_exact_split_reproduces_float32(pair, kernels: str) -> None:
    """The exact split: every block type, the re-centred minimums, the NeoX row permutation,
    the norms on activations and the in-graph attention reproduce the float32 path, for
    chunks (both modes) and single tokens (exact mode)."""
    path, folder, f32, _, bound = pair
    config, w = load_compact(path, folder / "cache")
    model = CompactLlamaModel(config, w, kernels)
    ref = _positions(f32, TOKENS)
    scale = np.abs(ref).max()
    chunked = model.new_cache()
    first = model.forward(TOKENS[:5], chunked)
    np.testing.assert_allclose(first, ref[4], atol=2e-4 * scale)
    np.testing.assert_allclose(model.forward(TOKENS[5:], chunked), ref[-1], atol=2e-4 * scale)
    if kernels == "exact":
        np.testing.assert_allclose(_positions(model, TOKENS), ref, atol=2e-4 * scale)
    else:  # one-token steps: plain int8 activations, measurably less exact
        err = np.abs(_positions(model, TOKENS) - ref).max()
        assert 2e-4 * scale < err < bound * scale


def test_kernel_mode_from_the_environment(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    path, folder, _, _, _ = pair
    config, w = load_compact(path, folder / "cache")
    monkeypatch.setenv("TURBOSPARK_KERNELS", "int8")
    assert CompactLlamaModel(config, w).kernels == "int8"
    monkeypatch.setenv("TURBOSPARK_KERNELS", "fast")
    with pytest.raises(ValueError, match="TURBOSPARK_KERNELS"):
        CompactLlamaModel(config, w)


def test_float32_on_the_hot_path(pair) -> None:
    _, _, _, compact, _ = pair
    w = compact.weights
    assert embed_rows(w.embd, np.array([1, 2])).dtype == np.float32
    for layer in w.layers:
        for m in layer.qkv + layer.o + layer.gate_up + layer.down:
            arrays = [getattr(m, n, None) for n in ("scales", "mins", "weight")]
            assert all(a.dtype == np.float32 for a in arrays if a is not None)
    session = compact._session
    types = {a.name: a.type for a in session.get_inputs() + session.get_outputs()}
    assert {t for n, t in types.items() if n not in ("seqlens_k", "total", "exact", "rows")} == {"tensor(float)"}
    cache = compact.new_cache()
    assert compact.forward(TOKENS[:3], cache).dtype == np.float32
    assert compact.forward([4], cache).dtype == np.float32
    assert cache.dtype == np.float32


def test_block_weights_stay_within_1_3x_of_the_gguf(tmp_path: Path) -> None:
    path = tmp_path / "blocks.gguf"
    write_tiny_gguf(path, layer_types=BLOCK_LAYERS, n_layers=2)
    reader = gguf.GGUFReader(str(path))
    gguf_bytes = sum(int(t.n_bytes) for t in reader.tensors if len(t.shape) == 2)
    _, w = load_compact(path, tmp_path / "cache")
    mats = [m for layer in w.layers for m in layer.qkv + layer.o + layer.gate_up + layer.down] + w.embd
    ours = sum(a.nbytes for m in mats for a in (m.packed, m.scales, m.mins) if a is not None)
    assert ours <= 1.3 * gguf_bytes, (ours, gguf_bytes)


def test_compact_cache_is_warm_and_feeds_onnxruntime_from_its_files(
    pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, folder, _, _, _ = pair

    def no_reader(path: object) -> None:
        raise AssertionError("a warm load must not parse the GGUF")

    monkeypatch.setattr(weights_mod, "open_gguf", no_reader)
    config, w = load_compact(path, folder / "cache")
    assert w.origin == "cache" and w.cache_path is not None and "-compact-" in w.cache_path.name
    packed = w.layers[0].gate_up[0]
    where = w.external_ref(packed.scales)
    assert where is not None and (w.cache_path / where[0]).is_file() and where[1] > 0
    assert w.external_ref(np.zeros(3)) is None


def test_weight_mode_from_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURBOSPARK_WEIGHTS", raising=False)
    assert weights_mode() == "compact"
    monkeypatch.setenv("TURBOSPARK_WEIGHTS", "F32")
    assert weights_mode() == "f32" and weights_mode("compact") == "compact"
    with pytest.raises(ValueError, match="unknown weight mode"):
        weights_mode("int3")


def _cancel_after(polls: int):
    count = [0]

    def cancel() -> bool:
        count[0] += 1
        return count[0] > polls

    return cancel, count


@pytest.mark.parametrize("kind", ["compact", "f32"])
def test_stop_inside_a_chunk_commits_nothing_of_it(pair, kind: str) -> None:
    _, _, f32, compact, _ = pair
    model = compact if kind == "compact" else f32
    cache = model.new_cache()
    model.forward(TOKENS[:4], cache, want_logits=False)
    # f32: polled before each layer, stops before the second; compact: the first poll is
    # before the run, the next ones (every 2 ms) from a watcher while a 900-token chunk runs.
    cancel, count = _cancel_after(1)
    long_chunk = (TOKENS * 80)[:900]
    with pytest.raises(ForwardCancelled):
        model.forward(long_chunk, cache, cancel=cancel)
    assert cache.offset == 4 and count[0] == 2
    # The cache is intact: continuing gives the same logits as a fresh run.
    np.testing.assert_array_equal(
        model.forward(TOKENS[4:], cache), model.forward(TOKENS[4:], _prefilled(model, TOKENS[:4]))
    )

    p = LlamaProducer(model)
    p.produce_chunk(TOKENS[:4], 0, None)
    cancel, _ = _cancel_after(0)
    assert p.produce_chunk_cancellable(TOKENS[4:], 4, None, cancel) is False
    assert p.mirror == tuple(TOKENS[:4]) and p.cache.offset == 4


class _SetOnceListening(StopEvent):
    """Stop pressed the moment the run has registered its listener (and before ONNX Runtime
    runs): deterministic, where a timer might fire after a short chunk had already ended."""

    @contextmanager
    def listening(self, on_set):
        with super().listening(on_set):
            self.set()
            yield


def test_a_stop_event_terminates_the_chunk_itself_with_no_watcher_thread(
        pair, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, _, compact, _ = pair
    cache = compact.new_cache()
    compact.forward(TOKENS[:4], cache, want_logits=False)
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    stop = _SetOnceListening()
    with pytest.raises(ForwardCancelled):
        compact.forward((TOKENS * 80)[:900], cache, cancel=stop.is_set)
    assert cache.offset == 4 and started == []  # set() ended the run; no poller was started


def _prefilled(model: LlamaModel, tokens: list[int]):
    cache = model.new_cache()
    model.forward(tokens, cache, want_logits=False)
    return cache


def test_engine_stop_inside_a_chunk_reports_only_committed_tokens(pair) -> None:
    from fakes import ByteTokenizer

    _, _, _, compact, _ = pair
    producer = LlamaProducer(compact)
    # Stop once the first chunk is committed: the second chunk is refused before it runs.
    def cancel() -> bool:
        return producer.cache.offset >= 8

    prompt = (TOKENS * 3)[:30]
    result = run_raw_completion_chunked_cancellable(
        producer, ByteTokenizer(), prompt, GenerationConfig(max_new_tokens=4), 256,
        compact.vocab_size, cancel, chunk_size=8,
    )
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 0
    assert result.kv_position == 8 == producer.cache.offset
    assert result.kv_backed_token_ids == prompt[:8] == list(producer.mirror)


def test_the_session_is_saved_once_then_mapped_and_rebuilt_when_damaged(tmp_path: Path,
                                                                       isolated_dirs) -> None:
    from turbospark_app.model.weight_cache import budget

    budget.set_session_policy("current")  # (the default saves none)
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, seed=3)
    cache = tmp_path / "cache"
    first = LlamaModel.from_gguf(path, cache, weights="compact")
    second = LlamaModel.from_gguf(path, cache, weights="compact")
    assert (first.session_origin, second.session_origin) == ("saved", "mapped")
    expected = first.forward(TOKENS, first.new_cache())
    np.testing.assert_array_equal(second.forward(TOKENS, second.new_cache()), expected)
    entry = second.weights.cache_path
    del first, second  # their sessions map the saved file: let go before damaging it
    gc.collect()
    (saved,) = entry.glob("ort-*")
    with open(saved / "model.onnx.data", "r+b") as fh:  # truncated: the manifest disagrees
        fh.truncate(100)
    third = LlamaModel.from_gguf(path, cache, weights="compact")
    assert third.session_origin == "saved"
    np.testing.assert_array_equal(third.forward(TOKENS, third.new_cache()), expected)
    # Another kernel mode is another saved session, beside the first (in use by `third`, so
    # it stays even under the policy "current": the current mode's session only).
    LlamaModel.from_gguf(path, cache, weights="compact", kernels="int8")
    assert len(list(entry.glob("ort-*"))) == 2


def test_a_session_that_cannot_be_saved_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   isolated_dirs) -> None:
    from turbospark_app.model.compact import session_cache as ort_cache
    from turbospark_app.model.weight_cache import budget

    budget.set_session_policy("current")  # (the default saves none)
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, seed=4)
    load_compact(path, tmp_path / "cache")  # the weight cache itself is written

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ort_cache.os, "replace", refuse)
    model = LlamaModel.from_gguf(path, tmp_path / "cache", weights="compact")
    assert model.session_origin == "built"
    assert not list(model.weights.cache_path.glob("ort-*")) and not list(model.weights.cache_path.glob(".ort-tmp-*"))
    monkeypatch.undo()
    mapped = LlamaModel.from_gguf(path, tmp_path / "cache", weights="compact")
    LlamaModel.from_gguf(path, tmp_path / "cache", weights="compact")
    np.testing.assert_array_equal(model.forward(TOKENS, model.new_cache()), mapped.forward(TOKENS, mapped.new_cache()))
