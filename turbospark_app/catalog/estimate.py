"""Does a model fit this machine, before a byte of it is downloaded?

What llama.cpp allocates for a model at a context (TurboSpark's own context: `kv_unified`
cells shared by the session slots, `swa_full`, f16 K and V, n_ubatch 512, flash attention as
llama.cpp's `auto` picks it on the CPU), term by term as its load logs them:

    weights  the tensor data, memory-mapped (`CPU_Mapped model buffer`): the file less its header
    repack   on the CPU, llama.cpp copies the matrices of some types into an interleaved layout
             its AVX2 / NEON kernels read (`CPU_REPACK model buffer`): on x86-64 Q4_0, Q4_K
             and IQ4_NL, on arm64 Linux also Q8_0; none on Apple Silicon (Metal holds them)
    KV       cells x sum over layers of KV heads x (key length + value length) x 2 bytes (f16)
             (`llama_kv_cache: size = ... K (f16) ..., V (f16) ...`); cells = the context
             rounded up to 256
    compute  the graph's scratch (`CPU compute buffer`), the larger of its two peaks for a
             512-token batch (flash attention): the logits with two activations,
             4 x 512 x (n_vocab + 2 n_embd) bytes; or inside a layer, the f16 attention masks
             (one per attention kind: two for sliding-window models) of cells x 512 x 2 bytes
             each, live with the feed-forward's tensors, 4 x 512 x (3 n_ff + 4 n_embd)
    output   the logits kept per sequence (`CPU output buffer`): n_vocab floats x slots

The figures come from the file's header (a ranged read of its first MBs when it is on the Hub),
never a table of models. Checked against llama.cpp's own log in tests/test_catalog_estimate.py.
The verdict compares the total with the RAM free now (psutil): above it "won't fit"; within
`reserve` of it (2 GiB or a fifth of the RAM, the larger) "fits, but leaves little for other
apps"; else "fits". On Apple Silicon the GPU's working set (about 2/3 of the RAM up to 36 GB,
3/4 above: macOS's `recommendedMaxWorkingSetSize`) caps what the GPU may hold.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.gguf.header import GGUFHeader

KV_TYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "q8_0": 34 / 32, "q4_0": 18 / 32}
N_UBATCH = 512
CELL_PAD = 256
DEFAULT_SLOTS = 4
GIB = 1 << 30

FITS = "fits"
TIGHT = "fits, but leaves little for other apps"
WONT_FIT = "won't fit"


@dataclass(frozen=True)
class ModelShape:
    """The header figures the estimate needs."""

    architecture: str
    n_layers: int
    kv_heads: tuple[int, ...]  # per layer (0: a layer without attention: recurrent / hybrid)
    key_length: int
    value_length: int
    n_embd: int
    n_ff: int
    n_vocab: int
    context_length: int
    parameters: int
    header_bytes: int  # where the tensor data starts
    repack_bytes: int = 0  # matrices llama.cpp copies into its CPU repack buffer (this machine)
    sliding_window: int = 0  # > 0: two attention kinds (full and windowed), two masks

    @property
    def kv_bytes_per_cell(self) -> int:
        """K + V bytes of one cell over all layers, in f16."""
        return int(sum(self.kv_heads) * (self.key_length + self.value_length) * 2)


def _int(v: Any) -> int:
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    return 0


def repack_types() -> frozenset[str]:
    """The tensor types llama.cpp's CPU backend repacks on this machine (none under Metal)."""
    machine = platform.machine().lower()
    if sys.platform == "darwin" and machine == "arm64":
        return frozenset()
    if machine in ("x86_64", "amd64"):
        return frozenset({"Q4_0", "Q4_K", "IQ4_NL"})
    if machine in ("arm64", "aarch64"):
        return frozenset({"Q4_0", "Q4_K", "IQ4_NL", "Q8_0"})
    return frozenset()


def _repacked(header: GGUFHeader) -> int:
    """Bytes of the matrices the repack buffer copies: 2-D weights of a repacked type with
    rows in eights, used by a matrix product (the token embedding only as a tied output)."""
    types = repack_types()
    tied = not any(t.name == "output.weight" for t in header.tensors)
    total = 0
    for t in header.tensors:
        if len(t.dims) != 2 or t.dims[1] % 8 or t.type_name not in types:
            continue
        if t.name == "token_embd.weight" and not tied:
            continue
        total += t.n_bytes
    return total


