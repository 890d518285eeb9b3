"""The KV cache settings: the element type of the keys and of the values (f16, q8_0, q4_0;
model.choice.kv_cache).

Stored app-wide in QSettings (`engine/cache_type_k`, `engine/cache_type_v`). The
`--cache-type-k` / `--cache-type-v` flags and $TURBOSPARK_CACHE_TYPE_K / _V win over them; while
one does, the Settings dialog shows its control disabled. A change reloads the model
(ui.services.model_switch): llama.cpp's context is made with them; a type the model cannot have is
refused before llama.cpp is asked, and the model it had loads again.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

from ...model.choice.common import LoadChoice
from ...model.choice.kv_cache import CACHE_TYPE_K, CACHE_TYPE_V
from .load import LoadSetting

_LABELS = {"f16": "f16 (full precision)", "q8_0": "q8_0 (0.53x the memory)", "q4_0": "q4_0 (0.28x the memory)"}
_TIP = ("The KV cache holds every conversation's keys and values in memory. q8_0 takes about half "
        "of f16's memory for a small loss of precision, q4_0 about a quarter for a larger one "
        "(as llama-server's --cache-type-k / -v). A quantized V cache turns flash attention on.")

CACHE_TYPE_K_SETTING = LoadSetting("engine/cache_type_k", CACHE_TYPE_K, "KV cache keys", _LABELS,
                                   {m: m for m in _LABELS}, _TIP)
CACHE_TYPE_V_SETTING = LoadSetting("engine/cache_type_v", CACHE_TYPE_V, "KV cache values", _LABELS,
                                   {m: m for m in _LABELS}, _TIP)


def current_cache_types(settings: QSettings, flag_k: str | None = None,
                        flag_v: str | None = None) -> tuple[LoadChoice, LoadChoice]:
    """What the next load uses, K and V: the flag > the environment > the setting > f16."""
    return CACHE_TYPE_K_SETTING.current(settings, flag_k), CACHE_TYPE_V_SETTING.current(settings, flag_v)
