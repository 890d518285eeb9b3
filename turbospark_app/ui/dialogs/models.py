"""Models: File > Open Model… (validated before switching, errors explained) and Model Info.

Opening a model:
 1. the user picks a file (`choose_model_file`);
 2. `check_model_file` runs in a worker thread: the bounded header walk, `describe`'s verdict
    (architecture, tensor types and shapes: the validator `load_backend` uses), the tokenizer and
    the chat template: everything `load_backend` needs except dequantizing the weights. A problem
    becomes a dialog that says what is wrong in plain words and what to do
    (`explain_model_error`); an architecture TurboSpark does not run gets the same line as
    `turbospark model info`, with the file's metadata in the details;
 3. only a file that passed is handed to `switch` (the bridge reloads the engine's backend).
    A file refused only for its chat template, whose vocabulary has ChatML's tokens, gets a
    "Use Built-in ChatML" button: the check runs again with ChatML and the switch carries
    `facts["chat_template_choice"] = "chatml"`. A file with NO template (a base model) is not
    refused: it loads for raw completion, and a note says so, with the same button when its
    vocabulary has ChatML's tokens.

Why validate first: the engine thread would report the same errors, but only after it had
dropped the model that was working. A bad pick must leave the app as it was.

Switching models and token ids: an assistant reply is stored with the token ids it was
generated with and `stats.model_id`, the identity of the model that produced them
(conversation_pane.model_identity: the GGUF's file name and size). The next prompt passes a
reply's ids only when that identity is the loaded model's, so another model's vocabulary is
never fed ids it does not own; the text is re-tokenized instead. The bridge forgets the model's
identity the moment a switch is asked for, so no turn submitted during the switch carries old
ids either. The engine closes the old backend, so its KV sessions go with it: the new model
starts with fresh sessions. Conversations keep all their text.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from ..formatting import bytes_label
from .projector import ProjectorDialog, needs_choice, projector_facts

CHATML = "chatml"  # model.consistency.CHATML (not imported here: that pulls in numpy)
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"


def check_model_file(path: str | os.PathLike[str], chat_template: str | None = None) -> dict[str, Any]:
    """Everything `load_backend` checks except the weights; returns facts for the confirmation.
    Raises ModelFileError / TokenizerError / TemplateError (all EngineError); a file whose header
    reads but that TurboSpark cannot run is a CannotRunError carrying the file's description (the
    verdict `turbospark model info` gives). Any thread."""
    from ...model.gguf.describe import CannotRunError, describe_header
    from ...model.gguf.header import read_header
    from ...model.llamacpp.model import LlamaCppModel
    from ...model.llamacpp.vocab import load_tokenizer
    from ...model.text.consistency import chatml_available, checked_template

    header = read_header(path)
    description = describe_header(header)  # llama.cpp's verdict, from a child process
    if not description.runnable or description.config is None:
        raise CannotRunError(description)
    vocab = LlamaCppModel.open(path, header=header, vocab_only=True)
    try:
        tokenizer = load_tokenizer(header, vocab)
        template = checked_template(Path(path), vocab.vocab_size, tokenizer, chat_template)
    finally:
        vocab.close()
    facts = description.config.to_dict()
    facts.update(path=str(path), file_name=Path(path).name, file_size_bytes=os.path.getsize(path),
                 chat_template=None if template is None else template.source,
                 chat_template_is_fallback=template is not None and template.is_fallback,
                 has_chat_template=template is not None,  # False: a base model, raw completion
                 chatml_available=template is None and chatml_available(tokenizer))
    # The vision projectors beside it (their headers): Open Model asks when it is not clear.
    facts["projectors"] = projector_facts(path, description.config.dim)
    return facts


def description_text(description: Any) -> str:
    """A `model.gguf.describe.GGUFDescription` as "Label: text" lines and the verdict line (the
    details of a refused file's box)."""
    from ...model.gguf.describe import description_rows, verdict_line

    return "\n".join([*(f"{r.label}: {r.text}" for r in description_rows(description)),
                      verdict_line(description)])


def explain_model_error(exc: BaseException) -> tuple[str, str]:
    """(headline, explanation with what to do) for a file that cannot be used."""
    from ...model.text.chat_template import TemplateError
    from ...model.gguf.header import ModelFileError
    from ...model.text.tokenizer import TokenizerError

    if isinstance(exc, ModelFileError):
        reason = exc.reason
        # First: the words below could be in the name of an architecture
        if "unknown model architecture" in reason:
            return ("This model's architecture is not supported", f"{reason}.\n\nThe llama.cpp in "
                    "this TurboSpark does not run it (a newer llama.cpp may). The model you have "
                    "keeps running.")
        if reason == "file not found" or "is a directory" in reason or "cannot read the file" in reason:
            return "The file cannot be read", f"{reason}.\n\nCheck that the file exists and that you may read it."
        if "not a GGUF file" in reason:
            return ("This is not a GGUF model", f"{reason}.\n\nTurboSpark runs models in the GGUF format "
                    "(the files llama.cpp, LM Studio and Ollama use). Pick a file ending in .gguf.")
        if "truncated" in reason:
            return ("The model file is incomplete", f"{reason}.\n\nThe download was probably cut short. "
                    "Download the file again and check its size against the source.")
        if "unsupported tensor type" in reason or "tensor type" in reason:
            return ("This quantization is not supported", f"{reason}.\n\nPick another variant of "
                    "this model (e.g. Q4_K_M, Q8_0).")
        return "The model file cannot be used", f"{reason}."
    if isinstance(exc, TokenizerError):
        return "The model's tokenizer cannot be used", f"{exc}.\n\nThe GGUF's vocabulary is missing or of a kind TurboSpark does not read."
    if isinstance(exc, TemplateError):
        return "The model's chat template cannot be used", f"{exc}."
    return "The model file cannot be used", f"{type(exc).__name__}: {exc}"


def choose_model_file(parent: QWidget | None, start: str = "") -> str | None:
    """The native open-file dialog for a GGUF; None when cancelled."""
    path, _ = QFileDialog.getOpenFileName(parent, "Open Model", start, GGUF_FILTER)
    return path or None


class _CheckThread(QThread):
    """Runs `check(path)` off the GUI thread (the checks here, gguf_info's describe); the result
    arrives as a (queued) signal."""

    done = Signal(str, object, object)  # path, facts | None, exception | None

    def __init__(self, path: str, check: Callable[[str], dict[str, Any]], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._path = path
        self._check = check

    def run(self) -> None:  # noqa: D102 (QThread override)
        try:
            facts = self._check(self._path)
        except Exception as exc:  # every failure is explained to the user, none is raised
            self.done.emit(self._path, None, exc)
        else:
            self.done.emit(self._path, facts, None)


class ModelOpener(QObject):
    """Pick → check in a worker → explain the problem, or hand the path to `switch(path, facts)`.

    `checking` is True while a check runs (the menu action is disabled meanwhile).
    """

    checked = Signal(str, bool)  # path, usable

    def __init__(self, parent: QWidget, switch: Callable[[str, dict[str, Any]], None], *,
                 check: Callable[[str], dict[str, Any]] = check_model_file,
                 choose: Callable[[QWidget | None, str], str | None] = choose_model_file) -> None:
        super().__init__(parent)
        self._parent = parent
        self._switch = switch
        self._check = check
        self._choose = choose
        self._thread: _CheckThread | None = None
        self._choice: str | None = None
        self._load: dict[str, str] = {}
        self._mmproj: str | None = None  # the projector asked for (None: Automatic, or ask)
        self._ask = False  # show the projector step whatever the folder holds
        self._current_projector: str | None = None
        self.projector_dialog: ProjectorDialog | None = None
        self.last_error: tuple[str, str] | None = None
        self.notice: QMessageBox | None = None  # the last "no chat template" note

    @property
    def checking(self) -> bool:
        """A file is being checked."""
        return self._thread is not None

    def open_dialog(self, start: str = "", ask_projector: bool = False) -> None:
        """File > Open Model…: ask for a file, then `open_path` it (`ask_projector`: then which
        vision projector, whatever its folder holds)."""
        path = self._choose(self._parent, start)
        if path:
            self.open_path(path, ask_projector=ask_projector)

    def open_path(self, path: str, chat_template: str | None = None,
                  load: Mapping[str, str] | None = None, mmproj: str | None = None,
                  ask_projector: bool = False, current_projector: str | None = None) -> bool:
        """Check `path` in a worker thread; switch on success, explain on failure.
        `chat_template="chatml"`: with the built-in ChatML instead of the file's template;
        `load`: load options ({"weights": "f32", "kernels": "int8"}, facts["load_options"]);
        `mmproj`: the vision projector ("auto", "off", a file; None: Automatic unless the
        folder's projectors leave it unclear, then the projector step asks, as with
        `ask_projector`; `current_projector`: the step's first selection). False when a check
        is running."""
        if self._thread is not None:
            return False
        self._mmproj, self._ask, self._current_projector = mmproj, ask_projector, current_projector
        check = self._check if chat_template is None else functools.partial(
            self._check, chat_template=chat_template)
        self._choice = chat_template
        self._load = dict(load or {})
        self._thread = _CheckThread(path, check, self)
        # A bound method of a GUI-thread object: the signal is queued to the GUI thread.
        self._thread.done.connect(self._checked)
        self._thread.start()
        return True

    def _checked(self, path: str, facts: dict[str, Any] | None, exc: BaseException | None) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.wait()
            thread.deleteLater()
        if exc is not None or facts is None:
            self.last_error = explain_model_error(exc or RuntimeError("no facts"))
            box = QMessageBox(QMessageBox.Icon.Warning, "Open Model", self.last_error[0],
                              QMessageBox.StandardButton.Ok, self._parent)
            box.setObjectName("modelErrorBox")
            box.setInformativeText(f"{Path(path).name}\n\n{self.last_error[1]}")
            if getattr(exc, "description", None) is not None:  # the header read: show what it says
                box.setDetailedText(description_text(exc.description))
            if getattr(exc, "chatml_available", False) and self._choice is None:
                # The file's template was refused, but the model has ChatML's tokens: offer it.
                use = box.addButton("Use Built-in ChatML", QMessageBox.ButtonRole.AcceptRole)
                use.setObjectName("useChatmlButton")
                load = self._load
                use.clicked.connect(lambda: self.open_path(path, chat_template=CHATML, load=load))
            box.open()
            self.checked.emit(path, False)
            return
        self.last_error = None
        if self._mmproj is None and (self._ask or needs_choice(facts)):
            self._ask_projector(path, facts)
            return
        self._finish(path, facts, self._mmproj)

    def _ask_projector(self, path: str, facts: dict[str, Any]) -> None:
        """The projector step: OK opens the model with the choice; Cancel opens nothing."""
        dialog = ProjectorDialog(path, facts, self._parent, current=self._current_projector)
        self.projector_dialog = dialog
        dialog.accepted.connect(lambda: self._finish(path, facts, dialog.choice()))
        dialog.rejected.connect(lambda: self.checked.emit(path, False))
        dialog.open()

    def _finish(self, path: str, facts: dict[str, Any], mmproj: str | None) -> None:
        self.projector_dialog = None
        if self._choice is not None:
            facts = {**facts, "chat_template_choice": self._choice}
        load = {**self._load, **({"mmproj": mmproj} if mmproj else {})}
        self._load = load  # (a ChatML retry from the raw-model note keeps the projector)
        if load:
            facts = {**facts, "load_options": load}
        self._switch(path, facts)
        if facts.get("has_chat_template") is False:
            self._raw_note(path, bool(facts.get("chatml_available")))
        self.checked.emit(path, True)

    def _raw_note(self, path: str, chatml: bool) -> None:
        """A base model was opened: say its panes run raw; offer ChatML when it has the tokens."""
        box = QMessageBox(QMessageBox.Icon.Information, "Open Model",
                          "This model has no chat template", QMessageBox.StandardButton.Ok, self._parent)
        box.setObjectName("rawModelBox")
        text = (f"{Path(path).name}\n\nIt is a base model: it continues text rather than answering "
                "chat messages, so its conversations run as raw completion (the pane says “Raw "
                "completion”; your text is the prompt, the reply continues it).")
        if chatml:
            text += ("\n\nIts vocabulary has ChatML's special tokens, so it can also be run with the "
                     "built-in ChatML chat template.")
            use = box.addButton("Use Built-in ChatML", QMessageBox.ButtonRole.AcceptRole)
            use.setObjectName("useChatmlButton")
            load = self._load
            use.clicked.connect(lambda: self.open_path(path, chat_template=CHATML, load=load))
        box.setInformativeText(text)
        self.notice = box
        box.open()


def _fmt(value: Any, kind: str = "") -> str:
    if value is None or value == "":
        return "–"
    if kind == "bytes":
        return f"{bytes_label(value)} ({int(value):,} bytes)"
    if kind == "count" and isinstance(value, (int, float)):
        return f"{value / 1e6:,.1f} M ({int(value):,})" if value >= 1e6 else f"{int(value):,}"
    if kind == "tokens" and isinstance(value, int):
        return f"{value:,} tokens"
    return str(value)


def _engine_text(info: Mapping[str, Any]) -> str:
    """"llama.cpp · CPU AVX2 · 2 threads — llama 135M Q4_1, 92 MB mapped, tokenizer: llama.cpp"
    (what runs the model, as llama.cpp names it)."""
    runs = info.get("runs_on")
    if not runs:
        return "–"
    parts = [str(runs)]
    extra = [str(info["engine_description"])] if info.get("engine_description") else []
    if isinstance(info.get("weights_bytes"), int) and info["weights_bytes"] > 0:
        extra.append(f"{bytes_label(info['weights_bytes'])} mapped")
    if info.get("gpu_layers"):
        extra.append(f"{info['gpu_layers']} layers on the GPU")
    if info.get("tokenizer"):
        extra.append(f"tokenizer: {info['tokenizer']}")
    return parts[0] + (" — " + ", ".join(extra) if extra else "")


def info_rows(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The model-info view's rows from a backend's model_info (missing facts shown as –)."""
    get = info.get
    context = _fmt(get("context_length"), "tokens")
    if get("max_context") and get("max_context") != get("context_length"):
        context += f" (this app uses {get('max_context'):,})"
    shape = "–"
    if get("n_layers"):
        shape = f"{get('n_layers')} layers · width {get('dim')} · {get('n_heads')} heads ({get('n_kv_heads')} KV)"
    return [
        ("Name", _fmt(get("name"))),
        ("File", _fmt(get("path") or get("file"))),
        ("Architecture", _fmt(get("architecture"))),
        ("Parameters", _fmt(get("n_params") or get("parameters"), "count")),
        ("Quantization", _fmt(get("quantization"))),
        ("Context length", context),
        ("Shape", shape),
        ("Vocabulary", _fmt(get("vocab_size"), "tokens")),
        ("File size", _fmt(get("file_size_bytes") or get("file_size"), "bytes")),
        ("Engine", _engine_text(info)),
        # "yes (mmproj-x.gguf, mlp)" or "no (why)": a projector that is missing or does not fit
        # is the peers' commonest "images do nothing" (chat.vision).
        ("Vision", _fmt(get("vision_label"))),
        ("Loaded in", f"{get('load_seconds'):.2f} s" if isinstance(get("load_seconds"), (int, float)) else "–"),
    ]


class ModelInfoDialog(QDialog):
    """Help > Model Info: the loaded model's facts and its chat template's text; with a
    `describer`, buttons show the full GGUF metadata of this file or of any other (`gguf_info`);
    with `choose_projector`, "Projector…" chooses its vision projector (a reload)."""

    def __init__(self, info: Mapping[str, Any], parent: QWidget | None = None, describer: Any = None,
                 choose_projector: Callable[[], None] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelInfoDialog")
        self.describer = describer  # a gguf_info.FileDescriber (it outlives the dialog), or None
        self.setWindowTitle("Model Info")
        self.setMinimumSize(560, 480)
        form = QFormLayout()
        self.values: dict[str, QLabel] = {}
        for label, text in info_rows(info):
            value = QLabel(text, self)
            value.setWordWrap(True)
            value.setTextInteractionFlags(value.textInteractionFlags() | value.textInteractionFlags().TextSelectableByMouse)
            self.values[label] = value
            form.addRow(label, value)
        template = info.get("chat_template")
        fallback = bool(info.get("chat_template_is_fallback"))
        raw_only = info.get("has_chat_template") is False
        heading = QLabel("Chat template" + (" (ChatML, chosen at load)" if fallback else "")
                         + (": none — a base model, its conversations run as raw completion"
                            if raw_only else ""), self)
        self.template = QPlainTextEdit(self)
        self.template.setObjectName("chatTemplate")
        self.template.setReadOnly(True)
        self.template.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.template.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.template.setPlainText(template if isinstance(template, str) else
                                   "– (none in the file)" if raw_only else "– (not reported by this engine)")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        if describer is not None:
            self._add_metadata_buttons(buttons, info.get("path"), describer)
        if choose_projector is not None and isinstance(info.get("path"), str):
            # The vision projector this model opens with (ui.dialogs.projector), then a reload.
            projector = buttons.addButton("Projector…", QDialogButtonBox.ButtonRole.ActionRole)
            projector.setObjectName("projectorButton")
            projector.clicked.connect(self.accept)
            projector.clicked.connect(choose_projector)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(heading)
        layout.addWidget(self.template, 1)
        layout.addWidget(buttons)

    def _add_metadata_buttons(self, buttons: QDialogButtonBox, path: Any, describer: Any) -> None:
        """"File Metadata…" (the loaded GGUF's header, as `model info` shows it) and "Another
        GGUF…" (any file, whatever its architecture), shown by `describer` (gguf_info)."""
        local = isinstance(path, str) and os.path.isfile(path)  # not a remote engine's model
        if local:
            mine = buttons.addButton("File Metadata…", QDialogButtonBox.ButtonRole.ActionRole)
            mine.setObjectName("fileMetadataButton")
            mine.clicked.connect(lambda: describer.describe_path(path))
        other = buttons.addButton("Another GGUF…", QDialogButtonBox.ButtonRole.ActionRole)
        other.setObjectName("otherGgufButton")
        other.clicked.connect(lambda: describer.open_dialog(str(Path(path).parent) if local else ""))
