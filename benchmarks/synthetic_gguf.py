"""A synthetic GGUF with Llama-3.2-1B's shape and random quantized weights (benchmarks only).

    python benchmarks/synthetic_gguf.py OUT.gguf [--type Q4_0|Q4_K] [--layers 16]

16 layers, dim 2048, ffn 8192, 32 query / 8 KV heads (head_dim 64), vocab 128256, tied
embeddings. Every matrix is random blocks of `--type` with small float16 scales (its logits mean
nothing; its speed and memory are real); norms are ones. A byte-level SentencePiece-style
vocabulary (`<unk>`, `<s>`, `</s>`, 256 byte tokens, fillers) lets llama.cpp load the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

SHAPE = {"n_layers": 16, "dim": 2048, "ffn": 8192, "n_heads": 32, "n_kv": 8, "vocab": 128256}
_F16_FIELDS = {"Q4_0": ((0, 2e-3),), "Q4_K": ((0, 2e-4), (2, 1e-4))}  # (byte offset, value)


def random_blocks(rows: int, cols: int, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes per row) uint8: random quants, fixed small scales."""
    block, size = gguf.GGML_QUANT_SIZES[Q[qtype]]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for at, value in _F16_FIELDS[qtype]:
        raw[..., at : at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return raw.reshape(rows, -1)


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
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"tok{i}" for i in range(vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    qt = Q[qtype]
    w.add_tensor("token_embd.weight", random_blocks(vocab, dim, qtype, rng), raw_dtype=qt)
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    shapes = {"attn_q": (dim, dim), "attn_k": (kv_dim, dim), "attn_v": (kv_dim, dim),
              "attn_output": (dim, dim), "ffn_gate": (ffn, dim), "ffn_up": (ffn, dim),
              "ffn_down": (dim, ffn)}
    for i in range(s["n_layers"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, np.float32))
        for kind, (rows, cols) in shapes.items():
            w.add_tensor(f"blk.{i}.{kind}.weight", random_blocks(rows, cols, qtype, rng), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", default="Q4_0", choices=sorted(_F16_FIELDS))
    ap.add_argument("--layers", type=int, default=None)
    args = ap.parse_args()
    write_synthetic(args.out, args.type, args.layers)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
