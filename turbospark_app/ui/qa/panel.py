"""The pacing and cancellation QA panel: a dock with a live plot, level overrides and counters.

    plot        token cadence (tok/s, rolling over RATE_WINDOW_TOKENS) of the turn being
                followed, the cap in force for it (a step line), and the thermal level and
                memory pressure as ladder steps on a second axis (QtCharts)
    controls    force the thermal level / memory pressure (real = the platform's reading);
                the engine re-reads the levels every THERMAL_POLL_TOKENS tokens, so the
                cadence steps down within that many tokens, and back up
    stops       every Stop: phase, tokens, and the Stop-to-ended latency the engine measured
    counters    reused prefix tokens (last turn, total) and slot evictions
    export      "Export Evidence…" (and File › Export QA Evidence…): the plot as PNG and its
                data as CSV and JSON (see qa_export)

Data comes only through the bridge: its `engineEvent` signal (GUI thread), `system_info()`
(polled; never waits behind a forward step), `turn_request(rid)` for the turn's own cap, and
`force_thermal` / `force_memory`, which call the monitors' thread-safe setters. Nothing here
touches an engine-thread object.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from PySide6.QtCharts import QCategoryAxis, QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QEvent, QPointF, QStandardPaths, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QPainter, QPalette, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...engine.pacing import THERMAL_POLL_TOKENS
from ...service import Failed, Finished, Started, Token
from ..formatting import nested, seconds_label
from .power_controls import MEMORY_CHOICES, THERMAL_CHOICES
from .data import QAData, StopRecord
from .engine import host_overhead_text, kv_cache_text
from .export import write_evidence
from ..theme import is_dark

POLL_MS = 250  # level readings while the panel is visible
FLUSH_MS = 100  # series are redrawn at most this often (a repaint per token would cost more)
WINDOW_S = 60.0  # the plot shows the last minute
PANES_MIN_HEIGHT = 400
"""What the docked panel leaves the panes above it: tab bar, a transcript of at least 200 px and
the pane's footer with its status rows and input (two panes side by side: two status rows)."""
# The ladder's steps (engine.power): memory "warning" shares step 2 with thermal "serious".
STEP_LABELS = ("nominal", "fair", "serious", "critical")


def user_cap_of(request: Any) -> float | None:
    """The user's own cap in a TurnRequest (None = uncapped or unknown)."""
    try:
        return request.settings.generation.rate.max_tokens_per_sec
    except AttributeError:
        return None


