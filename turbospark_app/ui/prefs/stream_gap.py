"""The Stream gap setting: the longest pause a prompt arriving beside running replies may put in
their tokens (`engine.chunk_budget`), the user's choice between smooth streams and a new
prompt's first token.

A new long prompt goes into the running replies' forward passes in chunks; each pass is sized so
those replies wait no longer than this between two tokens. A longer gap lets the passes carry
more of the prompt, so its first token comes sooner (llama-server stalls its streams for the
whole prompt instead). Stored app-wide in QSettings (`engine/max_stream_gap_ms`);
$TURBOSPARK_MAX_STREAM_GAP_MS (any number of ms, as `turbospark serve` reads it) wins over it, and
the control is then disabled. Reloads nothing: the bridge stamps it on every pane's turn, and the
window's backend is loaded with it (its API server's turns).
"""

from __future__ import annotations

from typing import Mapping

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget

from ...engine.chunk_budget import DEFAULT_MAX_GAP_MS, STREAM_GAP_ENV, stream_gap_from_env
from ...model.choice.common import ChoiceSpec, LoadChoice, LoadChoiceError
from .load import LoadSetting, NoReloadField

STREAM_GAP_KEY = "engine/max_stream_gap_ms"
STREAM_GAP_MODES = (str(DEFAULT_MAX_GAP_MS), "500", "1000")  # the first is the default
_LABELS = {str(DEFAULT_MAX_GAP_MS): f"{DEFAULT_MAX_GAP_MS} ms (replies stay smooth)",
           "500": "500 ms", "1000": "1,000 ms (a new prompt answers sooner)"}
_TIP = ("While replies are streaming, a new long prompt is read in the same forward passes, in "
        "pieces. This is the longest the streaming replies may pause for it between two tokens: "
        "longer pauses let each pass read more of the new prompt, so it starts answering sooner.")


class StreamGapSetting(LoadSetting):
    """The setting's modes are milliseconds; the environment variable may name any number."""

    def current(self, settings: QSettings, flag: str | None = None,
                environ: Mapping[str, str] | None = None) -> LoadChoice:
        """$TURBOSPARK_MAX_STREAM_GAP_MS > the setting > 250 ms. LoadChoiceError for a bad
        variable (the app refuses to start on one, as `serve` does)."""
        try:
            env = stream_gap_from_env(environ)
        except ValueError as e:
            raise LoadChoiceError(str(e)) from None
        if env is not None:
            return LoadChoice(f"{env:g}", STREAM_GAP_ENV)
        return self.spec.choose(None, self.load(settings), {})


STREAM_GAP_SETTING = StreamGapSetting(
    STREAM_GAP_KEY, ChoiceSpec("", STREAM_GAP_ENV, STREAM_GAP_MODES, "stream gap"), "stream gap",
    _LABELS, {m: f"{int(m):,} ms" for m in STREAM_GAP_MODES}, _TIP)


def stream_gap_ms(settings: QSettings) -> float:
    """The gap the window's turns carry now, in ms (a bad variable: the default's)."""
    try:
        return float(STREAM_GAP_SETTING.current(settings).mode)
    except LoadChoiceError:
        return float(DEFAULT_MAX_GAP_MS)


class StreamGapField(NoReloadField):
    """The dialog's Stream gap combo box; its note says when a change applies."""

    def __init__(self, choice: LoadChoice, parent: QWidget) -> None:
        super().__init__(STREAM_GAP_SETTING, choice, True, parent)
        if self.combo.findData(choice.mode) < 0:  # a value of the variable's own (disabled then)
            self.combo.addItem(f"{float(choice.mode):,g} ms", choice.mode)
            self.combo.setCurrentIndex(self.combo.count() - 1)
