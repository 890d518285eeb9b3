"""host.heap: a model load gives the C heap's free pages back (the parallel repack's leftovers)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.host import heap
from turbospark_app.model.compact import forward


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: free() itself never trims here ...
    libc.mallopt(-3, 1 << 30)  # ... and M_MMAP_THRESHOLD: these blocks come from the heap

    def anon_kib() -> int:
        return int(Path("/proc/self/status").read_text().split("RssAnon:")[1].split()[0])

    try:
        blocks = [libc.malloc(256 * 1024) for _ in range(400)]  # 100 MiB of heap, touched
        for b in blocks:
            ctypes.memset(b, 1, 256 * 1024)
        held = anon_kib()
        for b in reversed(blocks):
            libc.free(b)
        kept = anon_kib()
        assert heap.release_free_heap() is True
        after = anon_kib()
    finally:
        libc.mallopt(-1, 128 * 1024)
        libc.mallopt(-3, 128 * 1024)
    assert kept > held - 50 * 1024  # freed, but still resident: glibc keeps it
    assert after < kept - 50 * 1024  # given back


def test_a_compact_load_repacks_serially_when_cold_and_releases_the_heap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first open (the cache built now, the highest peak) repacks on one thread, a warm open
    on all; both give the heap's free pages back once the session is made."""
    calls: list[object] = []
    real = forward.cached_session

    def session(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(("session", kwargs["parallel_prepack"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(forward, "cached_session", session)
    monkeypatch.setattr(forward, "release_free_heap", lambda: calls.append("release") or True)
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    forward.CompactLlamaModel.load(path, tmp_path / "cache")
    forward.CompactLlamaModel.load(path, tmp_path / "cache")
    assert calls == [("session", False), "release", ("session", True), "release"]