class QAPanel(QDockWidget):
    """See the module docstring. `bridge` is the EngineBridge (duck-typed in tests)."""

    def __init__(self, bridge: Any, parent: QWidget | None = None, *, clock: Any = time.monotonic,
                 title_of: Callable[[str], str | None] | None = None) -> None:
        """`title_of(conversation_id)` names a conversation in the stop list."""
        super().__init__("Pacing && Cancellation QA", parent)
        self.setObjectName("qaPanel")
        self.setAllowedAreas(Qt.DockWidgetArea.BottomDockWidgetArea | Qt.DockWidgetArea.RightDockWidgetArea)
        self._bridge = bridge
        self._clock = clock
        self._title_of = title_of
        self._t0 = clock()
        self.data = QAData()
        self._dirty = False
        self._level_labels = ("–", "–")  # the thermal / memory labels system_info gave last
        self._build()
        bridge.engineEvent.connect(self._on_event)
        self.poll_timer = QTimer(self)
        self.poll_timer.setInterval(POLL_MS)
        self.poll_timer.timeout.connect(self.poll)
        self.flush_timer = QTimer(self)
        self.flush_timer.setInterval(FLUSH_MS)
        self.flush_timer.timeout.connect(self.flush)
        self.visibilityChanged.connect(self._visibility_changed)
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda *_: self.apply_palette())
        self._sync_forced()
        self._show_figures()
        if getattr(bridge, "power", None) is not None:
            bridge.power.changed.connect(self._power_changed)
        self.poll()
        self.flush()

    # -- construction ----------------------------------------------------------------------

    def _build(self) -> None:
        body = QWidget(self)
        self.chart = QChart()
        self.chart.setMargins(self.chart.margins() * 0)
        self.chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        self.cadence_series = self._series("cadence (tok/s)")
        # Drawn when a level changes; the engine applies it at its next look at the levels.
        self.cap_series = self._series("cap for the levels now")
        self.thermal_series = self._series("thermal step")
        self.memory_series = self._series("memory step")
        for s in (self.cadence_series, self.cap_series, self.thermal_series, self.memory_series):
            self.chart.addSeries(s)
        self.x_axis = QValueAxis()
        self.x_axis.setTitleText("seconds")
        self.x_axis.setLabelFormat("%.0f")
        self.rate_axis = QValueAxis()
        self.rate_axis.setTitleText("tok/s")
        self.rate_axis.setLabelFormat("%g")  # 2.5 stays 2.5
        self.level_axis = QCategoryAxis()
        self.level_axis.setTitleText("level step")
        self.level_axis.setLabelsPosition(QCategoryAxis.AxisLabelsPosition.AxisLabelsPositionOnValue)
        self.level_axis.setRange(-0.25, 3.25)
        for i, label in enumerate(STEP_LABELS):
            self.level_axis.append(label, i)
        self.chart.addAxis(self.x_axis, Qt.AlignmentFlag.AlignBottom)
        self.chart.addAxis(self.rate_axis, Qt.AlignmentFlag.AlignLeft)
        self.chart.addAxis(self.level_axis, Qt.AlignmentFlag.AlignRight)
        for s in (self.cadence_series, self.cap_series, self.thermal_series, self.memory_series):
            s.attachAxis(self.x_axis)
        for s in (self.cadence_series, self.cap_series):
            s.attachAxis(self.rate_axis)
        for s in (self.thermal_series, self.memory_series):
            s.attachAxis(self.level_axis)
        self.view = QChartView(self.chart)
        self.view.setObjectName("qaChart")
        self.view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.view.setMinimumHeight(220)
        self.view.setMinimumWidth(460)
        self.view.setToolTip("Memory pressure uses the same steps: normal 0, warning 2 (like serious), critical 3.")

        self.thermal_combo = QComboBox()
        self.thermal_combo.setObjectName("forceThermal")
        for name, level in THERMAL_CHOICES:
            self.thermal_combo.addItem(name, level)
        self.memory_combo = QComboBox()
        self.memory_combo.setObjectName("forceMemory")
        for name, level in MEMORY_CHOICES:
            self.memory_combo.addItem(name, level)
        tip = (f"Force a level for pacing QA (\"real\" = the platform's reading). The engine re-reads "
               f"the levels every {THERMAL_POLL_TOKENS} tokens, so the cadence follows within that many.")
        self.thermal_combo.setToolTip(tip)
        self.memory_combo.setToolTip(tip)
        self.thermal_combo.activated.connect(self._thermal_chosen)
        self.memory_combo.activated.connect(self._memory_chosen)
        clear = QPushButton("Clear")
        clear.setObjectName("qaClear")
        clear.clicked.connect(self.clear)
        export = QPushButton("Export Evidence…")
        export.setObjectName("qaExport")
        export.setToolTip("Save the plot (PNG) and its data (CSV, JSON) to attach to a bug report")
        export.clicked.connect(self.export_dialog)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Thermal"))
        controls.addWidget(self.thermal_combo)
        controls.addSpacing(12)
        controls.addWidget(QLabel("Memory"))
        controls.addWidget(self.memory_combo)
        controls.addStretch(1)
        controls.addWidget(export)
        controls.addWidget(clear)

        self.cap_label = QLabel(objectName="qaCap")
        self.reuse_label = QLabel(objectName="qaReuse")
        self.evictions_label = QLabel(objectName="qaEvictions")
        self.stops_label = QLabel(objectName="qaStops")
        self.batch_label = QLabel("no batched step yet", objectName="qaBatch")
        self.batch_label.setToolTip("Decode steps of streams decoding at once run as one forward pass: "
                                    "the last step's batch size, and the batched passes so far")
        self.kv_label = QLabel(objectName="qaKVCache")
        self.kv_label.setToolTip("The KV cache's types (Settings › Engine, --cache-type-k / -v), "
                                 "its bytes per token, allocated, and held by the conversations now")
        self.host_label = QLabel(objectName="qaHostOverhead")
        self.host_label.setToolTip("Wall time between decode steps outside llama_decode (sampling, "
                                   "stop strings, detokenizing, events, the API's writes): medians of "
                                   "the last steps, per number of streams in a step")
        for label in (self.cap_label, self.reuse_label, self.evictions_label, self.stops_label,
                      self.batch_label, self.kv_label, self.host_label):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        figures = QFormLayout()
        figures.addRow("Cap now", self.cap_label)
        figures.addRow("Reused prefix", self.reuse_label)
        figures.addRow("Slot evictions", self.evictions_label)
        figures.addRow("Stop latency", self.stops_label)
        figures.addRow("Decode batch", self.batch_label)
        figures.addRow("KV cache", self.kv_label)
        figures.addRow("Host overhead", self.host_label)
        self.stop_table = QTableWidget(0, 5)
        self.stop_table.setObjectName("qaStopTable")
        self.stop_table.setHorizontalHeaderLabels(["at", "conversation", "during", "tokens", "Stop → ended"])
        self.stop_table.verticalHeader().setVisible(False)
        self.stop_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.stop_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.stop_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)  # the conversation's title
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        side_layout.addLayout(figures)
        side_layout.addWidget(self.stop_table, 1)
        self._side_layout = side_layout
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.view)
        split.addWidget(side)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([600, 400])  # the plot gets the room; the lists scroll
        layout = QVBoxLayout(body)
        layout.setContentsMargins(8, 4, 8, 8)
        layout.addLayout(controls)
        layout.addWidget(split, 1)
        self.setWidget(body)
        self.apply_palette()

    def add_section(self, title: str, widget: QWidget) -> None:
        """Another titled list under the stop table (the local API's requests)."""
        self._side_layout.addWidget(QLabel(title))
        self._side_layout.addWidget(widget, 1)

    @staticmethod
    def _series(name: str) -> QLineSeries:
        series = QLineSeries()
        series.setName(name)
        return series

    # -- public ----------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the panel was created (the plot's x axis)."""
        return self._clock() - self._t0

    def poll(self) -> None:
        """Read the levels from system_info (the backend's own report) and redraw the cap."""
        info = self._bridge.system_info()
        thermal = nested(info, "thermal.level")
        memory = nested(info, "memory_pressure.level")
        now = self.now()
        self.data.levels(thermal, memory, now)
        self.data.tick(now)
        self._show_cap(info)
        self._show_batch(info)
        self.kv_label.setText(kv_cache_text(info))
        self.host_label.setText(host_overhead_text(info))
        self._dirty = True

    def _show_batch(self, info: dict[str, Any]) -> None:
        steps = nested(info, "engine.batched_steps")
        if not steps:
            return
        self.batch_label.setText(
            f"now {nested(info, 'engine.last_batch_size') or 1} · {steps:,} batched steps, mean "
            f"{nested(info, 'engine.mean_batch_size')} rows, last {nested(info, 'engine.last_batch_ms')} ms")

    def flush(self) -> None:
        """Redraw the series (only what the window shows) and the axes."""
        if not self._dirty:
            return
        self._dirty = False
        latest = max(self.data.latest, self.now() if self.data.followed is not None else 0.0)
        lo = max(0.0, latest - WINDOW_S)
        hi = max(latest, lo + 10.0)
        self.x_axis.setRange(lo, hi)
        for series, points in ((self.cadence_series, self.data.cadence), (self.cap_series, self.data.cap),
                               (self.thermal_series, self.data.thermal), (self.memory_series, self.data.memory)):
            series.replace(_visible(points, lo))
        peak = max([p[1] for p in self.data.cadence if p[0] >= lo] + [p[1] for p in self.data.cap if p[0] >= lo]
                   + [1.0])
        self.rate_axis.setRange(0.0, _nice_ceiling(peak * 1.15))

    def export_evidence(self, base: str) -> list[str]:
        """Write <base>.png / .csv / .json (see qa_export); returns the paths. Raises OSError."""
        self._dirty = True
        self.flush()
        summary = {"cap": self.cap_label.text(), "reused_prefix": self.reuse_label.text(),
                   "slot_evictions": self.evictions_label.text(), "stop_latency": self.stops_label.text()}
        paths = write_evidence(base, self.data, lambda path: self.view.grab().save(path, "PNG"), summary=summary)
        return [str(p) for p in paths]

    def export_dialog(self) -> list[str]:
        """Ask for a base file name, then export (errors are said in a message box)."""
        if not self.isVisible():
            self.show()
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        start = f"{folder}/turbospark-qa-evidence" if folder else "turbospark-qa-evidence"
        base, _ = QFileDialog.getSaveFileName(self, "Export QA Evidence", start, "PNG + CSV + JSON (*.png)")
        if not base:
            return []
        try:
            return self.export_evidence(base)
        except OSError as e:
            box = QMessageBox(QMessageBox.Icon.Warning, "Export QA Evidence", f"Could not export: {e}",
                              QMessageBox.StandardButton.Ok, self)
            box.open()
            return []

    def clear(self) -> None:
        """Forget the plot, the stops and the counters."""
        self.data.clear(self.now())
        self.stop_table.setRowCount(0)
        self._show_figures()
        self._dirty = True
        self.flush()

    def apply_palette(self) -> None:
        """Chart colours from the window palette (light and dark follow the system)."""
        self.chart.setTheme(QChart.ChartTheme.ChartThemeDark if is_dark() else QChart.ChartTheme.ChartThemeLight)
        pal = self.palette()
        self.chart.setBackgroundBrush(pal.color(QPalette.ColorRole.Base))
        text = pal.color(QPalette.ColorRole.Text)
        self.chart.legend().setLabelColor(text)
        for axis in (self.x_axis, self.rate_axis, self.level_axis):
            axis.setLabelsColor(text)
            axis.setTitleBrush(text)
            axis.setGridLineColor(pal.color(QPalette.ColorRole.Mid))
        cadence = QPen(pal.color(QPalette.ColorRole.Highlight), 2.0)
        self.cadence_series.setPen(cadence)
        cap = QPen(text, 1.5, Qt.PenStyle.DashLine)
        self.cap_series.setPen(cap)
        # The two level lines keep the theme's series colours, thinner and dotted.
        for series in (self.thermal_series, self.memory_series):
            pen = QPen(series.pen())
            pen.setWidthF(1.5)
            pen.setStyle(Qt.PenStyle.DotLine)
            series.setPen(pen)

    # -- reactions -------------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        """Re-colour the chart when the palette changes (system light / dark switch)."""
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.apply_palette()

    def _visibility_changed(self, visible: bool) -> None:
        # Polling and redrawing cost nothing while the dock is hidden; events are still counted.
        if visible:
            self.poll_timer.start()
            self.flush_timer.start()
            self.poll()
            self.flush()
            QTimer.singleShot(0, self.share_height)  # once the dock is laid out
        else:
            self.poll_timer.stop()
            self.flush_timer.stop()

    def share_height(self) -> None:
        """Docked at the bottom of a window, take what the conversation panes can spare: they
        keep `PANES_MIN_HEIGHT` (a readable transcript, the status rows, the input) and the
        panel never goes below its own minimum (its chart) nor above what it asks for."""
        window = self.parentWidget()
        if (not isinstance(window, QMainWindow) or self.isFloating() or not self.isVisible()
                or window.dockWidgetArea(self) != Qt.DockWidgetArea.BottomDockWidgetArea):
            return
        room = window.height() - window.menuBar().height() - window.statusBar().height()
        height = max(self.minimumSizeHint().height(), min(self.sizeHint().height(), room - PANES_MIN_HEIGHT))
        window.resizeDocks([self], [height], Qt.Orientation.Vertical)

    def remote_event(self, event: Any) -> None:
        """A remote turn's event (RemoteHub.engineEvent): its cadence and Stop are recorded
        like a local turn's."""
        self._on_event(event)

    def _event_time(self, event: Any) -> float:
        """When the engine sent `event`, on the plot's axis: its `at` stamp (tokens reach the
        window in batches, see service.handover), or its arrival when it has none or this panel runs
        on a clock of its own (tests)."""
        at = getattr(event, "at", None)
        if at is None or self._clock is not time.monotonic:
            return self.now()
        return at - self._t0

    def _on_event(self, event: Any) -> None:
        now = self.now()
        if isinstance(event, Token):
            self.data.token(event.request_id, self._event_time(event), event.conversation_id, event.index)
            self._dirty = True
        elif isinstance(event, Started):
            request = getattr(self._bridge, "turn_request", lambda _rid: None)(event.request_id)
            self.data.started(event.request_id, user_cap_of(request), now)
            self._show_cap(None)
            self._dirty = True
        elif isinstance(event, Finished):
            before = len(self.data.stops)
            self.data.ended(event.request_id, event.stats, event.conversation_id, now)
            for record in self.data.stops[before:]:
                self._add_stop_row(record)
            self._show_figures()
            self._dirty = True
        elif isinstance(event, Failed):
            self.data.ended(event.request_id, None, event.conversation_id, now)

    def _thermal_chosen(self, index: int) -> None:
        self._bridge.force_thermal(self.thermal_combo.itemData(index))  # PowerControls.changed polls

    def _memory_chosen(self, index: int) -> None:
        self._bridge.force_memory(self.memory_combo.itemData(index))

    def _power_changed(self) -> None:
        self._sync_forced()  # a level forced elsewhere (a test, a script) shows here too
        self.poll()

    def _sync_forced(self) -> None:
        """Show levels forced before the panel existed (TURBOSPARK_SIMULATE_*)."""
        power = getattr(self._bridge, "power", None)
        if power is None:
            for combo in (self.thermal_combo, self.memory_combo):
                combo.setEnabled(False)
                combo.setToolTip("This engine does not pace on the app's monitors: nothing to force.")
            return
        thermal, memory = power.forced()
        self.thermal_combo.setCurrentIndex(max(0, self.thermal_combo.findData(thermal)))
        self.memory_combo.setCurrentIndex(max(0, self.memory_combo.findData(memory)))

    # -- figures ---------------------------------------------------------------------------

    def _show_cap(self, info: dict[str, Any] | None) -> None:
        d = self.data
        if info is not None:
            self._level_labels = (nested(info, "thermal.label") or "unavailable",
                                  nested(info, "memory_pressure.label") or "unavailable")
        cap = d.current_cap()
        user = f"your cap {d.user_cap:g} tok/s" if d.user_cap else "no cap of yours"
        text = f"{cap:.1f} tok/s" if cap else "uncapped"
        self.cap_label.setText(f"{text}  ({user}; thermal {self._level_labels[0]}, "
                               f"memory {self._level_labels[1]})")

    def _show_figures(self) -> None:
        d = self.data
        if d.last_reused is None:
            self.reuse_label.setText("no turn yet")
        else:
            share = f" ({100 * d.reused_total / d.prompt_total:.0f}%)" if d.prompt_total else ""
            self.reuse_label.setText(f"last {d.last_reused[0]}/{d.last_reused[1]} tok · total "
                                     f"{d.reused_total:,}/{d.prompt_total:,} tok{share}")
        self.evictions_label.setText(f"{d.evictions} in {d.turns} turn{'s' if d.turns != 1 else ''}")
        self.stops_label.setText(d.stop_summary())

    def _add_stop_row(self, record: StopRecord) -> None:
        name = self._title_of(record.conversation_id) if self._title_of else None
        row = self.stop_table.rowCount()
        self.stop_table.insertRow(row)
        cells = (f"{record.at:.1f} s", name or record.conversation_id[:8], record.phase,
                 str(record.new_tokens), seconds_label(record.latency))
        for col, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if col in (0, 3, 4):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.stop_table.setItem(row, col, item)
        self.stop_table.scrollToBottom()


def _visible(points: Iterable[tuple[float, float]], lo: float) -> list[QPointF]:
    """The points from just before `lo` on (the one before keeps a step line continuous)."""
    pts = list(points)
    start = 0
    for i in range(len(pts) - 1, -1, -1):
        if pts[i][0] < lo:
            start = i
            break
    return [QPointF(x, y) for x, y in pts[start:]]


def _nice_ceiling(value: float) -> float:
    """5, 10, 20, 25, 50, 100, ... at or above `value`."""
    step = 1.0
    while True:
        for m in (1.0, 2.0, 2.5, 5.0):
            if m * step >= value:
                return m * step
        step *= 10.0
