"""Sessions run with ONNX Runtime's graph optimizer off (`graph.session_options`): the builder
makes the graph as it should run, so a warm open does not pay the optimizer's passes. These
tests hold the builder to that: ORT's basic passes (common subexpressions, identities, constant
folding, ...) find nothing to change in any family's graph, in any kernel mode."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.model.compact import graph
from turbospark_app.model.compact.forward import CompactLlamaModel
from turbospark_app.model.compact.graph_cache import cached_proto
from turbospark_app.model.families import FAMILIES

# Each family with what it needs beyond the defaults; llama with Q4_1 (minimums), the default model's type.
_OPTIONS = {
    "llama": {"embd_type": "Q4_1"},
    "granite": {"meta": {"logit_scale": 8.0, "attention.scale": 0.015625}},
    "olmo2": {"tied": False},
}


def _ops(g: onnx.GraphProto, counts: collections.Counter) -> collections.Counter:
    for node in g.node:
        counts[node.op_type] += 1
        for attr in node.attribute:
            if attr.g.node:
                _ops(attr.g, counts)
    return counts


def test_session_options_run_no_optimizer() -> None:
    assert graph.session_options(None, 1).graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_the_basic_passes_find_nothing_to_change(arch: str, tmp_path: Path) -> None:
    path = tmp_path / f"{arch}.gguf"
    write_tiny_gguf(path, arch=arch, n_layers=2, **_OPTIONS.get(arch, {}))
    for kernels in ("exact-prompt", "int8", "exact"):
        model = CompactLlamaModel.load(path, tmp_path / "cache", kernels=kernels)
        proto, cached = cached_proto(model.weights.cache_path, kernels, model.has_local_rope, None)
        assert cached
        so = graph.session_options(model.weights.cache_path, 1)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(tmp_path / f"{kernels}.onnx")
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    f"{kernels}.data")
        optimized = graph.make_session(proto, model.weights.cache_path, 1, so=so)
        built = _ops(onnx.load_model_from_string(proto).graph, collections.Counter())
        after = _ops(onnx.load(str(tmp_path / f"{kernels}.onnx"), load_external_data=False).graph,
                     collections.Counter())
        assert after == built, f"{arch} {kernels}: the optimizer changed {built - after} / {after - built}"
        # and the two sessions compute the same bits
        ids = [5, 9, 14, 3, 77, 41]
        mine = model.forward(ids, model.new_cache()).copy()
        model._session = optimized
        np.testing.assert_array_equal(model.forward(ids, model.new_cache()), mine)
