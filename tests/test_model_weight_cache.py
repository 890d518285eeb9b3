"""The prepared-weight cache: warm hits, atomic entries, rebuilds when stale or corrupt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.model.reference import weights as weights_mod
from turbospark_app.model.reference.weights import load_weights


@pytest.fixture
def gguf_path(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    write_tiny_gguf(path)
    return path


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "weights").iterdir())


def _same(a, b) -> None:
    for name, arr in a.arrays().items():
        np.testing.assert_array_equal(arr, b.arrays()[name])


def test_cold_then_warm(gguf_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    config, cold = load_weights(gguf_path, cache)
    assert cold.origin == "built"
    (entry,) = _entries(cache)  # one entry, no temp folders left behind
    assert entry.name.startswith("tiny-") and (entry / "manifest.json").exists()
    assert {p.name for p in entry.glob("*.npy")} == {f"{n}.npy" for n in cold.arrays()}

    def no_reader(path: object) -> None:
        raise AssertionError("a warm load must not parse the GGUF")

    monkeypatch.setattr(weights_mod, "open_gguf", no_reader)
    config2, warm = load_weights(gguf_path, cache)
    assert warm.origin == "cache" and config2 == config
    _same(cold, warm)
    assert not isinstance(warm.wqkv, np.memmap)  # plain ndarray views of the maps
    assert isinstance(warm.wqkv.base, np.memmap) or warm.wqkv.base is not None
    assert warm.output is warm.token_embd  # tied: one array


def test_truncated_npy_is_rebuilt(gguf_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, first = load_weights(gguf_path, cache)
    expected = {k: np.array(v) for k, v in first.arrays().items()}
    (entry,) = _entries(cache)
    npy = entry / "wgu.npy"
    full = npy.stat().st_size
    del first
    with npy.open("r+b") as fh:
        fh.truncate(full // 2)
    _, rebuilt = load_weights(gguf_path, cache)
    assert rebuilt.origin == "built"
    assert npy.stat().st_size == full
    for name, arr in rebuilt.arrays().items():
        np.testing.assert_array_equal(arr, expected[name])


@pytest.mark.parametrize("damage", ["garbage", "missing-file", "wrong-shape"])
def test_corrupt_entry_is_rebuilt(gguf_path: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    load_weights(gguf_path, cache)
    (entry,) = _entries(cache)
    manifest = entry / "manifest.json"
    if damage == "garbage":
        manifest.write_text("{not json")
    elif damage == "missing-file":
        (entry / "wo.npy").unlink()
    else:
        data = json.loads(manifest.read_text())
        data["arrays"]["wd"]["shape"][0] += 1
        manifest.write_text(json.dumps(data))
    _, again = load_weights(gguf_path, cache)
    assert again.origin == "built"
    _, warm = load_weights(gguf_path, cache)
    assert warm.origin == "cache"


def test_changed_gguf_gets_a_new_entry(gguf_path: Path, tmp_path: Path) -> None:
    """Keyed by content: the old entry stays (a copy elsewhere may still have that content)
    until the budget evicts it (tests/test_weight_cache_store.py)."""
    cache = tmp_path / "cache"
    _, old = load_weights(gguf_path, cache)
    (old_entry,) = _entries(cache)
    write_tiny_gguf(gguf_path, seed=123)  # same path, new content
    st = gguf_path.stat()
    os.utime(gguf_path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _, new = load_weights(gguf_path, cache)
    assert new.origin == "built"
    (new_entry,) = set(_entries(cache)) - {old_entry}
    assert new_entry.name.startswith("tiny-f32-")
    assert not np.array_equal(np.asarray(new.wqkv), np.asarray(old.wqkv))


def test_unwritable_cache_falls_back_to_memory(gguf_path: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    _, w = load_weights(gguf_path, blocker)
    assert w.origin == "memory" and w.cache_path is None
    assert w.wqkv.dtype == np.float32


def test_env_var_sets_the_default_cache_dir(
    gguf_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURBOSPARK_CACHE_DIR", str(tmp_path / "envcache"))
    assert weights_mod.default_cache_dir() == tmp_path / "envcache"
    _, w = load_weights(gguf_path)
    assert w.cache_path is not None and w.cache_path.parent == tmp_path / "envcache" / "weights"


def test_corrupt_gguf_with_warm_cache_still_fails(gguf_path: Path, tmp_path: Path) -> None:
    """The cache never masks a damaged model: a changed file changes the key."""
    from turbospark_app.model.gguf.file import ModelFileError

    cache = tmp_path / "cache"
    load_weights(gguf_path, cache)
    data = gguf_path.read_bytes()
    gguf_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        load_weights(gguf_path, cache)


@pytest.mark.parametrize("dtype,shape", [(np.float32, (576,)), (np.uint8, (300, 18, 16)), (np.float16, (3, 4)),
                                         (np.int64, ()), (np.float32, (0, 5))])
def test_a_warm_open_maps_each_npy_as_numpy_would(tmp_path: Path, dtype: type, shape: tuple) -> None:
    """The fast map gives np.load's array and data offset, and declines (None: np.load then
    reports) anything np.save would not have written for the manifest's dtype and shape."""
    arr = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    path = tmp_path / "a.npy"
    np.save(path, arr)
    mapped = weights_mod._map_npy(path, np.dtype(dtype), shape)
    assert mapped is not None
    got, offset = mapped
    assert got.dtype == arr.dtype and got.shape == shape and np.array_equal(got, arr)
    assert offset == np.load(path, mmap_mode="r").offset if arr.size else True
    assert not got.flags.writeable or arr.size == 0
    wrong_dtype = np.dtype(np.float64 if dtype is not np.float64 else np.float32)
    assert weights_mod._map_npy(path, wrong_dtype, shape) is None
    assert weights_mod._map_npy(path, np.dtype(dtype), shape + (1,)) is None
    with path.open("ab") as fh:
        fh.write(b"\0")  # one byte more than the header says
    assert weights_mod._map_npy(path, np.dtype(dtype), shape) is None
    np.save(path, np.asfortranarray(np.ones((3, 4), np.float32)))
    assert weights_mod._map_npy(path, np.dtype(np.float32), (3, 4)) is None
    path.write_bytes(b"not an npy file at all")
    assert weights_mod._map_npy(path, np.dtype(np.float32), (3,)) is None
