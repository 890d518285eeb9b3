"""How a model load is configured by the user, and who decided: a `--flag`, else an environment
variable, else the app's setting, else the default (speculation; threads count likewise).

Cheap to import (no numpy): the settings dialog and the CLI's parser read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping


class LoadChoiceError(ValueError):
    """A mode that does not exist; the message names where it came from."""


@dataclass(frozen=True)
class ChoiceSpec:
    """One load option: its flag, environment variable, modes (the first is the default) and
    what a mode is called in messages ("weight mode")."""

    flag: str
    env: str
    modes: tuple[str, ...]
    noun: str

    @property
    def default(self) -> str:
        return self.modes[0]

    def parse(self, text: str, where: str) -> str:
        """`text` as a mode; LoadChoiceError naming `where` when it is none."""
        mode = text.strip().lower()
        if mode not in self.modes:
            options = f"{', '.join(self.modes[:-1])} or {self.modes[-1]}"
            raise LoadChoiceError(f"{where}={text!r} is not a {self.noun} (choose {options})")
        return mode

    def from_env(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The environment variable checked: None when unset or blank; LoadChoiceError when invalid."""
        raw = (os.environ if environ is None else environ).get(self.env, "")
        return self.parse(raw, self.env) if raw.strip() else None

    def choose(self, flag: str | None = None, setting: Any = None,
               environ: Mapping[str, str] | None = None) -> "LoadChoice":
        """flag > environment > setting > default (an unreadable setting counts as unset).
        Raises LoadChoiceError for a bad flag or environment value."""
        if flag:
            return LoadChoice(self.parse(flag, self.flag), self.flag)
        env = self.from_env(environ)
        if env is not None:
            return LoadChoice(env, self.env)
        if isinstance(setting, str) and setting.strip().lower() in self.modes:
            return LoadChoice(setting.strip().lower(), "setting")
        return LoadChoice(self.default, "default")


@dataclass(frozen=True)
class LoadChoice:
    """The mode to load with and its source: the flag ("--weights"), the environment variable's
    name, "setting" or "default"."""

    mode: str
    source: str

    @property
    def overridden(self) -> bool:
        """Chosen outside the app (flag or environment): the app's setting does not apply."""
        return self.source not in ("setting", "default")


def engine_label(info: Mapping[str, Any]) -> str:
    """What runs the loaded model, from a backend's model_info: "llama.cpp · CPU AVX2 · 2
    threads", "llama.cpp · Metal (Apple M2)"; "" when unknown."""
    return str(info.get("runs_on") or "")
