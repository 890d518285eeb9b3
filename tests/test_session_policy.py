"""How many prepacked ONNX Runtime sessions a model keeps: none (default), the current kernel
mode's, or every mode used (issue #19: the cache's disk use against the GGUF)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.model.compact.forward import CompactLlamaModel
from turbospark_app.model.weight_cache import budget


@pytest.fixture
def model(tmp_path: Path, isolated_dirs) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def _sessions(cache: Path) -> list[str]:
    (entry,) = [p for p in (cache / "weights").iterdir() if "-compact-" in p.name and not p.name.startswith(".")]
    return sorted((p / "usage.json").read_text().split('"kind": "prepacked ')[1].split('"')[0]
                  for p in entry.glob("ort-*"))


def _load(model: Path, cache: Path, kernels: str) -> str:
    origin = CompactLlamaModel.load(model, cache, kernels).session_origin
    gc.collect()  # that model is gone: its session is no longer in use
    return origin


def test_by_default_no_session_is_saved(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert budget.session_policy() == "none"
    assert _load(model, cache, "int8") == "built" and _load(model, cache, "int8") == "built"
    assert _sessions(cache) == []


def test_current_keeps_only_the_current_modes_session(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    budget.set_session_policy("current")
    assert _load(model, cache, "exact-prompt") == "saved"
    assert _load(model, cache, "int8") == "saved"
    assert _sessions(cache) == ["int8"]
    assert _load(model, cache, "int8") == "mapped"


def test_all_keeps_a_session_per_mode_used(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    budget.set_session_policy("all")
    for kernels in ("exact-prompt", "int8", "exact"):
        _load(model, cache, kernels)
    assert _sessions(cache) == ["exact", "exact-prompt", "int8"]
    assert _load(model, cache, "exact-prompt") == "mapped"


def test_none_saves_no_session_and_drops_the_saved_ones(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    budget.set_session_policy("current")
    _load(model, cache, "int8")
    assert _sessions(cache) == ["int8"]
    budget.set_session_policy("none")
    assert _load(model, cache, "int8") == "built"
    assert _sessions(cache) == []
    with pytest.raises(budget.BudgetError, match="unknown prepacked-session policy 'some'"):
        budget.set_session_policy("some")
    assert budget.session_policy() == "none"
