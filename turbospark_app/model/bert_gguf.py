"""A sentence-transformers BERT checkpoint (safetensors + tokenizer.json) -> a llama.cpp GGUF,
with the `gguf` library's writer and tensor-name map (llama.cpp's own converter needs torch).

What llama.cpp expects of a BERT GGUF (measured: anything else aborts the process at the first
decode): 2-D weights f16 except `position_embd` and `token_types`, which llama.cpp adds to f32
activations and must be f32; norms and biases f32; the WordPiece vocabulary in llama.cpp's
"phantom space" form (`##x` -> `x`, any other normal token -> `▁` + token, specials as is).
The output is deterministic: the same input gives the same bytes (its sha256 is pinned).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
_F32_ONLY = ("position_embd", "token_types")  # added to f32 activations by llama.cpp
_POOLING = {"mean": 1, "cls": 2, "last": 3}  # llama_pooling_type


class ConvertError(ValueError):
    """The checkpoint is not a BERT model this converter understands; the message says why."""


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file held in memory (views into `data`)."""
    if len(data) < 8:
        raise ConvertError("the safetensors file is truncated (no header)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ConvertError("the safetensors header runs past the end of the file")
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ConvertError(f"tensor {name} has dtype {info.get('dtype')} (F32, F16 or I64 only)")
        start, end = info["data_offsets"]
        if not 0 <= start <= end <= len(data) - base:
            raise ConvertError(f"tensor {name} lies outside the file")
        out[name] = np.frombuffer(data, dtype, (end - start) // np.dtype(dtype).itemsize,
                                  base + start).reshape(info["shape"])
    return out


def _vocab(tokenizer: dict[str, Any]) -> tuple[list[str], list[int], dict[str, int]]:
    """Token texts (phantom-space form), token types, and the special tokens' ids."""
    import gguf

    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ConvertError(f"tokenizer model {model.get('type')!r} (WordPiece only)")
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ConvertError("the vocabulary's ids are not 0..n-1")
    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    tokens, types = [], []
    for text, i in by_id:
        if text in special:
            tokens.append(text)
            types.append(int(gguf.TokenType.CONTROL))
        else:
            tokens.append(text[2:] if text.startswith("##") else "\u2581" + text)
            types.append(int(gguf.TokenType.NORMAL))
    return tokens, types, special


def convert(safetensors: bytes, tokenizer_json: bytes, config_json: bytes, pooling_json: bytes,
            out: Path, *, name: str) -> None:
    """Write the GGUF of a BERT sentence encoder to `out`."""
    import gguf

    config = json.loads(config_json)
    pooling = json.loads(pooling_json)
    mode = next((m for m, key in (("mean", "pooling_mode_mean_tokens"), ("cls", "pooling_mode_cls_token"),
                                  ("last", "pooling_mode_lasttoken")) if pooling.get(key)), None)
    if mode is None:
        raise ConvertError(f"pooling {pooling} (mean, cls or last token only)")
    if config.get("model_type") != "bert":
        raise ConvertError(f"model_type {config.get('model_type')!r} (bert only)")
    n_layer = int(config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    tensors = read_safetensors(safetensors)
    tokens, types, special = _vocab(json.loads(tokenizer_json))

    w = gguf.GGUFWriter(str(out), "bert")
    w.add_name(name)
    w.add_context_length(int(config["max_position_embeddings"]))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_block_count(n_layer)
    w.add_head_count(int(config["num_attention_heads"]))
    w.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(_POOLING[mode]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(int(config.get("type_vocab_size", 2)))
    for key, adder in (("[UNK]", w.add_unk_token_id), ("[SEP]", w.add_sep_token_id),
                       ("[PAD]", w.add_pad_token_id), ("[CLS]", w.add_bos_token_id),  # CLS is llama.cpp's BOS
                       ("[MASK]", w.add_mask_token_id)):
        if key in special:
            adder(special[key])
    w.add_add_bos_token(True)  # [CLS] text [SEP], as the sentence-transformers tokenizer does
    w.add_add_sep_token(True)
    w.add_add_eos_token(False)
    for hf_name in sorted(tensors):  # sorted: the same bytes on every run
        array = tensors[hf_name]
        stem = hf_name.removeprefix("bert.")
        if stem.startswith("pooler.") or stem.endswith("position_ids"):
            continue  # the pooler head is not used for sentence embeddings
        mapped = names.get_name(stem, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ConvertError(f"tensor {hf_name} has no BERT name in llama.cpp")
        f16 = array.ndim == 2 and not mapped.startswith(_F32_ONLY)
        w.add_tensor(mapped, np.ascontiguousarray(array, np.float16 if f16 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
