"""benchmarks/synthetic_gguf.py: the files bench_peer and the family benchmarks open are what
llama.cpp's quantizer would write (mixes, fallback types, the layer count asked for)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from turbospark_app.model.gguf.describe import describe_gguf

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_gguf", Path(__file__).parent.parent / "benchmarks" / "synthetic_gguf.py")
synthetic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(synthetic)


def test_a_family_q4_k_m_mix_has_q6_k_where_llama_cpp_puts_it(tmp_path: Path) -> None:
    path = synthetic.write_family_synthetic(tmp_path / "q.gguf", "qwen3", "Q4_K_M", layers=9)
    d = describe_gguf(path)
    assert d.runnable, d.problem
    assert d.arch_fields["block_count"] == 9
    # embedding + attn_v and ffn_down of layers 0, 3, 6 and 8 (first/last eighth, every third)
    assert d.tensor_types == {"Q4_K": 9 * 7 - 8, "Q6_K": 1 + 8, "F32": d.tensor_types["F32"]}


@pytest.mark.parametrize(("qtype", "types"), [
    ("Q4_K_M", {"Q5_0", "Q8_0", "Q4_K"}),  # 1152 columns: no K-quant fits; ffn_down's 6912 does
    ("Q4_0", {"Q4_0"}),
])
def test_rows_that_are_not_whole_k_blocks_take_llama_cpps_fallback_types(
        tmp_path: Path, qtype: str, types: set[str]) -> None:
    path = synthetic.write_family_synthetic(tmp_path / "g.gguf", "gemma3", qtype, layers=2)
    d = describe_gguf(path)
    assert d.runnable, d.problem
    assert set(d.tensor_types) - {"F32"} == types
