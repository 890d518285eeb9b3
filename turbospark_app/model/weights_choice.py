"""Which weights a load uses, and who chose them: the `--weights` flag, else $TURBOSPARK_WEIGHTS,
else the app's setting, else compact.

compact: the GGUF's blocks through ONNX Runtime (the default, `llama_compact`); f32: the
float32 reference (`llama`), about 5x the memory and a slower decode. Cheap to import (no numpy):
the settings dialog and the CLI's parser read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

WEIGHTS_ENV = "TURBOSPARK_WEIGHTS"
WEIGHTS_FLAG = "--weights"
WEIGHT_MODES = ("compact", "f32")
DEFAULT_WEIGHTS = "compact"


class WeightsChoiceError(ValueError):
    """A weight mode that does not exist; the message names where it came from."""


@dataclass(frozen=True)
class WeightsChoice:
    """The mode to load with and its source: "--weights", "TURBOSPARK_WEIGHTS", "setting" or
    "default"."""

    mode: str
    source: str

    @property
    def overridden(self) -> bool:
        """Chosen outside the app (flag or environment): the app's setting does not apply."""
        return self.source in (WEIGHTS_FLAG, WEIGHTS_ENV)


def parse_weights(text: str, where: str) -> str:
    """`text` as a weight mode; WeightsChoiceError naming `where` when it is none."""
    mode = text.strip().lower()
    if mode not in WEIGHT_MODES:
        raise WeightsChoiceError(f"{where}={text!r} is not a weight mode (choose {' or '.join(WEIGHT_MODES)})")
    return mode


def env_weights(environ: Mapping[str, str] | None = None) -> str | None:
    """$TURBOSPARK_WEIGHTS checked: None when unset or blank; WeightsChoiceError when invalid."""
    raw = (os.environ if environ is None else environ).get(WEIGHTS_ENV, "")
    return parse_weights(raw, WEIGHTS_ENV) if raw.strip() else None


def choose_weights(
    flag: str | None = None, setting: str | None = None, environ: Mapping[str, str] | None = None
) -> WeightsChoice:
    """flag > environment > setting > compact (an unreadable setting counts as unset).
    Raises WeightsChoiceError for a bad flag or environment value."""
    if flag:
        return WeightsChoice(parse_weights(flag, WEIGHTS_FLAG), WEIGHTS_FLAG)
    env = env_weights(environ)
    if env is not None:
        return WeightsChoice(env, WEIGHTS_ENV)
    if isinstance(setting, str) and setting.strip().lower() in WEIGHT_MODES:
        return WeightsChoice(setting.strip().lower(), "setting")
    return WeightsChoice(DEFAULT_WEIGHTS, "default")
