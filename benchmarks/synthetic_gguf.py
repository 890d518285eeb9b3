"""A synthetic GGUF with Llama-3.2-1B's shape and random quantized weights (benchmarks only).

    python benchmarks/synthetic_gguf.py OUT.gguf [--type Q4_0|Q4_K|Q6_K|Q4_K_M] [--layers 16] [--arch qwen3]

`--arch` writes a ~0.5-1B model of that family instead (`FAMILY_SHAPES`: its real head layout,
its own tensors and keys: q/k norms, post norms, fused q|k|v and gate|up, sliding windows,
soft-caps, scales), with a 32k vocabulary so every family's head costs the same; `--layers`
shortens it, and a row that is not whole 256-blocks (Gemma 3's 1152 columns) takes the type
llama.cpp's quantizer falls back to (Q4_K -> Q5_0, Q6_K -> Q8_0).

16 layers, dim 2048, ffn 8192, 32 query / 8 KV heads (head_dim 64), vocab 128256, tied
embeddings. Every matrix is random blocks of `--type` (Q4_K_M: Q4_K with Q6_K tensors where
llama.cpp's Q4_K_M puts them, `mix_type`) with small float16 scales (its logits mean
nothing; its speed and memory are real); norms are ones. A byte-level SentencePiece-style
vocabulary (`<unk>`, `<s>`, `</s>`, 256 byte tokens, fillers) lets llama.cpp load the file, and a
plain-text chat template lets chat requests run on it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

SHAPE = {"n_layers": 16, "dim": 2048, "ffn": 8192, "n_heads": 32, "n_kv": 8, "vocab": 128256}
_F16_FIELDS = {"Q4_0": ((0, 2e-3),), "Q4_K": ((0, 2e-4), (2, 1e-4)), "Q6_K": ((208, 2e-5),),
               "Q5_0": ((0, 1e-3),), "Q8_0": ((0, 1e-4),)}
# What llama.cpp's quantizer writes instead of a K-quant when a row is not whole 256-blocks
# (Gemma 3 1B's 1152 columns): llama-quant.cpp's fallback types.
_K_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}
MIXES = {"Q4_K_M": ("Q4_K", "Q6_K")}  # a mix: (most tensors, the tensors llama.cpp gives more bits)


def mix_type(qtype: str, tensor: str, layer: int, n_layers: int) -> str:
    """The type of one tensor in `qtype` (a plain type, or a mix as llama.cpp's Q4_K_M makes it:
    Q6_K for the embedding and for attn_v / ffn_down of the first and last eighth of the layers
    and every third one between; Q4_K for the rest)."""
    if qtype not in MIXES:
        return qtype
    base, more = MIXES[qtype]
    if tensor == "token_embd":
        return more
    eighth = n_layers // 8
    more_bits = layer < eighth or layer >= n_layers - eighth or (layer - eighth) % 3 == 2
    return more if tensor in ("attn_v", "ffn_down") and more_bits else base


def random_blocks(rows: int, cols: int, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes per row) uint8: random quants, fixed small scales."""
    block, size = gguf.GGML_QUANT_SIZES[Q[qtype]]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for at, value in _F16_FIELDS[qtype]:
        raw[..., at : at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return raw.reshape(rows, -1)


def _add_vocab(w: gguf.GGUFWriter, vocab: int, specials: tuple[str, ...] = ()) -> None:
    """A byte-level SentencePiece-style vocabulary llama.cpp can load (plus `specials`, control
    tokens a family's vocabulary loader looks up: Phi-3's <|end|>, ...)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + list(specials)
    tokens += [f"tok{i}" for i in range(vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.CONTROL] * len(specials)
    types += [gguf.TokenType.NORMAL] * (vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)  # chat requests render (as plain text: no special tokens)


# A plain template, so chat benchmarks (several streams, conversations) run on these files too.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def write_synthetic(path: Path, qtype: str = "Q4_0", n_layers: int | None = None, seed: int = 0) -> Path:
    """Write the GGUF (see the module docstring) and return its path."""
    s = dict(SHAPE, n_layers=n_layers or SHAPE["n_layers"])
    rng = np.random.default_rng(seed)
    dim, ffn, vocab = s["dim"], s["ffn"], s["vocab"]
    head_dim = dim // s["n_heads"]
    kv_dim = s["n_kv"] * head_dim
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"synthetic-llama-1b-{qtype}")
    w.add_block_count(s["n_layers"])
    w.add_context_length(8192)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(s["n_heads"])
    w.add_head_count_kv(s["n_kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if qtype == "Q4_0" else gguf.LlamaFileType.MOSTLY_Q4_K_M)
    _add_vocab(w, vocab)
    n = s["n_layers"]
    embd = mix_type(qtype, "token_embd", 0, n)
    w.add_tensor("token_embd.weight", random_blocks(vocab, dim, embd, rng), raw_dtype=Q[embd])
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    shapes = {"attn_q": (dim, dim), "attn_k": (kv_dim, dim), "attn_v": (kv_dim, dim),
              "attn_output": (dim, dim), "ffn_gate": (ffn, dim), "ffn_up": (ffn, dim),
              "ffn_down": (dim, ffn)}
    for i in range(s["n_layers"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, np.float32))
        for kind, (rows, cols) in shapes.items():
            t = mix_type(qtype, kind, i, n)
            w.add_tensor(f"blk.{i}.{kind}.weight", random_blocks(rows, cols, t, rng), raw_dtype=Q[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ~0.5-1B shapes after a real model of each family (vocab 32000 for all; head_dim as the family's).
FAMILY_SHAPES: dict[str, dict] = {
    "qwen3": {"n_layers": 28, "dim": 1024, "ffn": 3072, "n_heads": 16, "n_kv": 8, "head_dim": 128},
    "gemma3": {"n_layers": 26, "dim": 1152, "ffn": 6912, "n_heads": 4, "n_kv": 1, "head_dim": 256},
    "gemma2": {"n_layers": 16, "dim": 1536, "ffn": 6144, "n_heads": 8, "n_kv": 4, "head_dim": 256},
    "phi3": {"n_layers": 16, "dim": 2048, "ffn": 5632, "n_heads": 32, "n_kv": 8, "head_dim": 64},
    "granite": {"n_layers": 16, "dim": 2048, "ffn": 8192, "n_heads": 32, "n_kv": 8, "head_dim": 64},
    "smollm3": {"n_layers": 16, "dim": 2048, "ffn": 8192, "n_heads": 32, "n_kv": 8, "head_dim": 64},
    "olmo2": {"n_layers": 16, "dim": 2048, "ffn": 8192, "n_heads": 16, "n_kv": 16, "head_dim": 128},
}
_FAMILY_KEYS: dict[str, dict] = {  # the family's own metadata (plus what each reads by default)
    "qwen3": {"rope.freq_base": 1e6},
    "gemma3": {"rope.freq_base": 1e6, "attention.sliding_window": 512, "rope.freq_base_swa": 1e4},
    "gemma2": {"attention.sliding_window": 512, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0},
    "phi3": {"rope.scaling.original_context_length": 4096, "rope.scaling.attn_factor": 1.19},
    "granite": {"logit_scale": 8.0, "residual_scale": 0.22, "embedding_scale": 12.0,
                "attention.scale": 0.015625},
    "smollm3": {},
    "olmo2": {},
}


def write_family_synthetic(path: Path, arch: str, qtype: str = "Q4_0", seed: int = 0,
                           layers: int | None = None) -> Path:
    """A ~0.5-1B `arch` model with random `qtype` blocks (a mix such as Q4_K_M as `mix_type`
    says; see the module docstring); `layers` instead of the family's count."""
    s = dict(FAMILY_SHAPES[arch])
    if layers is not None:
        s["n_layers"] = layers
    rng = np.random.default_rng(seed)
    dim, ffn, hd, vocab = s["dim"], s["ffn"], s["head_dim"], 32000
    q_dim, kv_dim = s["n_heads"] * hd, s["n_kv"] * hd
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"synthetic-{arch}-{qtype}")
    w.add_block_count(s["n_layers"])
    w.add_context_length(8192 if arch == "phi3" else 4096)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(s["n_heads"])
    w.add_head_count_kv(s["n_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(hd * 3 // 4 if arch == "phi3" else hd)  # Phi-4-mini: partial
    keys = dict(_FAMILY_KEYS[arch])
    w.add_rope_freq_base(keys.pop("rope.freq_base", 10000.0))
    for key, value in keys.items():
        (w.add_uint32 if isinstance(value, int) else w.add_float32)(f"{arch}.{key}", value)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if qtype == "Q4_0" else gguf.LlamaFileType.MOSTLY_Q4_K_M)
    phi_specials = ("<|endoftext|>", "<|assistant|>", "<|end|>", "<|system|>", "<|user|>")
    _add_vocab(w, vocab, phi_specials if arch == "phi3" else ())
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731

    def blocks(prefix: str, kind: str, rows: int, cols: int, layer: int = 0) -> None:
        t = mix_type(qtype, kind, layer, s["n_layers"])
        if cols % 256 and t in _K_FALLBACK:
            t = _K_FALLBACK[t]
        w.add_tensor(f"{prefix}{kind}.weight", random_blocks(rows, cols, t, rng), raw_dtype=Q[t])

    blocks("", "token_embd", vocab, dim)
    w.add_tensor("output_norm.weight", ones(dim))
    if arch == "olmo2":  # its head is never tied
        blocks("", "output", vocab, dim)
    if arch == "phi3":
        for kind in ("long", "short"):
            w.add_tensor(f"rope_factors_{kind}.weight", 1.0 + rng.random(hd * 3 // 8).astype(np.float32))
    for i in range(s["n_layers"]):
        p = f"blk.{i}."
        mats = {"attn_output": (dim, q_dim), "ffn_down": (dim, ffn)}
        if arch == "phi3":
            mats.update({"attn_qkv": (q_dim + 2 * kv_dim, dim), "ffn_up": (2 * ffn, dim)})
        else:
            mats.update({"attn_q": (q_dim, dim), "attn_k": (kv_dim, dim), "attn_v": (kv_dim, dim),
                         "ffn_gate": (ffn, dim), "ffn_up": (ffn, dim)})
        for kind, (rows, cols) in mats.items():
            blocks(p, kind, rows, cols, i)
        if arch != "olmo2":
            w.add_tensor(p + "attn_norm.weight", ones(dim))
            w.add_tensor(p + "ffn_norm.weight", ones(dim))
        if arch in ("gemma2", "gemma3", "olmo2"):
            w.add_tensor(p + "post_attention_norm.weight", ones(dim))
            w.add_tensor(p + "post_ffw_norm.weight", ones(dim))
        if arch in ("qwen3", "gemma3"):
            w.add_tensor(p + "attn_q_norm.weight", ones(hd))
            w.add_tensor(p + "attn_k_norm.weight", ones(hd))
        if arch == "olmo2":
            w.add_tensor(p + "attn_q_norm.weight", ones(q_dim))
            w.add_tensor(p + "attn_k_norm.weight", ones(kv_dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", default="Q4_0", choices=sorted([*_F16_FIELDS, *MIXES]))
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--arch", choices=sorted(FAMILY_SHAPES), default=None)
    args = ap.parse_args()
    if args.arch:
        write_family_synthetic(args.out, args.arch, args.type, layers=args.layers)
    else:
        write_synthetic(args.out, args.type, args.layers)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
