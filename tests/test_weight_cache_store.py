"""The weight cache keyed by content, listed, cleared and kept under a size budget (issue #19)."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.model.reference.weights import load_weights
from turbospark_app.model.weight_cache import budget, keys, leases, store


def _gguf(folder: Path, name: str, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    write_tiny_gguf(path, seed=seed)
    return path


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "weights").iterdir() if not p.name.startswith("."))


def test_a_renamed_moved_or_copied_gguf_reuses_its_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _gguf(tmp_path / "a", "tiny.gguf", 0)
    assert load_weights(first, cache)[1].origin == "built"
    renamed = first.with_name("renamed.gguf")
    first.rename(renamed)
    assert load_weights(renamed, cache)[1].origin == "cache"
    moved = tmp_path / "elsewhere" / "moved.gguf"
    moved.parent.mkdir()
    shutil.move(renamed, moved)
    copy = tmp_path / "copy.gguf"
    shutil.copy(moved, copy)  # a copy has a new mtime too
    os.utime(copy, (time.time() + 100, time.time() + 100))
    assert load_weights(moved, cache)[1].origin == "cache"
    assert load_weights(copy, cache)[1].origin == "cache"
    (entry,) = _entries(cache)
    (model,) = store.list_models(cache)
    assert {Path(s).name for s in model.sources} == {"tiny.gguf", "renamed.gguf", "moved.gguf",
                                                     "copy.gguf"}


def test_the_key_reads_the_edges_and_samples_not_the_whole_file(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as fh:
        fh.truncate(64 << 20)
    key = keys.content_key(big)
    offsets = keys.sample_offsets(64 << 20)
    assert len(offsets) == keys.SAMPLES and offsets[0] >= keys.EDGE_BYTES
    with big.open("r+b") as fh:  # one byte between two samples: the documented blind spot
        fh.seek(offsets[100] + keys.SAMPLE_BYTES + 5)
        fh.write(b"\1")
    assert keys.content_key(big) == key
    with big.open("r+b") as fh:  # one byte inside a sample, or in the header, changes the key
        fh.seek(offsets[100] + 5)
        fh.write(b"\1")
    changed = keys.content_key(big)
    with big.open("r+b") as fh:
        fh.seek(100)
        fh.write(b"\1")
    assert len({key, changed, keys.content_key(big)}) == 3


def test_least_recently_used_entries_go_first_and_the_one_in_use_never(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    paths = [_gguf(tmp_path / "m", f"m{i}.gguf", i) for i in range(3)]
    for p in paths:
        load_weights(p, cache)
        gc.collect()  # the weights are gone: nothing is leased
    by_model = {m.model: m for m in store.list_models(cache)}
    one = by_model["m0"].size
    now = time.time()
    for age, name in ((300, "m1"), (200, "m0"), (100, "m2")):  # m1 the least recently used
        for unit in by_model[name].units:
            os.utime(unit.path, (now - age, now - age))
            (unit.path / "usage.json").unlink(missing_ok=True)  # its mtime stands in
    _, in_use = load_weights(paths[1], cache)  # ...but m1 is now in use (and used just now)
    m1 = next(m for m in store.list_models(cache) if m.model == "m1")
    assert m1.in_use and leases.in_use(m1.units[0].path)
    removed = store.enforce_budget(cache, budget=int(1.5 * one))
    left = {m.model for m in store.list_models(cache)}
    assert left == {"m1"} and len(removed) == 2  # m0 then m2 went; m1 stayed, in use
    del in_use
    gc.collect()
    assert not leases.in_use(m1.units[0].path)
    assert store.enforce_budget(cache, budget=1) and store.list_models(cache) == []


def test_building_an_entry_evicts_under_the_budget(tmp_path: Path, isolated_dirs,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget in force (the setting) applies when an entry is built: the older one goes."""
    cache = tmp_path / "cache"
    load_weights(_gguf(tmp_path / "m", "first.gguf", 0), cache)
    gc.collect()
    size = store.total_size(cache)
    monkeypatch.setattr(budget, "MIN_BUDGET_BYTES", 1)  # tiny models: a tiny budget
    budget.set_budget(int(size * 1.5))
    assert budget.budget_setting() == int(size * 1.5)
    _, second = load_weights(_gguf(tmp_path / "m", "second.gguf", 1), cache)
    assert second.origin == "built"
    assert [m.model for m in store.list_models(cache)] == ["second"]


def test_a_budget_below_the_minimum_is_refused(isolated_dirs) -> None:
    with pytest.raises(budget.BudgetError, match="at least 256 MiB"):
        budget.set_budget(1000)
    assert budget.budget_setting() is None
    default = budget.default_budget(isolated_dirs["cache"], 0)
    assert budget.MIN_BUDGET_BYTES <= default <= budget.DEFAULT_BUDGET_BYTES


def test_clear_by_name_keeps_what_is_in_use(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    a, b = _gguf(tmp_path / "m", "alpha.gguf", 0), _gguf(tmp_path / "m", "beta.gguf", 1)
    load_weights(a, cache)
    gc.collect()
    _, held = load_weights(b, cache)
    result = store.clear(cache, "alpha")
    assert [m.model for m in store.list_models(cache)] == ["beta"] and result.freed > 0
    result = store.clear(cache)
    assert result.removed == [] and len(result.kept_in_use) == 1  # beta is in use
    del held
    gc.collect()
    assert store.clear(cache).removed and store.list_models(cache) == []


def test_another_process_sees_the_lease(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, held = load_weights(_gguf(tmp_path / "m", "x.gguf", 0), cache)
    (entry,) = _entries(cache)
    code = ("import sys; from pathlib import Path; from turbospark_app.model.weight_cache import leases;"
            "print(leases.in_use(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(entry)], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == ("True" if leases.fcntl is not None else "False"), out.stderr
    assert held.token_embd is not None


def test_entries_keyed_the_old_way_go_when_a_new_one_is_built(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    legacy = cache / "weights" / "SmolLM2-135M-Instruct.Q4_1-30cd10ba-f32-4427f62ba4839225e5ec"
    legacy.mkdir(parents=True)
    (legacy / "wqkv.npy").write_bytes(b"old")
    load_weights(_gguf(tmp_path / "m", "new.gguf", 0), cache)
    assert not legacy.exists() and [m.model for m in store.list_models(cache)] == ["new"]


def test_a_lease_released_by_the_garbage_collector_inside_a_check_does_not_hang(tmp_path: Path) -> None:
    """A lease goes when what it is tied to is collected, and that can happen at any allocation
    in any thread, inside `in_use` too. A model load hung there (the finalizer waited for the
    lock its own thread held). Here the tied object's last reference is dropped while `in_use`
    turns its argument into a path, so its finalizer runs right there."""
    import threading

    held, other = tmp_path / "held", tmp_path / "other"
    held.mkdir()
    other.mkdir()

    class Owner:
        pass

    owners = [Owner()]
    leases.hold(held).tie_to([owners[0]])
    assert leases.in_use(held)

    class DropsTheOwner(os.PathLike):
        def __fspath__(self) -> str:
            owners.clear()  # the owner's last reference: its lease is released now, in this call
            return str(other)

    result: list[bool] = []
    checker = threading.Thread(target=lambda: result.append(leases.in_use(DropsTheOwner())), daemon=True)
    checker.start()
    checker.join(5)
    assert not checker.is_alive(), "in_use deadlocked on its own lock"
    assert result == [False] and not leases.in_use(held)
