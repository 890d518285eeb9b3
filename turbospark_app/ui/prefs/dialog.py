"""The Settings dialog: sampling, reply, pacing, prompt and engine settings, validated inline.

It edits the CURRENT conversation (its `settings` JSON and its system prompt in the store) and,
with "Use for new conversations too" (on by default), the app-wide defaults in QSettings
(`defaults/generation`). Session slots are an engine setting: app-wide only
(`engine/session_slots`), applied the next time a model is loaded. Threads (how many llama.cpp
computes with; ui.prefs.threads) is app-wide too; changing it reloads the model once OK is
pressed. Speculation applies from the next reply.

Every field is parsed as it is typed (generation_settings.PARSERS): a bad value shows its
message under the field and OK stays disabled until every field is valid. Values take effect
from the conversation's next turn; a reply streaming now keeps the settings it started with.
"""

from __future__ import annotations

from typing import Any, Mapping

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from ...model.choice.common import LoadChoice
from ...model.choice.speculation import SpeculationChoice
from ...model.choice.threads import ThreadsChoice, performance_cores
from .generation import (
    DEFAULTS,
    SESSION_SLOTS_RANGE,
    Invalid,
    escape,
    merged,
    parse_cache_ram,
    parse_session_slots,
    validate,
)
from .store import read_json, write_json
from .kv_cache import CACHE_TYPE_K_SETTING, CACHE_TYPE_V_SETTING
from .load import ChoiceField
from .speculation import SpeculationField
from .stream_gap import StreamGapField
from .threads import ThreadsField

DEFAULTS_KEY = "defaults/generation"
SLOTS_KEY = "engine/session_slots"
CACHE_RAM_KEY = "engine/cache_ram_mb"
DEFAULT_CACHE_RAM_MB = 1024
DEFAULT_SESSION_SLOTS = 4


def load_defaults(settings: QSettings) -> dict[str, Any]:
    """The app-wide generation defaults (every key; unreadable values fall back)."""
    return merged(read_json(settings, DEFAULTS_KEY, {}))


def save_defaults(settings: QSettings, values: Mapping[str, Any]) -> None:
    """Store the app-wide generation defaults."""
    write_json(settings, DEFAULTS_KEY, merged(values))
    settings.sync()


def load_session_slots(settings: QSettings) -> int:
    """The session-slot count to load the next model with."""
    try:
        return parse_session_slots(read_json(settings, SLOTS_KEY, DEFAULT_SESSION_SLOTS))
    except Invalid:
        return DEFAULT_SESSION_SLOTS


def load_cache_ram(settings: QSettings) -> int:
    """MB of RAM for the states of conversations whose slot was taken (at the next load)."""
    try:
        return parse_cache_ram(read_json(settings, CACHE_RAM_KEY, DEFAULT_CACHE_RAM_MB))
    except Invalid:
        return DEFAULT_CACHE_RAM_MB


def save_cache_ram(settings: QSettings, mb: int) -> None:
    write_json(settings, CACHE_RAM_KEY, int(mb))
    settings.sync()


def save_session_slots(settings: QSettings, slots: int) -> None:
    """Store the session-slot count (used at the next model load)."""
    write_json(settings, SLOTS_KEY, int(slots))
    settings.sync()


class _FieldError(QWidget):
    """A warning icon and a message in a form row of its own under a field; the row is hidden
    while the field is valid (a hidden row takes no room, also not in the dialog's minimum
    size). The icon comes from the style, the text uses the palette: both schemes read well."""

    def __init__(self, form: QFormLayout, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._form = form
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        icon = QLabel(self)
        size = self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(size, size))
        icon.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.text = QLabel(self)
        self.text.setWordWrap(True)
        layout.addWidget(icon)
        layout.addWidget(self.text, 1)
        form.addRow(self)  # spans the label column too: room for the message on one line
        self._row = form.rowCount() - 1
        form.setRowVisible(self._row, False)

    def show_message(self, message: str | None) -> None:
        self.text.setText(message or "")
        self._form.setRowVisible(self._row, bool(message))


