"""Fakes for the QA panel, settings, models and first-run tests (issue 6).

* `PacedLoopBackend`: ui_fakes.EngineLoopBackend (the REAL engine step loop over a scripted
  byte-level producer) that paces on given thermal / memory monitors, as LlamaChatBackend does,
  and reports their readings in system_info. So a level forced on the monitors changes the
  real pacer's cap within THERMAL_POLL_TOKENS tokens.
* `fixed_monitors()`: monitors over sources that always read NOMINAL / NORMAL (a test must not
  depend on the machine's real temperature).
* `StubBridge`: the bridge surface the QA panel uses, driven by hand (no engine thread).
* `RecordingBackend`: a FakeBackend that records prepared turns and names its model file.
* `issue6_window`: a MainWindow built like the app builds it (power controls, model factory).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from PySide6.QtCore import QObject, Signal

from turbospark_app.chat.api import PreparedTurn
from turbospark_app.engine.power import MemoryPressure, ThermalLevel
from turbospark_app.readings import MemoryMonitor, ThermalMonitor
from turbospark_app.readings.system_info import _reading_dict
from turbospark_app.ui.qa.power_controls import PowerControls
from ui_fakes import EngineLoopBackend, FakeBackend, fake_factory


class _FixedSource:
    def __init__(self, name: str, level: Any) -> None:
        self.name = name
        self.level = level

    def read(self) -> tuple[Any, str]:
        return self.level, "fixed for tests"


def fixed_monitors() -> tuple[ThermalMonitor, MemoryMonitor]:
    """Monitors whose real readings are NOMINAL / NORMAL."""
    return (ThermalMonitor(_FixedSource("test thermal", ThermalLevel.NOMINAL)),
            MemoryMonitor(_FixedSource("test memory", MemoryPressure.NORMAL)))


def fixed_power() -> PowerControls:
    """PowerControls over `fixed_monitors()`."""
    return PowerControls(*fixed_monitors())


class PacedLoopBackend(EngineLoopBackend):
    """See the module docstring."""

    def __init__(self, thermal: ThermalMonitor, memory: MemoryMonitor,
                 replies: Sequence[str] = ("x" * 400,), **kwargs: Any) -> None:
        super().__init__(replies, **kwargs)
        self.thermal = thermal
        self.memory = memory

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]):
        """The real step loop, with the monitors as its pacing probes (as LlamaChatBackend)."""
        gen = turn.settings.generation
        rate = dataclasses.replace(gen.rate, thermal_probe=self.thermal.probe, memory_probe=self.memory.probe)
        settings = dataclasses.replace(turn.settings, generation=dataclasses.replace(gen, rate=rate))
        return super().stream_turn(dataclasses.replace(turn, settings=settings), cancel)

    def system_info(self) -> dict[str, Any]:
        """The base document with the monitors' real readings."""
        info = super().system_info()
        info["thermal"] = _reading_dict(self.thermal.read())
        info["memory_pressure"] = _reading_dict(self.memory.read())
        return info


class StubBridge(QObject):
    """What QAPanel reads from the EngineBridge, set by the test."""

    engineEvent = Signal(object)

    def __init__(self, power: PowerControls | None = None) -> None:
        super().__init__()
        self.power = power
        self.info: dict[str, Any] = {
            "thermal": {"level": "nominal", "label": "nominal"},
            "memory_pressure": {"level": "normal", "label": "normal"},
        }
        self.requests: dict[int, Any] = {}
        self.forced: list[tuple[str, Any]] = []

    def system_info(self) -> dict[str, Any]:
        return self.info

    def turn_request(self, request_id: int) -> Any:
        return self.requests.get(request_id)

    def force_thermal(self, level: ThermalLevel | None) -> None:
        self.forced.append(("thermal", level))
        name = (level or ThermalLevel.NOMINAL).name.lower()
        self.info["thermal"] = {"level": name, "label": name + (" (simulated)" if level is not None else "")}
        if self.power is not None:  # last: its `changed` makes the panel read `info`
            self.power.force_thermal(level)

    def force_memory(self, level: MemoryPressure | None) -> None:
        self.forced.append(("memory", level))
        name = (level or MemoryPressure.NORMAL).name.lower()
        self.info["memory_pressure"] = {"level": name, "label": name + (" (simulated)" if level is not None else "")}
        if self.power is not None:
            self.power.force_memory(level)


@dataclasses.dataclass
class RecordingBackend(FakeBackend):
    """A FakeBackend that records every prepared turn and reports a model file identity, so
    model switches and token-id reuse can be checked."""

    model_name: str = "fake-model"
    prepared: list = dataclasses.field(default_factory=list)

    def prepare_turn(self, session_id: str, messages: Any, settings: Any, *,
                     continue_final: bool = False) -> PreparedTurn:
        self.prepared.append((session_id, tuple(messages), settings))
        return super().prepare_turn(session_id, messages, settings, continue_final=continue_final)

    def model_info(self) -> dict[str, Any]:
        info = super().model_info()
        info.update(name=self.model_name, path=f"/models/{self.model_name}.gguf",
                    file_name=f"{self.model_name}.gguf", file_size_bytes=1000 + len(self.model_name))
        return info


def issue6_window(ui: Any, backend: Any, *, power: PowerControls | None = None,
                  model_factory: Callable[[str], Any] | None = None, slots: int = 4) -> Any:
    """A shown MainWindow (through app.build_window) over `backend`, with QA power controls and
    a model factory, registered with the UiHarness `ui` for tear-down."""
    from turbospark_app.ui.app import build_window

    if getattr(backend, "gate", None) is not None:
        ui.gates.append(backend.gate)
    w = build_window(fake_factory(backend), session_slots=slots, store_path=ui.store_path,
                     settings=ui.settings(), power=power, model_factory=model_factory)
    ui.qtbot.addWidget(w)
    w.show()
    ui.windows.append(w)
    ui.qtbot.waitUntil(lambda: w.bridge.backend_state in ("ready", "failed"), timeout=5000)
    return w

