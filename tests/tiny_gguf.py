"""Write tiny random GGUF files of each family for the tests (not imported by the app).

`write_tiny_gguf(path, **options)` writes a 2-layer model whose tensors use many GGML types
(quantized with `gguf.quants.quantize` where it can, raw random blocks for the K-quants), a file
llama.cpp loads and runs, and returns `(weights, cfg)`: the float32/float16 tensors as written
(by name) and the hyper-parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# One tiny model per family beyond llama/qwen2, each exercising what makes it differ (sliding
# windows shorter than the tests' prompts, soft-caps, fused projections, NoPE layers).
FAMILY_VARIANTS: dict[str, dict[str, Any]] = {
    "qwen3": {"arch": "qwen3", "head_dim": 96},  # q/k norms; head_dim != dim / heads
    "granite": {"arch": "granite", "meta": {"logit_scale": 3.0, "residual_scale": 0.22,
                                            "embedding_scale": 12.0, "attention.scale": 0.0078125}},
    # sliding windows shorter than the test's 12 tokens, a local RoPE base, soft-caps
    "gemma3": {"arch": "gemma3", "n_layers": 3, "head_dim": 96, "rope_base": 1e6, "linear_scale": 4.0,
               "meta": {"attention.sliding_window": 4, "attention.sliding_window_pattern": 3,
                        "rope.freq_base_swa": 10000.0, "final_logit_softcapping": 4.0}},
    "gemma2": {"arch": "gemma2", "n_layers": 2,  # its head is token_embd: no output.weight
               "meta": {"attention.sliding_window": 5, "attn_logit_softcapping": 2.0,
                        "final_logit_softcapping": 6.0}},
    "olmo2": {"arch": "olmo2", "n_layers": 2, "tied": False,
              "meta": {"attention.sliding_window": 3, "attention.sliding_window_pattern": [True, False]}},
    "smollm3": {"arch": "smollm3", "n_layers": 4},  # layer 3 has no RoPE
    # fused q|k|v and gate|up, partial NeoX rotary, long LongRoPE factors (context > original), mscale
    "phi3": {"arch": "phi3", "rope_dims": 48, "context": 1024,
             "meta": {"rope.scaling.original_context_length": 256, "rope.scaling.attn_factor": 1.19}},
}

# Tensor types per layer: every type TurboSpark claims appears at least once.
LAYER_TYPES: list[dict[str, str]] = [
    {"attn_q": "Q4_K", "attn_k": "Q5_K", "attn_v": "Q6_K", "attn_output": "Q8_0",
     "ffn_gate": "Q4_0", "ffn_up": "Q4_1", "ffn_down": "Q5_0"},
    {"attn_q": "F16", "attn_k": "BF16", "attn_v": "Q5_1", "attn_output": "F32",
     "ffn_gate": "Q6_K", "ffn_up": "Q5_K", "ffn_down": "Q4_K"},
]
_K_D_OFFSETS = {"Q4_K": 0, "Q5_K": 0, "Q6_K": 208}  # byte offset of the f16 `d` of a block


def encode_tensor(values: np.ndarray, qtype: str, rng: np.random.Generator) -> tuple[np.ndarray, Any]:
    """(array to hand to GGUFWriter.add_tensor, raw_dtype) for float `values` (rows, cols).

    K-quants have no quantizer in gguf-py: their blocks are random bytes with small scales
    (the values then come from the reference dequantizer, not from `values`).
    """
    if qtype == "F32":
        return values.astype(np.float32), None
    if qtype == "F16":
        return values.astype(np.float16), None
    qt = Q[qtype]
    if qtype in _K_D_OFFSETS:
        block, size = gguf.GGML_QUANT_SIZES[qt]
        n_blocks = values.size // block
        raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
        off = _K_D_OFFSETS[qtype]
        d = np.full(n_blocks, 1e-5 if qtype == "Q6_K" else 1e-4, np.float16)
        raw[:, off : off + 2] = d.view(np.uint8).reshape(-1, 2)
        if qtype != "Q6_K":  # dmin
            raw[:, 2:4] = np.full(n_blocks, 5e-5, np.float16).view(np.uint8).reshape(-1, 2)
        return raw.reshape(values.shape[0], -1), qt
    try:
        return gguf.quants.quantize(values.astype(np.float32), qt), qt
    except NotImplementedError:  # a type TurboSpark does not claim (error tests): random blocks
        block, size = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(values.size // block, size), dtype=np.uint8)
        return raw.reshape(values.shape[0], -1), qt


def write_tiny_gguf(
    path: Path,
    *,
    arch: str = "llama",
    seed: int = 0,
    n_layers: int = 2,
    dim: int = 256,
    n_heads: int = 4,
    n_kv: int = 2,
    ffn: int = 512,
    vocab: int = 300,
    context: int = 1024,
    rope_base: float = 10000.0,
    rope_dims: int | None = None,
    linear_scale: float | None = None,
    rope_freqs: bool = False,
    tied: bool = True,
    eps: float = 1e-5,
    layer_types: list[dict[str, str]] | None = None,
    skip_tensor: str | None = None,
    skip_metadata: str | None = None,
    embd_type: str = "Q8_0",
    tokenizer: dict[str, Any] | None | bool = None,
    head_dim: int | None = None,
    meta: dict[str, Any] | None = None,
    wrong_shape: dict[str, tuple[int, ...]] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Write the GGUF; return (reference float64 weights by tensor name, cfg).

    `tokenizer`: the byte-level BPE vocabulary to add (`add_tiny_tokenizer` keywords; None or {}
    for the defaults: `vocab` tokens, ChatML special tokens, a ChatML template; False for none,
    a file llama.cpp refuses)."""
    rng = np.random.default_rng(seed)
    explicit_head_dim = head_dim is not None  # written as key_length (qwen3: != dim / heads)
    head_dim = head_dim or dim // n_heads
    rope_dims = rope_dims or head_dim
    layer_types = layer_types or LAYER_TYPES
    w = gguf.GGUFWriter(str(path), arch)
    common = {
        "block_count": lambda: w.add_block_count(n_layers),
        "context_length": lambda: w.add_context_length(context),
        "embedding_length": lambda: w.add_embedding_length(dim),
        "feed_forward_length": lambda: w.add_feed_forward_length(ffn),
        "head_count": lambda: w.add_head_count(n_heads),
        "head_count_kv": lambda: w.add_head_count_kv(n_kv),
        "layer_norm_rms_epsilon": lambda: w.add_layer_norm_rms_eps(eps),
        "rope_freq_base": lambda: w.add_rope_freq_base(rope_base),
        "rope_dimension_count": lambda: w.add_rope_dimension_count(rope_dims),
    }
    if explicit_head_dim:
        common["key_length"] = lambda: w.add_key_length(head_dim)
        common["value_length"] = lambda: w.add_value_length(head_dim)
    for key, add in common.items():
        if key != skip_metadata:
            add()
    for key, value in (meta or {}).items():  # the family's own keys (scales, windows, caps)
        if isinstance(value, list):
            w.add_array(f"{arch}.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{arch}.{key}", value)
        else:
            w.add_float32(f"{arch}.{key}", value)
    if linear_scale is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(linear_scale)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if tokenizer is not False:
        add_tiny_tokenizer(w, **{"n_tokens": vocab, **(tokenizer or {})})
    weights: dict[str, np.ndarray] = {}

    def add(name: str, values: np.ndarray, qtype: str) -> None:
        if name == skip_tensor:
            return
        if wrong_shape and name in wrong_shape:  # a hostile-file case: the tensor at another shape
            values = rng.standard_normal(wrong_shape[name])
        arr, raw_dtype = encode_tensor(values, qtype, rng)
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
        if qtype in ("F32", "F16"):
            weights[name] = arr.astype(np.float64)

    def norm_vec() -> np.ndarray:
        return 1.0 + 0.1 * rng.standard_normal(dim)

    # Gemma multiplies embeddings by sqrt(dim): store them that much smaller, as real files do
    embd_std = 0.5 / np.sqrt(dim) if arch in ("gemma2", "gemma3") else 0.5
    add("token_embd.weight", rng.standard_normal((vocab, dim)) * embd_std, embd_type)
    add("output_norm.weight", norm_vec(), "F32")
    if not tied:
        add("output.weight", rng.standard_normal((vocab, dim)) * 0.05, "F16")
    if rope_freqs:
        add("rope_freqs.weight", 1.0 + rng.random(rope_dims // 2) * 3.0, "F32")
    if arch == "phi3":  # LongRoPE: both factor sets; the context picks one
        add("rope_factors_long.weight", 1.0 + rng.random(rope_dims // 2) * 3.0, "F32")
        add("rope_factors_short.weight", 1.0 + rng.random(rope_dims // 2) * 0.5, "F32")
    q_dim, kv_dim = n_heads * head_dim, n_kv * head_dim
    shapes = {"attn_q": (q_dim, dim), "attn_k": (kv_dim, dim), "attn_v": (kv_dim, dim),
              "attn_output": (dim, q_dim), "ffn_gate": (ffn, dim), "ffn_up": (ffn, dim),
              "ffn_down": (dim, ffn)}
    if arch == "phi3":  # fused q|k|v and gate|up, each in the type its first part would have
        shapes = {"attn_qkv": (q_dim + 2 * kv_dim, dim), "attn_output": (dim, q_dim),
                  "ffn_up": (2 * ffn, dim), "ffn_down": (dim, ffn)}
    for layer in range(n_layers):
        p = f"blk.{layer}."
        types = layer_types[layer % len(layer_types)]
        if arch != "olmo2":  # OLMo 2 has no pre-norms
            add(p + "attn_norm.weight", norm_vec(), "F32")
            add(p + "ffn_norm.weight", norm_vec(), "F32")
        if arch in ("gemma2", "gemma3", "olmo2"):  # norms on each branch's output
            add(p + "post_attention_norm.weight", norm_vec(), "F32")
            add(p + "post_ffw_norm.weight", norm_vec(), "F32")
        if arch == "olmo2":  # q/k norms over the whole projection
            add(p + "attn_q_norm.weight", 1.0 + 0.3 * rng.standard_normal(q_dim), "F32")
            add(p + "attn_k_norm.weight", 1.0 + 0.3 * rng.standard_normal(kv_dim), "F32")
        for kind, shape in shapes.items():
            qtype = types.get(kind) or types["attn_q" if kind == "attn_qkv" else "ffn_gate"]
            add(f"{p}{kind}.weight", rng.standard_normal(shape) * 0.06, qtype)
        if arch in ("qwen3", "gemma3"):  # per-head q/k norms
            add(p + "attn_q_norm.weight", 1.0 + 0.3 * rng.standard_normal(head_dim), "F32")
            add(p + "attn_k_norm.weight", 1.0 + 0.3 * rng.standard_normal(head_dim), "F32")
        if arch == "qwen2":
            for kind, n in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
                add(f"{p}{kind}.bias", rng.standard_normal(n) * 0.1, "F32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cfg = {"arch": arch, "n_layers": n_layers, "n_heads": n_heads, "n_kv": n_kv,
           "head_dim": head_dim, "eps": eps, "rope_base": rope_base, "rope_dims": rope_dims,
           "linear_scale": linear_scale or 1.0, "vocab": vocab, "context": context,
           "meta": dict(meta or {}), "dim": dim}
    return weights, cfg


TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_MERGES = ["\u0120 t", "h e", "\u0120t he"]
TINY_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_chars() -> list[str]:
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra, out = 0, []
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def add_tiny_tokenizer(
    w: gguf.GGUFWriter,
    *,
    n_tokens: int,
    bos: int | None = None,
    eos: int = 2,
    eot: int | None = None,
    merges: list[str] | None = None,
    template: str | None = TINY_TEMPLATE,
    specials: list[str] | None = None,
) -> None:
    """A gpt2 (byte-level BPE) vocabulary of `n_tokens` tokens: specials, the 256 byte tokens,
    the merged tokens of TINY_MERGES, then unused padding tokens."""
    specials = TINY_SPECIALS if specials is None else specials
    tokens = [*specials, *_byte_chars(), "\u0120t", "he", "\u0120the"]
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    while len(tokens) < n_tokens:
        tokens.append(f"<unused{len(tokens)}>")
        types.append(5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(TINY_MERGES if merges is None else merges)
    w.add_eos_token_id(eos)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eot is not None:
        w.add_eot_token_id(eot)
    w.add_add_bos_token(False)
    if template is not None:
        w.add_chat_template(template)


def write_tokenizer_gguf(
    path: Path,
    *,
    model: str,
    tokens: list[str],
    types: list[int],
    pre: str | None = None,
    merges: list[str] | None = None,
    scores: list[float] | None = None,
    ids: dict[str, int] | None = None,
    add_bos: bool | None = None,
    add_space_prefix: bool | None = None,
    name: str | None = None,
    template: str | None = None,
    extra_ids: dict[str, int] | None = None,
) -> Path:
    """A GGUF holding only tokenizer metadata (`ids`: bos / eos / eot / eom / unknown -> id;
    `extra_ids`: other tokenizer.ggml.<key> ids, e.g. fim_pad_token_id); a key left as None is
    not written, so the reader's defaults apply."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    if name is not None:
        w.add_name(name)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    adders = {"bos": w.add_bos_token_id, "eos": w.add_eos_token_id, "eot": w.add_eot_token_id,
              "eom": w.add_eom_token_id, "unknown": w.add_unk_token_id}
    for kind, value in (ids or {}).items():
        adders[kind](value)
    for key, value in (extra_ids or {}).items():
        w.add_uint32(f"tokenizer.ggml.{key}", value)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
