"""The shared shape of ThermalMonitor and MemoryMonitor: a discovered source plus a QA override.

Threading: the engine thread calls `probe()` every few tokens while the GUI thread calls
`read()` (status bar, system info) and `set_simulated()` (QA panel). The override is one
immutable `(level, origin)` tuple that the setter swaps in a single attribute store, so a
reader sees either the old or the new override, never a mix. Sources keep no mutable state
that a torn read could corrupt (see each source).
"""

from __future__ import annotations

import threading
import time
from typing import Generic, Mapping, Protocol, Self, TypeVar

from turbospark_app.engine.power import MemoryPressure, ThermalLevel

from .reading import SIMULATED_SOURCE, MemoryReading, ThermalReading
from .simulation import simulation_from_env

L = TypeVar("L", ThermalLevel, MemoryPressure)
R = TypeVar("R", ThermalReading, MemoryReading)

RUNTIME_ORIGIN = "set at run time"
PROBE_MAX_AGE_S = 0.25  # probe() reuses a real level this recent (levels move over seconds)


class LevelSource(Protocol[L]):
    """A platform probe. `read()` returns (level or None when unavailable, a human detail).

    `read()` must be cheap (it is polled during decode) and must not raise for expected
    platform failures: it reports them as (None, reason).
    """

    name: str

    def read(self) -> tuple[L | None, str]: ...


class LevelMonitor(Generic[L, R]):
    """A source, an optional forced level, and the two ways to ask: `read()` and `probe()`."""

    _level_type: type
    _reading_type: type
    _pacing_default: L  # what probe() returns when the source is unavailable
    _env_name: str  # the simulation variable (simulation.THERMAL_ENV / MEMORY_ENV)
    _settings_field: str  # its field of simulation.SimulationSettings

    @staticmethod
    def _discover() -> LevelSource[L]:
        raise NotImplementedError

    def __init__(
        self,
        source: LevelSource[L] | None = None,
        *,
        simulated: L | None = None,
        simulated_origin: str = "a setting",
    ) -> None:
        """`source` None = the platform's source, discovered now (once)."""
        self._source = self._discover() if source is None else source
        self._set_lock = threading.Lock()
        self._override: tuple[L, str] | None = None
        self._last_probe: tuple[float, L] | None = None  # (monotonic time, level) of probe()
        if simulated is not None:
            self.set_simulated(simulated, origin=simulated_origin)

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        source: LevelSource[L] | None = None,
    ) -> Self:
        """A monitor with its simulation variable applied. Raises SimulationError at once on an
        invalid value of either simulation variable (call it at startup)."""
        settings = simulation_from_env(environ)
        simulated = getattr(settings, cls._settings_field)
        return cls(source, simulated=simulated, simulated_origin=cls._env_name)

    @property
    def source(self) -> LevelSource[L]:
        """The platform source found at construction (discovery is done once)."""
        return self._source

    @property
    def simulated(self) -> L | None:
        """The forced level, or None when readings are real."""
        override = self._override
        return None if override is None else override[0]

    def set_simulated(self, level: L | None, *, origin: str = RUNTIME_ORIGIN) -> None:
        """Force `level` (marked simulated everywhere), or None to go back to real readings.

        Safe to call from any thread while another thread polls `probe()` / `read()`.
        """
        if level is not None and not isinstance(level, self._level_type):
            raise TypeError(
                f"{type(self).__name__}.set_simulated needs a {self._level_type.__name__} "
                f"or None, not {level!r}"
            )
        with self._set_lock:
            # One attribute store of an immutable tuple: readers need no lock.
            self._override = None if level is None else (level, origin)

    def read(self) -> R:
        """The reading to show: forced, real, or unavailable (with the reason in `detail`)."""
        override = self._override
        if override is not None:
            level, origin = override
            return self._reading_type(
                level=level,
                source=SIMULATED_SOURCE,
                simulated=True,
                detail=f"forced by {origin}; real source: {self._source.name}",
            )
        level, detail = self._read_source()
        return self._reading_type(
            level=level, source=self._source.name, simulated=False, detail=detail
        )

    def probe(self) -> L:
        """The level for pacing (RateConfig.thermal_probe / memory_probe). Never None.

        Unavailable counts as NOMINAL / NORMAL here, because the engine cannot step on an
        unknown; `read()` still says "unavailable".
        """
        override = self._override
        if override is not None:
            return override[0]
        # A real level read less than PROBE_MAX_AGE_S ago is the level now: each stream polls
        # every few tokens, on the engine thread, between decode steps (a file read each time).
        now = time.monotonic()
        last = self._last_probe
        if last is not None and now - last[0] < PROBE_MAX_AGE_S:
            return last[1]
        level, _ = self._read_source()
        level = self._pacing_default if level is None else level
        self._last_probe = (now, level)
        return level

    def __call__(self) -> L:
        """Same as `probe()`, so the monitor itself can be passed as a probe."""
        return self.probe()

    def _read_source(self) -> tuple[L | None, str]:
        try:
            return self._source.read()
        except Exception as exc:  # noqa: BLE001 - a probe must never kill a streaming reply
            return None, f"{self._source.name} failed: {exc!r}"
