"""Which kernels the compact engine runs, and who chose them: the `--kernels` flag, else
$TURBOSPARK_KERNELS, else the app's setting, else exact-prompt (load_choice).

exact-prompt (default): prompt tokens through the exact split (float32-exact), decode steps with
int8 activations like llama.cpp; exact: every token exact (reproducible across prompt reuse,
slowest); int8: llama.cpp's numerics everywhere (fastest, differs from the float32 reference by
int8 rounding). The float32 weights have no kernel mode. The modes are `ort_graph.KERNEL_MODES`
(the engine imports them from here); this module stays numpy-free for the parser and the dialog.
"""

from __future__ import annotations

from typing import Mapping

from .common import ChoiceSpec, LoadChoice, LoadChoiceError

KERNELS_ENV = "TURBOSPARK_KERNELS"
KERNELS_FLAG = "--kernels"
KERNEL_MODES = ("exact-prompt", "exact", "int8")
DEFAULT_KERNELS = "exact-prompt"
KERNELS = ChoiceSpec(KERNELS_FLAG, KERNELS_ENV, KERNEL_MODES, "kernel mode")

KernelsChoice = LoadChoice
KernelsChoiceError = LoadChoiceError


def choose_kernels(
    flag: str | None = None, setting: str | None = None, environ: Mapping[str, str] | None = None
) -> KernelsChoice:
    """flag > environment > setting > exact-prompt (an unreadable setting counts as unset).
    Raises KernelsChoiceError for a bad flag or environment value."""
    return KERNELS.choose(flag, setting, environ)
