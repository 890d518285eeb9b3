"""A tiny random-weight vision projector (mmproj GGUF) for a text model: the file pair the image
tests, the golden check against llama-server and the benchmarks open (no registry ships a small
vision model with its projector).

    python benchmarks/synthetic_mmproj.py MODEL.gguf OUT.gguf [--projector mlp|gemma3]

The projector's output width is the text model's embedding width (`<arch>.embedding_length`):
mtmd refuses a projector whose width differs. `mlp` (LLaVA-1.5's graph) suits the default model
(SmolLM2-135M, width 576); `gemma3` (SigLIP, pooled, non-causal image decode) a Gemma 3 model
(270M: width 640). Either makes 4 image tokens per picture: mlp 32 px / 16 px patches = 2 x 2;
gemma3 64 px / 8 px = 8 x 8 patches pooled by 4 = 2 x 2. Random weights from a fixed seed: the
same bytes in every process, so replies with an image are deterministic (and mean nothing).

The recipe is the one llama-server was seen to load (research/multimodal-mtmd.md section 7),
with its traps: image_mean/std need 3 values each; ffn width != embedding width (clip swaps
up/down otherwise); the LLaVA graph skips the last layer, so 2 blocks run 1; gemma3's patch
grid must divide by the pooling factor.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np

N_EMBD, N_HEAD, N_FF, N_LAYER = 64, 4, 128, 2
SEED = 1234
SHAPES = {"mlp": (32, 16), "gemma3": (64, 8), "qwen2vl_merger": (64, 16)}  # image size, patch size


def text_n_embd(path: str | Path) -> int:
    """The text model's embedding width (what the projector must output)."""
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    return int(r.fields[f"{arch}.embedding_length"].parts[-1][0])


def write_mmproj(out: str | Path, n_text: int, projector: str = "mlp", image_size: int | None = None) -> Path:
    """Write the projector for a text model of width `n_text`; returns `out`. `image_size`
    (pixels, a multiple of the patch size; gemma3: of 4 patches) makes more tokens per image."""
    if projector not in SHAPES:
        raise SystemExit(f"unsupported projector type {projector!r} (mlp or gemma3)")
    rng = np.random.default_rng(SEED)
    image_size, patch = (image_size or SHAPES[projector][0]), SHAPES[projector][1]
    n_pos = (image_size // patch) ** 2

    def rnd(*shape: int, std: float = 0.02) -> np.ndarray:  # numpy (out, in); GGUF ne=[in, out]
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    out = Path(out)
    w = gguf.GGUFWriter(str(out), "clip")
    w.add_name(f"tiny-random-mmproj-{projector}")
    w.add_type("mmproj")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type(projector)
    w.add_vision_image_size(image_size)
    w.add_vision_patch_size(patch)
    w.add_vision_embedding_length(N_EMBD)
    w.add_vision_feed_forward_length(N_FF)
    w.add_vision_block_count(N_LAYER)
    w.add_vision_head_count(N_HEAD)
    w.add_vision_attention_layernorm_eps(1e-6)
    w.add_vision_projection_dim(n_text)
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])

    w.add_tensor("v.patch_embd.weight", rnd(N_EMBD, 3, patch, patch))
    if projector == "qwen2vl_merger":  # two frames' kernels, no bias, M-RoPE instead of position rows
        w.add_tensor("v.patch_embd.weight.1", rnd(N_EMBD, 3, patch, patch))
    else:
        w.add_tensor("v.patch_embd.bias", zeros(N_EMBD))
        w.add_tensor("v.position_embd.weight", rnd(n_pos, N_EMBD))
    for i in range(N_LAYER):
        p = f"v.blk.{i}."
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + t + ".weight", rnd(N_EMBD, N_EMBD))
            w.add_tensor(p + t + ".bias", zeros(N_EMBD))
        for t in ("ln1", "ln2"):
            w.add_tensor(p + t + ".weight", ones(N_EMBD))
            w.add_tensor(p + t + ".bias", zeros(N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rnd(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.bias", zeros(N_FF))
        w.add_tensor(p + "ffn_down.weight", rnd(N_EMBD, N_FF))
        w.add_tensor(p + "ffn_down.bias", zeros(N_EMBD))
    if projector == "mlp":  # LLaVA-1.5: mm.0 -> GELU -> mm.2
        w.add_tensor("mm.0.weight", rnd(n_text, N_EMBD, std=0.5))
        w.add_tensor("mm.0.bias", zeros(n_text))
        w.add_tensor("mm.2.weight", rnd(n_text, n_text, std=0.05))
        w.add_tensor("mm.2.bias", zeros(n_text))
    elif projector == "qwen2vl_merger":  # 2 x 2 patches merged (4 x width) -> GELU MLP -> the text width
        w.add_tensor("mm.0.weight", rnd(4 * N_EMBD, 4 * N_EMBD, std=0.1))
        w.add_tensor("mm.0.bias", zeros(4 * N_EMBD))
        w.add_tensor("mm.2.weight", rnd(n_text, 4 * N_EMBD, std=0.1))
        w.add_tensor("mm.2.bias", zeros(n_text))
    else:  # gemma3: post-LN, average pool, RMS norm, projection (used transposed)
        w.add_tensor("v.post_ln.weight", ones(N_EMBD))
        w.add_tensor("v.post_ln.bias", zeros(N_EMBD))
        w.add_tensor("mm.soft_emb_norm.weight", ones(N_EMBD))
        w.add_tensor("mm.input_projection.weight", rnd(N_EMBD, n_text, std=0.05))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def as_mrope_model(src: str | Path, out: str | Path, sections: tuple[int, int, int, int] = (16, 8, 8, 0)) -> Path:
    """A copy of the text model `src` (a llama-architecture GGUF: the default model) relabelled
    as Qwen2-VL (`qwen2vl`: the same tensors, M-RoPE positions in `sections` of each head's
    rotary dimensions, summing to half of it): the text side of an M-RoPE pair, for a
    `qwen2vl_merger` projector (mtmd uses M-RoPE positions only for a text model that does)."""
    r = gguf.GGUFReader(str(src))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(str(out), "qwen2vl")
    for field in r.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        name = "qwen2vl." + field.name[len(arch) + 1:] if field.name.startswith(arch + ".") else field.name
        w.add_key_value(name, field.contents(), kind, sub_type=sub)
    w.add_array("qwen2vl.rope.dimension_sections", list(sections))
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data, tensor_endianess=r.endianess)
    w.close()
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the text model GGUF (its embedding width is the projector's)")
    ap.add_argument("out", help="the mmproj GGUF to write")
    ap.add_argument("--projector", choices=sorted(SHAPES), default=None,
                    help="projector type (default: gemma3 for a gemma3 model, else mlp)")
    args = ap.parse_args(argv)
    n_text = text_n_embd(args.model)
    projector = args.projector
    if projector is None:
        r = gguf.GGUFReader(args.model)
        arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
        projector = "gemma3" if arch == "gemma3" else "mlp"
    write_mmproj(args.out, n_text, projector)
    image_size, patch = SHAPES[projector]
    print(f"wrote {args.out}: projector={projector} n_text_embd={n_text} image={image_size}px patch={patch}")


if __name__ == "__main__":
    main()
