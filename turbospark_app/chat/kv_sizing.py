"""How many KV cells a load allocates and what a token of them weighs, for the cache types
chosen (`model.choice.kv_cache`); the memory budgets' flags in bytes."""

from __future__ import annotations

from ..engine.state_cache import DEFAULT_BUDGET_MB as DEFAULT_STATE_CACHE_MB
from ..model.choice.kv_cache import KVCacheTypes
from ..model.gguf.config import ModelConfig

DEFAULT_CONTEXT = 4096  # KV cells when the user sets none (the model's own if smaller): llama-server's
MIN_CONTEXT = 256


def kv_bytes_per_token(config: ModelConfig, cache_types: KVCacheTypes = KVCacheTypes()) -> int:
    """K + V bytes a token takes in a KV cache of `cache_types` (0 when the header does not say)."""
    if not (config.n_layers and config.n_kv_heads and config.head_dim):
        return config.kv_bytes_per_token
    return cache_types.bytes_per_token(config.n_layers, config.n_kv_heads, config.head_dim,
                                       config.value_dim or config.head_dim)


def context_cells(config: ModelConfig, n_ctx_train: int, max_context: int | None,
                  max_kv_bytes: int | None, cache_types: KVCacheTypes = KVCacheTypes()) -> int:
    """The KV cells to allocate: `max_context` (else the model's own context, at most
    DEFAULT_CONTEXT), no more than the model was trained for, and within the KV budget (a
    quantized cache fits more cells in it)."""
    trained = n_ctx_train or config.context_length or DEFAULT_CONTEXT
    cells = min(max_context or min(trained, DEFAULT_CONTEXT), trained)
    bpt = kv_bytes_per_token(config, cache_types)
    if max_kv_bytes is not None and bpt:
        cells = min(cells, max_kv_bytes // bpt)
    return max(MIN_CONTEXT, int(cells))


def state_cache_bytes(mb: float | None) -> int:
    """The --cache-ram budget in bytes (None: the default's)."""
    return int((DEFAULT_STATE_CACHE_MB if mb is None else mb) * 1024 * 1024)


def kv_budget_bytes(mb: float | None) -> int | None:
    """A KV budget in MB (the --kv-budget-mb flag) in bytes; None = unbounded."""
    if mb is None:
        return None
    if mb <= 0:
        raise SystemExit("turbospark: --kv-budget-mb must be > 0")
    return int(mb * 1024 * 1024)
