"""Generation settings: parsing with messages, the mapping to TurnSettings, the Settings dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PySide6.QtCore import QSettings

from turbospark_app.ui.prefs.generation import (
    DEFAULTS,
    escape,
    merged,
    parse_stop_strings,
    to_turn_settings,
    unescape,
    validate,
)
from turbospark_app.ui.prefs.dialog import (
    SettingsDialog,
    load_defaults,
    load_session_slots,
    save_defaults,
    save_session_slots,
)

# What the dialog edits: every setting but the pane's Think toggle (`thinking`) and Tools button.
EDITED = {k: v for k, v in DEFAULTS.items() if k not in ("thinking", "tools", "collections")}


# -- the mapping ---------------------------------------------------------------------------------


def test_every_setting_reaches_the_turn() -> None:
    values = dict(DEFAULTS, temperature=0.3, top_k=12, top_p=0.8, min_p=0.1, repetition_penalty=1.15,
                  seed=42, stop_strings=["User:", "\n\n"], max_new_tokens=64, max_tokens_per_sec=5,
                  chunked_prefill=False, chunk_size=32)
    turn = to_turn_settings(values, "Be brief.")
    g = turn.generation
    assert (g.shaping.temperature, g.shaping.top_k, g.shaping.top_p, g.shaping.min_p) == (0.3, 12, 0.8, 0.1)
    assert g.shaping.repetition_penalty == 1.15 and g.shaping.seed == 42
    assert g.stop_strings == ("User:", "\n\n") and g.max_new_tokens == 64
    assert g.rate.max_tokens_per_sec == 5.0
    assert turn.chunked_prefill is False and turn.chunk_size == 32 and turn.system_prompt == "Be brief."


def test_blank_or_zero_cap_and_blank_seed_mean_off() -> None:
    turn = to_turn_settings(merged({"max_tokens_per_sec": "", "seed": ""}), "")
    assert turn.generation.rate.max_tokens_per_sec is None and turn.generation.shaping.seed is None
    assert turn.system_prompt is None
    assert to_turn_settings({"max_tokens_per_sec": 0}, None).generation.rate.max_tokens_per_sec is None


def test_unreadable_stored_values_fall_back() -> None:
    stored = {"temperature": "hot", "top_p": 7, "seed": -3, "stop_strings": 5, "chunk_size": 0, "top_k": 5}
    assert merged(stored, {"temperature": 0.2}) == dict(DEFAULTS, temperature=0.2, top_k=5)


@pytest.mark.parametrize("key, text, message", [
    ("temperature", "-0.1", "Temperature must be between 0 and 2"),
    ("temperature", "warm", "Temperature must be a number, not “warm”"),
    ("top_k", "2.5", "Top-k must be a whole number"),
    ("top_p", "0", "Top-p must be above 0 and at most 1"),
    ("min_p", "1", "Min-p must be at least 0 and below 1"),
    ("repetition_penalty", "0", "Repetition penalty must be above 0"),
    ("seed", "-1", "Seed must be a whole number from 0"),
    ("max_new_tokens", "", "Max new tokens is required"),
    ("max_new_tokens", "0", "Max new tokens must be between 1 and 32768"),
    ("max_tokens_per_sec", "5000", "between 0 and 1000"),
    ("chunk_size", "0", "Chunk size must be between 1 and 4096"),
    ("stop_strings", "\n".join(f"s{i}" for i in range(17)), "At most 16 stop strings"),
])
def test_messages_say_what_is_wrong(key: str, text: str, message: str) -> None:
    errors = validate({key: text})
    assert set(errors) == {key} and message in errors[key]


def test_reply_budget_must_leave_room_in_the_context() -> None:
    assert "context of 2048" in validate({"max_new_tokens": "2048"}, max_context=2048)["max_new_tokens"]
    assert validate({"max_new_tokens": "2047"}, max_context=2048) == {}


def test_stop_strings_one_per_line_with_escapes() -> None:
    assert parse_stop_strings("User:\n\n  \n\\n\\n\nA\\\\n") == ["User:", "\n\n", "A\\n"]


@given(st.text())
def test_escape_round_trips(text: str) -> None:
    assert unescape(escape(text)) == text


# -- persistence ---------------------------------------------------------------------------------


def test_defaults_and_slots_persist_in_qsettings(tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert load_defaults(settings) == DEFAULTS and load_session_slots(settings) == 4
    save_defaults(settings, {"max_tokens_per_sec": 5, "stop_strings": ["END"], "seed": 7})
    save_session_slots(settings, 2)
    again = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert load_defaults(again) == dict(DEFAULTS, max_tokens_per_sec=5.0, stop_strings=["END"], seed=7)
    assert load_session_slots(again) == 2


# -- the dialog ----------------------------------------------------------------------------------


@pytest.fixture
def dialog(qtbot):
    d = SettingsDialog(dict(DEFAULTS, max_tokens_per_sec=5.0, stop_strings=["User:", "\n\n"]), "Be brief.",
                       session_slots=4, max_context=2048, conversation_title="Pacing")
    qtbot.addWidget(d)
    d.show()
    return d


def test_dialog_shows_the_values_as_typed(dialog) -> None:
    f = dialog._fields
    assert f["max_tokens_per_sec"].text() == "5" and f["seed"].text() == ""
    assert dialog.stop_strings.toPlainText() == "User:\n\\n\\n"
    assert dialog.system_prompt_edit.toPlainText() == "Be brief."
    assert dialog.ok_button.isEnabled() and dialog.values() == dict(EDITED, max_tokens_per_sec=5.0,
                                                                      stop_strings=["User:", "\n\n"])


def test_invalid_input_disables_ok_with_an_inline_message(dialog, qtbot) -> None:
    dialog._fields["top_p"].selectAll()
    qtbot.keyClicks(dialog._fields["top_p"], "1.5")
    assert not dialog.ok_button.isEnabled()
    error = dialog._errors["top_p"]
    assert error.isVisible() and "Top-p must be above 0 and at most 1" in error.text.text()
    assert dialog.summary.text() == "1 setting to fix"
    dialog._fields["seed"].setText("x")
    assert dialog.summary.text() == "2 settings to fix"
    dialog._fields["top_p"].setText("0.9")
    dialog._fields["seed"].setText("123")
    assert dialog.ok_button.isEnabled() and not error.isVisible() and dialog.summary.text() == ""
    assert dialog.values()["seed"] == 123 and dialog.values()["top_p"] == 0.9


def test_engine_fields(dialog) -> None:
    dialog.prefill_mode.setCurrentIndex(dialog.prefill_mode.findText("token by token"))
    assert not dialog._fields["chunk_size"].isEnabled() and dialog.values()["chunked_prefill"] is False
    assert not dialog.slots_note.isVisible()
    dialog._fields["session_slots"].setText("2")
    assert dialog.slots_note.isVisible() and dialog.session_slots() == 2
    dialog._fields["session_slots"].setText("99")
    assert "Session slots must be between 1 and 16" in dialog.errors["session_slots"]
    assert not dialog.ok_button.isEnabled()


def test_restore_defaults_keeps_the_system_prompt(dialog) -> None:
    dialog._fields["temperature"].setText("bad")
    dialog.restore_defaults()
    assert dialog.ok_button.isEnabled() and dialog.values() == EDITED
    assert dialog.system_prompt() == "Be brief."
    dialog.system_prompt_edit.setPlainText("   ")
    assert dialog.system_prompt() is None  # blank = the model's default


# -- in the window: applied from the next turn, persisted ---------------------------------------


def test_settings_apply_from_the_next_turn_and_persist(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send, wait_idle

    backend = RecordingBackend(replies=("one two three four five six",), step_delay=0.01)
    w = issue6_window(ui, backend)
    pane = w.area.current_pane()
    send(qtbot, pane, "first")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    w.findChild(type(w.open_model_action), "actionSettings").trigger()
    dialog = w.settings_dialog
    assert isinstance(dialog, SettingsDialog) and dialog.isVisible()
    assert dialog._max_context == 4096  # the loaded model's context bounds "Max new tokens"
    dialog._fields["max_tokens_per_sec"].setText("5")
    dialog._fields["seed"].setText("7")
    dialog.stop_strings.setPlainText("END")
    dialog.prefill_mode.setCurrentIndex(dialog.prefill_mode.findText("token by token"))
    dialog._fields["session_slots"].setText("2")
    dialog.system_prompt_edit.setPlainText("Answer in French.")
    dialog.ok_button.click()
    assert w.settings_dialog is None
    running = w.bridge.turn_request(pane.request_id)
    assert running.settings.generation.rate.max_tokens_per_sec is None  # the running turn keeps its own
    wait_idle(qtbot, pane)
    send(qtbot, pane, "second")
    wait_idle(qtbot, pane)
    turn = backend.prepared[-1][2]
    assert turn.generation.rate.max_tokens_per_sec == 5.0 and turn.generation.shaping.seed == 7
    assert turn.generation.stop_strings == ("END",) and turn.chunked_prefill is False
    assert turn.system_prompt == "Answer in French."
    # Persisted: the conversation in the store, the defaults and slots in QSettings.
    conv = w.store.conversation(pane.conversation_id)
    assert conv.system_prompt == "Answer in French." and conv.settings["max_tokens_per_sec"] == 5.0
    assert load_defaults(ui.settings())["stop_strings"] == ["END"] and load_session_slots(ui.settings()) == 2
    # A new conversation starts from the defaults, without this conversation's system prompt.
    other = w.new_conversation()
    send(qtbot, other, "third")
    wait_idle(qtbot, other)
    turn = backend.prepared[-1][2]
    assert turn.generation.rate.max_tokens_per_sec == 5.0 and turn.system_prompt is None


def test_the_quick_form_keeps_the_dialogs_other_settings(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send, wait_idle

    backend = RecordingBackend(replies=("ok",))
    w = issue6_window(ui, backend)
    pane = w.area.current_pane()
    pane.apply_settings({"stop_strings": ["STOP"], "top_k": 7}, None)
    pane.settings_form.temperature.setValue(0.0)  # the pane's quick form edits one field
    send(qtbot, pane, "hi")
    wait_idle(qtbot, pane)
    shaping = backend.prepared[-1][2].generation
    assert shaping.shaping.temperature == 0.0 and shaping.shaping.top_k == 7 and shaping.stop_strings == ("STOP",)


def test_cancel_changes_nothing(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window

    w = issue6_window(ui, RecordingBackend())
    pane = w.area.current_pane()
    before = pane.settings_values
    w.open_settings()
    w.settings_dialog._fields["temperature"].setText("1.5")
    w.settings_dialog.reject()
    assert pane.settings_values == before and load_defaults(ui.settings()) == DEFAULTS
