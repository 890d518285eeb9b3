"""Every family llama.cpp runs, opens: a tiny random GGUF of each family the tests know (the
keys and tensors of Llama, Qwen 2/3, Gemma 2/3 with sliding windows and soft-caps, Granite's
scales, Phi-3's fused projections, SmolLM3's NoPE layers, OLMo 2's post-norms) loads through the
app's backend and generates; and no table of architecture names in the app decides it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tiny_gguf import FAMILY_VARIANTS, write_tiny_gguf

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import GenerationConfig, drive_raw_completion

PACKAGE = Path(__file__).resolve().parent.parent / "turbospark_app"
FAMILIES = {"llama": {}, "qwen2": {"arch": "qwen2"}, **FAMILY_VARIANTS}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_loads_and_generates(family: str, tmp_path: Path, isolated_dirs) -> None:
    path = tmp_path / f"{family}.gguf"
    write_tiny_gguf(path, **FAMILIES[family])
    backend = load_backend(path, session_slots=1)
    try:
        info = backend.model_info()
        assert info["architecture"] == FAMILIES[family].get("arch", "llama")
        assert info["engine_description"].startswith(info["architecture"])
        assert info["runs_on"].startswith("llama.cpp · ")
        settings = TurnSettings(generation=GenerationConfig(max_new_tokens=6))
        turn = backend.prepare_turn("s", [ChatMessage("user", "hello there")], settings)
        result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                      lambda: False, None)
        assert result.new_tokens >= 1 and result.prompt_tokens == len(turn.prompt_ids)
    finally:
        backend.close()


def _arch_names() -> set[str]:
    import gguf

    return set(gguf.MODEL_ARCH_NAMES.values())


def _names_arch(node: ast.AST) -> bool:
    ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "arch" in ident.lower()


def test_no_architecture_name_is_compared_in_the_app() -> None:
    """What runs is llama.cpp's to say: the app never compares an architecture to a name
    (tokenizer.ggml.model = "llama" names a tokenizer, not an architecture: not counted)."""
    names = _arch_names()
    found = []
    for path in PACKAGE.rglob("*.py"):
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
    assert _names_arch(compare.left) and compare.comparators[0].value in _arch_names()
