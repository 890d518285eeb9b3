"""Whether a stream decoding alone speculates (prompt lookup, `engine.speculation`), and who
chose it: the `--speculation` flag, else $TURBOSPARK_SPECULATION, else the app's setting, else
the default.

Not a load option (it changes no weights; each turn reads it) but chosen with the same
precedence as the weight and kernel modes, so it shares their `ChoiceSpec`. The default is
"off": benchmarks/bench_speculation.py did not show lookup winning everywhere on this machine
(an echo prompt at 0.85x of plain decode) and greedy replies on the compact engine fork from
plain decoding at near-ties (verify passes sum in another order): see docs/speculation.md.
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
