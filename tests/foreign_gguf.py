"""Write small GGUFs of architectures TurboSpark may not run (Mamba, Gemma 3...), for `model info`
and Open Model: the metadata keys of the real family (from llama.cpp's converter) and a few
tensors, with a gpt2 vocabulary. Not a model anyone can run; only the header matters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tiny_gguf import add_tiny_tokenizer

# `<arch>.` keys as llama.cpp's convert_hf_to_gguf writes them (sizes made small)
ARCH_KEYS: dict[str, dict[str, Any]] = {
    "mamba": {"context_length": 1 << 20, "embedding_length": 64, "block_count": 2,
              "feed_forward_length": 0, "attention.head_count": 0, "ssm.conv_kernel": 4,
              "ssm.inner_size": 128, "ssm.state_size": 16, "ssm.time_step_rank": 4,
              "attention.layer_norm_rms_epsilon": 1e-5},
    "gemma3": {"context_length": 32768, "embedding_length": 64, "block_count": 2,
               "feed_forward_length": 128, "attention.head_count": 4, "attention.head_count_kv": 1,
               "attention.key_length": 16, "attention.value_length": 16,
               "attention.sliding_window": 512, "attention.layer_norm_rms_epsilon": 1e-6,
               "rope.freq_base": 1e6},
}


def _add(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, float):
        w.add_float32(key, value)
    else:
        w.add_uint32(key, value)


def write_foreign_gguf(path: Path, arch: str, *, name: str | None = None, n_vocab: int = 300) -> Path:
    """A GGUF with `general.architecture = arch`, its ARCH_KEYS, a vocabulary with a chat
    template, and token_embd / output_norm / one per-layer tensor (Q8_0 and F32)."""
    keys = ARCH_KEYS[arch]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name or f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    for key, value in keys.items():
        _add(w, f"{arch}.{key}", value)
    add_tiny_tokenizer(w, n_tokens=n_vocab)
    rng = np.random.default_rng(0)
    dim = keys["embedding_length"]
    embd = gguf.quants.quantize(rng.standard_normal((n_vocab, dim)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", embd, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    for i in range(keys["block_count"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
