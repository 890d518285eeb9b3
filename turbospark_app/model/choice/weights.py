"""Which weights a load uses, and who chose them: the `--weights` flag, else $TURBOSPARK_WEIGHTS,
else the app's setting, else compact (load_choice).

compact: the GGUF's blocks through ONNX Runtime (the default, `llama_compact`); f32: the
float32 reference (`llama`), about 5x the memory and a slower decode. Cheap to import (no numpy):
the settings dialog and the CLI's parser read it.
"""

from __future__ import annotations

from typing import Mapping

from .common import ChoiceSpec, LoadChoice, LoadChoiceError

WEIGHTS_ENV = "TURBOSPARK_WEIGHTS"
WEIGHTS_FLAG = "--weights"
WEIGHT_MODES = ("compact", "f32")
DEFAULT_WEIGHTS = "compact"
WEIGHTS = ChoiceSpec(WEIGHTS_FLAG, WEIGHTS_ENV, WEIGHT_MODES, "weight mode")

WeightsChoice = LoadChoice
WeightsChoiceError = LoadChoiceError


def parse_weights(text: str, where: str) -> str:
    """`text` as a weight mode; WeightsChoiceError naming `where` when it is none."""
    return WEIGHTS.parse(text, where)


def env_weights(environ: Mapping[str, str] | None = None) -> str | None:
    """$TURBOSPARK_WEIGHTS checked: None when unset or blank; WeightsChoiceError when invalid."""
    return WEIGHTS.from_env(environ)


def choose_weights(
    flag: str | None = None, setting: str | None = None, environ: Mapping[str, str] | None = None
) -> WeightsChoice:
    """flag > environment > setting > compact (an unreadable setting counts as unset).
    Raises WeightsChoiceError for a bad flag or environment value."""
    return WEIGHTS.choose(flag, setting, environ)