class SettingsDialog(QDialog):
    """See the module docstring. Read the result with `values()`, `system_prompt()`,
    `session_slots()`, `load_changes()` and `use_as_defaults()` after `accepted`."""

    def __init__(
        self,
        values: Mapping[str, Any],
        system_prompt: str | None,
        *,
        session_slots: int = DEFAULT_SESSION_SLOTS,
        cache_ram: int = DEFAULT_CACHE_RAM_MB,
        max_context: int | None = None,
        conversation_title: str = "",
        threads: ThreadsChoice | None = None,
        model_loaded: bool = True,
        speculation: SpeculationChoice | None = None,
        kv_cache: tuple[LoadChoice, LoadChoice] | None = None,
        stream_gap: LoadChoice | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`threads`: the current choice (default: auto, not overridden); `model_loaded`:
        False when no model is loaded (a Threads change then applies at the next load);
        `kv_cache`: the current K and V cache type choices (default f16)."""
        super().__init__(parent)
        self._threads = threads or ThreadsChoice(performance_cores(), "auto", "default")
        self._speculation = speculation or SpeculationChoice("off", "default")
        self._kv_cache = kv_cache or (LoadChoice("f16", "default"), LoadChoice("f16", "default"))
        self._stream_gap = stream_gap or LoadChoice("250", "default")
        self._model_loaded = model_loaded
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self.setMinimumWidth(780)
        self._max_context = max_context or None
        self._fields: dict[str, QWidget] = {}
        self._errors: dict[str, _FieldError] = {}
        self.errors: dict[str, str] = {}
        self._loaded_slots = session_slots
        self._loaded_cache_ram = cache_ram
        self._build(conversation_title)
        self.show_values(merged(values), system_prompt, session_slots)
        # Sized once the hidden message rows are out of the groups' cached minimum sizes.
        for group in self.findChildren(QGroupBox):
            group.updateGeometry()
        self.adjustSize()  # (this refreshes the layout's cached sizes)
        height = self.minimumSizeHint().height()
        layout = self.layout()
        if layout is not None and layout.hasHeightForWidth():  # wrapped notes at this width
            height = max(height, layout.totalHeightForWidth(self.minimumWidth()))
        self.resize(self.minimumWidth(), height)

    # -- construction ----------------------------------------------------------------------

    def _line(self, key: str, placeholder: str = "", tip: str = "") -> QLineEdit:
        edit = QLineEdit(self)
        edit.setObjectName(key)
        edit.setPlaceholderText(placeholder)
        edit.setToolTip(tip)
        edit.setMaximumWidth(160)
        edit.textChanged.connect(self.revalidate)
        self._fields[key] = edit
        return edit

    def _row(self, form: QFormLayout, label: str, key: str, widget: QWidget) -> None:
        form.addRow(label, widget)
        error = _FieldError(form, self)
        error.setObjectName(f"{key}Error")
        self._errors[key] = error

    @staticmethod
    def _form(box: QGroupBox) -> QFormLayout:
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        return form

    def _build(self, conversation_title: str) -> None:
        sampling = QGroupBox("Sampling", self)
        form = self._form(sampling)
        self._row(form, "Temperature", "temperature", self._line("temperature", "0.7", "0 = greedy: always the most likely token"))
        self._row(form, "Top-k", "top_k", self._line("top_k", "40", "Keep the k most likely tokens (0 = off)"))
        self._row(form, "Top-p", "top_p", self._line("top_p", "0.95", "Keep the smallest set whose probability reaches p (1 = off)"))
        self._row(form, "Min-p", "min_p", self._line("min_p", "0.05", "Drop tokens below p × the top token's probability (0 = off)"))
        self._row(form, "Repetition penalty", "repetition_penalty",
                  self._line("repetition_penalty", "1.0", "Above 1 discourages repeating recent tokens (1 = off)"))
        self._row(form, "Seed", "seed", self._line("seed", "random", "A whole number makes replies reproducible; blank = random"))

        reply = QGroupBox("Reply and pacing", self)
        form = self._form(reply)
        self._row(form, "Max new tokens", "max_new_tokens", self._line("max_new_tokens", "512"))
        self._row(form, "Tokens/sec cap", "max_tokens_per_sec",
                  self._line("max_tokens_per_sec", "no cap", "Pace the reply to at most this many tokens per "
                             "second (blank or 0 = no cap). A hot machine or memory pressure lowers it further."))
        self.stop_strings = QPlainTextEdit(self)
        self.stop_strings.setObjectName("stop_strings")
        self.stop_strings.setPlaceholderText("one per line; \\n is a line break")
        self.stop_strings.setTabChangesFocus(True)
        self.stop_strings.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 12)
        self.stop_strings.textChanged.connect(self.revalidate)
        self._fields["stop_strings"] = self.stop_strings
        self._row(form, "Stop strings", "stop_strings", self.stop_strings)

        title = f"This conversation — {conversation_title}" if conversation_title else "This conversation"
        prompt_box = QGroupBox(title, self)
        form = self._form(prompt_box)
        self.system_prompt_edit = QPlainTextEdit(self)
        self.system_prompt_edit.setObjectName("system_prompt")
        self.system_prompt_edit.setPlaceholderText("blank = the model's default system prompt")
        self.system_prompt_edit.setTabChangesFocus(True)
        self.system_prompt_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 5 + 12)
        form.addRow("System prompt", self.system_prompt_edit)

        engine = QGroupBox("Engine", self)
        form = self._form(engine)
        self.prefill_mode = QComboBox(self)
        self.prefill_mode.setObjectName("chunked_prefill")
        self.prefill_mode.addItem("chunked", True)
        self.prefill_mode.addItem("token by token", False)
        self.prefill_mode.setToolTip("How the prompt is fed to the model: several tokens per forward pass, or one")
        self.prefill_mode.currentIndexChanged.connect(self.revalidate)
        self._fields["chunked_prefill"] = self.prefill_mode
        form.addRow("Prefill", self.prefill_mode)
        self._row(form, "Chunk size", "chunk_size", self._line("chunk_size", "512", "Prompt tokens per forward pass"))
        self._row(form, "Tool steps", "tool_step_limit",
                  self._line("tool_step_limit", "10", "Tool steps per message before the loop is ended (1–100)"))
        self._row(form, "Session slots", "session_slots",
                  self._line("session_slots", str(DEFAULT_SESSION_SLOTS),
                             f"Conversations whose KV cache stays in memory ({SESSION_SLOTS_RANGE[0]}–"
                             f"{SESSION_SLOTS_RANGE[1]}); app-wide"))
        self._row(form, "Conversations in RAM", "cache_ram",
                  self._line("cache_ram", str(DEFAULT_CACHE_RAM_MB),
                             "MB of memory for the KV state of conversations whose slot another one "
                             "took: they come back without reading their history again (0 = none "
                             "kept); app-wide"))
        self.slots_note = QLabel("Applies the next time a model is loaded (File › Open Model… or a restart).", self)
        self.slots_note.setObjectName("slotsNote")
        self.slots_note.setWordWrap(True)
        self.slots_note.setVisible(False)
        form.addRow("", self.slots_note)
        self.threads_field = ThreadsField(self._threads, self._model_loaded, self)
        form.addRow("Threads", self.threads_field.combo)
        form.addRow("", self.threads_field.note)
        self.speculation_field = SpeculationField(self._speculation, self)
        form.addRow("Speculation", self.speculation_field.combo)
        form.addRow("", self.speculation_field.note)
        self.stream_gap_field = StreamGapField(self._stream_gap, self)
        form.addRow("Stream gap", self.stream_gap_field.combo)
        form.addRow("", self.stream_gap_field.note)
        self.kv_fields = {key: ChoiceField(setting, choice, self._model_loaded, self) for key, setting, choice
                          in (("cache_type_k", CACHE_TYPE_K_SETTING, self._kv_cache[0]),
                              ("cache_type_v", CACHE_TYPE_V_SETTING, self._kv_cache[1]))}
        for key, label in (("cache_type_k", "KV cache K"), ("cache_type_v", "KV cache V")):
            form.addRow(label, self.kv_fields[key].combo)
            form.addRow("", self.kv_fields[key].note)
        for combo in (self.threads_field.combo, self.speculation_field.combo, self.stream_gap_field.combo,
                      *(f.combo for f in self.kv_fields.values())):
            combo.currentIndexChanged.connect(self.revalidate)  # (grows for the notes)

        self.defaults_check = QCheckBox("Use these settings for new conversations too", self)
        self.defaults_check.setObjectName("useAsDefaults")
        self.defaults_check.setChecked(True)
        self.summary = QLabel(self)
        self.summary.setObjectName("settingsSummary")
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults, self)
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(self.restore_defaults)

        columns = QHBoxLayout()
        left, right = QVBoxLayout(), QVBoxLayout()
        left.addWidget(sampling)
        left.addWidget(reply)
        left.addStretch(1)
        right.addWidget(prompt_box)
        right.addWidget(engine)
        right.addStretch(1)
        columns.addLayout(left, 1)
        columns.addLayout(right, 1)
        footer = QHBoxLayout()
        footer.addWidget(self.defaults_check)
        footer.addStretch(1)
        footer.addWidget(self.summary)
        layout = QVBoxLayout(self)
        layout.addLayout(columns, 1)
        layout.addLayout(footer)
        layout.addWidget(self.buttons)

    # -- values ----------------------------------------------------------------------------

    def show_values(self, values: Mapping[str, Any], system_prompt: str | None, session_slots: int) -> None:
        """Fill the fields (stored values are shown as the user would type them)."""
        v = merged(values)
        for key in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_new_tokens", "chunk_size",
                    "tool_step_limit"):
            self._fields[key].setText(f"{v[key]:g}" if isinstance(v[key], float) else str(v[key]))
        self._fields["seed"].setText("" if v["seed"] is None else str(v["seed"]))
        cap = v["max_tokens_per_sec"]
        self._fields["max_tokens_per_sec"].setText(f"{cap:g}" if cap else "")
        self.stop_strings.setPlainText("\n".join(escape(s) for s in v["stop_strings"]))
        self.prefill_mode.setCurrentIndex(self.prefill_mode.findData(v["chunked_prefill"]))
        self._fields["session_slots"].setText(str(session_slots))
        self._fields["cache_ram"].setText(str(self._loaded_cache_ram))
        if system_prompt is not None:
            self.system_prompt_edit.setPlainText(system_prompt)
        self.revalidate()

    def restore_defaults(self) -> None:
        """The built-in defaults (the system prompt and session slots are left as they are)."""
        self.show_values(DEFAULTS, None, int(self._fields["session_slots"].text() or DEFAULT_SESSION_SLOTS))

    def raw(self) -> dict[str, Any]:
        """The fields as typed."""
        out: dict[str, Any] = {key: w.text() for key, w in self._fields.items() if isinstance(w, QLineEdit)}
        out.pop("session_slots")
        out.pop("cache_ram")
        out["stop_strings"] = self.stop_strings.toPlainText()
        out["chunked_prefill"] = bool(self.prefill_mode.currentData())
        return out

    def values(self) -> dict[str, Any]:
        """The parsed generation settings (call when valid); not `thinking`, which is the pane's
        Think toggle (applying the dialog leaves it as it is)."""
        values = merged(self.raw())
        values.pop("thinking", None)
        values.pop("tools", None)  # the pane's Tools button's
        values.pop("collections", None)  # the pane's Collections button's
        return values

    def system_prompt(self) -> str | None:
        """The conversation's system prompt; None = the model's default."""
        return self.system_prompt_edit.toPlainText().strip() or None

    def session_slots(self) -> int:
        """The session slots typed (call when valid)."""
        return parse_session_slots(self._fields["session_slots"].text())

    def cache_ram(self) -> int:
        """The MB typed for conversations in RAM (call when valid)."""
        return parse_cache_ram(self._fields["cache_ram"].text())

    def threads_change(self) -> str | None:
        """The Threads mode picked when it differs from the current one (the model reloads),
        else None."""
        return self.threads_field.mode() if self.threads_field.changed() else None

    def speculation_change(self) -> str | None:
        """The speculation mode picked when it differs from the current one, else None."""
        return self.speculation_field.mode() if self.speculation_field.changed() else None

    def stream_gap_change(self) -> str | None:
        """The stream gap picked (ms) when it differs from the current one, else None."""
        return self.stream_gap_field.mode() if self.stream_gap_field.changed() else None

    def load_changes(self) -> dict[str, str]:
        """The load options changed ({"threads": "2", "cache_type_v": "q8_0"}): one reload
        applies them."""
        changes = {"threads": self.threads_change(),
                   **{key: f.mode() if f.changed() else None for key, f in self.kv_fields.items()}}
        return {key: mode for key, mode in changes.items() if mode is not None}

    def use_as_defaults(self) -> bool:
        """Also store the generation settings as app-wide defaults."""
        return self.defaults_check.isChecked()

    # -- validation ------------------------------------------------------------------------

    def revalidate(self) -> None:
        """Parse every field; show each message; OK only when all are valid."""
        if not self._errors:  # still building
            return
        errors = validate(self.raw(), self._max_context)
        try:
            slots = parse_session_slots(self._fields["session_slots"].text())
            ram = parse_cache_ram(self._fields["cache_ram"].text())
            self.slots_note.setVisible(slots != self._loaded_slots or ram != self._loaded_cache_ram)
        except Invalid as e:
            key = "session_slots" if "Session slots" in str(e) else "cache_ram"
            errors[key] = str(e)
            self.slots_note.setVisible(False)
        self._fields["chunk_size"].setEnabled(bool(self.prefill_mode.currentData()))
        self.errors = errors
        for key, widget in self._errors.items():
            widget.show_message(errors.get(key))
        self.ok_button.setEnabled(not errors)
        n = len(errors)
        self.summary.setText("" if not n else f"{n} setting{'s' if n != 1 else ''} to fix")
        # Grow when messages appear instead of squeezing them into the fields' rows.
        layout = self.layout()
        if layout is not None:
            layout.activate()
            need = layout.minimumSize().height()
            if layout.hasHeightForWidth():  # (wrapped notes: their height depends on the width)
                need = max(need, layout.totalHeightForWidth(self.width()))
            if self.height() < need:
                self.resize(self.width(), need)
