"""Whether a stream decoding alone speculates (prompt lookup, `engine.speculation`), and who
chose it: the `--speculation` flag, else $TURBOSPARK_SPECULATION, else the app's setting, else
the default.

Not a load option (each turn reads it) but chosen with the same precedence as the threads, so
it shares their `ChoiceSpec`. The default is "off": a greedy reply with speculation can fork
from plain decoding at near ties (a verify pass of several rows sums in another order than one
row: tests/test_speculation_model.py), and lookup only pays where the reply repeats its prompt
(benchmarks/bench_speculation.py).
"""

from __future__ import annotations

from typing import Mapping

from .common import ChoiceSpec, LoadChoice, LoadChoiceError

SPECULATION_ENV = "TURBOSPARK_SPECULATION"
SPECULATION_FLAG = "--speculation"
SPECULATION_MODES = ("off", "lookup")  # the first is the default
DEFAULT_SPECULATION = SPECULATION_MODES[0]
SPECULATION = ChoiceSpec(SPECULATION_FLAG, SPECULATION_ENV, SPECULATION_MODES, "speculation mode")

SpeculationChoice = LoadChoice
SpeculationChoiceError = LoadChoiceError


def choose_speculation(
    flag: str | None = None, setting: str | None = None, environ: Mapping[str, str] | None = None
) -> SpeculationChoice:
    """flag > environment > setting > default (an unreadable setting counts as unset).
    Raises SpeculationChoiceError for a bad flag or environment value."""
    return SPECULATION.choose(flag, setting, environ)