def shape_of(header: GGUFHeader) -> ModelShape:
    """The estimate's figures from a checked header (any architecture)."""
    from ..model.gguf.config import read_config

    config = read_config(header)
    arch = config.architecture
    raw = header.fields.get(f"{arch}.attention.head_count_kv", header.fields.get(f"{arch}.attention.head_count"))
    if isinstance(raw, np.ndarray) and raw.size:
        kv = tuple(int(x) for x in raw.tolist()[: config.n_layers])
    else:
        kv = (_int(raw),) * config.n_layers
    ff = header.fields.get(f"{arch}.feed_forward_length")
    n_ff = max((int(x) for x in ff.tolist()), default=0) if isinstance(ff, np.ndarray) else _int(ff)
    return ModelShape(arch, config.n_layers, kv, config.head_dim, config.value_dim, config.dim, n_ff,
                      config.vocab_size, config.context_length, config.n_params, header.data_offset,
                      _repacked(header), config.sliding_window)


def cells_for(n_ctx: int) -> int:
    """The KV cells llama.cpp allocates for a context of `n_ctx` tokens."""
    return -(-int(n_ctx) // CELL_PAD) * CELL_PAD


@dataclass(frozen=True)
class Need:
    """Bytes a model takes loaded, by kind."""

    weights: int
    repack: int
    kv: int
    compute: int
    output: int
    n_ctx: int

    @property
    def total(self) -> int:
        return self.weights + self.repack + self.kv + self.compute + self.output


def need(shape: ModelShape, file_size: int, n_ctx: int, *, kv_type: str = "f16",
         slots: int = DEFAULT_SLOTS) -> Need:
    """What llama.cpp allocates for the model (its files' bytes: `file_size`) at `n_ctx`."""
    per_cell = sum(shape.kv_heads) * (shape.key_length + shape.value_length) * KV_TYPE_BYTES[kv_type]
    cells = cells_for(n_ctx)
    masks = 2 if shape.sliding_window else 1
    logits_peak = 4 * N_UBATCH * (shape.n_vocab + 2 * shape.n_embd)
    layer_peak = masks * cells * N_UBATCH * 2 + 4 * N_UBATCH * (3 * shape.n_ff + 4 * shape.n_embd)
    compute = max(logits_peak, layer_peak)
    kv = int(cells * per_cell)
    output = 4 * shape.n_vocab * slots
    return Need(max(file_size - shape.header_bytes, 0), shape.repack_bytes, kv, compute, output,
                int(n_ctx))


@dataclass(frozen=True)
class Machine:
    """The memory a model may use here."""

    ram_total: int
    ram_available: int
    gpu_working_set: int | None  # Apple Silicon's GPU limit, else None

    @classmethod
    def this(cls) -> "Machine":
        import psutil

        vm = psutil.virtual_memory()
        gpu = None
        if sys.platform == "darwin" and platform.machine() == "arm64":
            gpu = int(vm.total * (2 / 3 if vm.total <= 36 * GIB else 3 / 4))
        return cls(int(vm.total), int(vm.available), gpu)

    @property
    def reserve(self) -> int:
        """What other apps should keep: 2 GiB or a fifth of the RAM, the larger."""
        return max(2 * GIB, self.ram_total // 5)

    @property
    def room(self) -> int:
        """What a model may take without swapping: the RAM free now (capped by the GPU's
        working set on Apple Silicon)."""
        return min(self.ram_available, self.gpu_working_set or self.ram_available)


@dataclass(frozen=True)
class Fit:
    """A verdict, with the numbers behind it."""

    need: Need
    machine: Machine
    verdict: str

    def lines(self) -> list[str]:
        """The numbers, one per line, for the details view and the CLI."""
        n, m = self.need, self.machine
        rows = [f"weights (memory-mapped): {gb(n.weights)}"]
        if n.repack:
            rows.append(f"weights repacked for the CPU: {gb(n.repack)}")
        rows += [
                f"KV cache ({n.n_ctx:,} tokens, f16): {gb(n.kv)}",
                f"compute buffers: {gb(n.compute + n.output)}",
                f"total: {gb(n.total)}",
                f"RAM: {gb(m.ram_available)} free of {gb(m.ram_total)} "
                f"(keeping {gb(m.reserve)} for other apps)"]
        if m.gpu_working_set:
            rows.append(f"GPU working set: {gb(m.gpu_working_set)}")
        return rows


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def judge(need_: Need, machine: Machine | None = None) -> Fit:
    """fits / fits, but leaves little for other apps / won't fit."""
    m = machine or Machine.this()
    if need_.total > m.room:
        verdict = WONT_FIT
    elif need_.total > m.room - m.reserve:
        verdict = TIGHT
    else:
        verdict = FITS
    return Fit(need_, m, verdict)


def default_context(shape: ModelShape) -> int:
    """The context TurboSpark opens a model with: 4096, or the trained one when smaller."""
    return min(4096, shape.context_length) if shape.context_length else 4096
