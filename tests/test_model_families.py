"""Model families: one module per architecture; nothing outside `model/families/` names one."""

from __future__ import annotations

import ast
from pathlib import Path

from turbospark_app.model.families import FAMILIES, SUPPORTED_ARCHITECTURES, family_of
from turbospark_app.model.gguf.file import LlamaConfig, expected_tensor_shapes

PACKAGE = Path(__file__).resolve().parent.parent / "turbospark_app"


def _config(arch: str) -> LlamaConfig:
    return LlamaConfig(architecture=arch, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=16,
                       ffn_dim=96, vocab_size=50, context_length=128, rope_base=1e4, rope_dims=16,
                       rope_style=FAMILIES[arch].rope_style, rope_linear_scale=1.0, norm_eps=1e-5,
                       qkv_bias=FAMILIES[arch].qkv_bias, tied_embeddings=True, file_type=None,
                       quantization="F32", n_params=0)


def test_registry() -> None:
    assert SUPPORTED_ARCHITECTURES == tuple(FAMILIES) and "llama" in FAMILIES
    assert family_of("mamba") is None
    for arch, family in FAMILIES.items():
        assert family.arch == arch and family.rope_style in ("interleaved", "neox")


def test_each_family_names_its_own_tensors() -> None:
    llama = expected_tensor_shapes(_config("llama"))
    qwen2 = expected_tensor_shapes(_config("qwen2"))
    assert set(qwen2) - set(llama) == {f"blk.{i}.attn_{x}.bias" for i in range(2) for x in "qkv"}
    assert qwen2["blk.1.attn_k.bias"] == (2 * 16,)


def _names_arch(node: ast.AST) -> bool:
    ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "arch" in ident.lower()


def test_no_architecture_name_is_compared_outside_the_families() -> None:
    # A family's difference lives in its module: engines ask the Family, never `arch == "qwen2"`.
    # (tokenizer.ggml.model = "llama" names a tokenizer, not an architecture: not counted.)
    names = set(FAMILIES)
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "families" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            constants = [e for side in sides for e in (
                side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side])]
            if any(isinstance(e, ast.Constant) and e.value in names for e in constants) and any(
                    _names_arch(side) for side in sides):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_the_scan_sees_an_arch_comparison() -> None:
    tree = ast.parse('style = "neox" if config.architecture == "qwen2" else "interleaved"')
    compare = next(n for n in ast.walk(tree) if isinstance(n, ast.Compare))
    assert _names_arch(compare.left) and compare.comparators[0].value in FAMILIES


# --- bad files of the new families: a clear error naming the key or tensor ---------------------


def test_bad_family_files_name_what_is_wrong(tmp_path: Path) -> None:
    import sys

    import pytest

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_gguf import write_tiny_gguf

    from turbospark_app.model.gguf.file import ModelFileError, open_gguf

    cases = [
        ({"arch": "qwen3", "skip_tensor": "blk.1.attn_k_norm.weight"}, "missing tensor 'blk.1.attn_k_norm.weight'"),
        ({"arch": "granite", "meta": {"residual_scale": 0.2}}, "missing metadata 'granite.logit_scale'"),
        ({"arch": "granite", "meta": {"logit_scale": 0.0}}, "granite.logit_scale = 0.0"),
    ]
    for n, (options, message) in enumerate(cases):
        path = tmp_path / f"bad{n}.gguf"
        write_tiny_gguf(path, n_layers=2, **options)
        with pytest.raises(ModelFileError, match=message.replace(".", r"\.")):
            open_gguf(path).close()
    good = tmp_path / "good.gguf"
    write_tiny_gguf(good, arch="granite", meta={"logit_scale": 8.0, "attention.scale": 0.015625})
    gf = open_gguf(good)
    try:
        c = gf.config
        assert (c.logit_scale, c.residual_scale, c.embedding_scale) == (8.0, 1.0, 1.0)
        assert c.softmax_scale == 0.015625
    finally:
        gf.close()
