"""The approval card of one tool call, under the transcript: the tool, its server, the
arguments pretty-printed, and Allow once · Always allow this tool · Deny. Once decided it
shows the running time, then the result (an error as an error)."""

from __future__ import annotations

import asyncio
import json
import time

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ...tools.agent import ALLOW_ONCE, ALWAYS, DENY, PendingCall
from ..formatting import seconds_label

RESULT_PREVIEW = 600  # characters of a result the card shows


def pretty_arguments(arguments: dict) -> str:
    return json.dumps(arguments, indent=2, ensure_ascii=False)


class ApprovalCard(QFrame):
    """See the module docstring. `decided` (ALLOW_ONCE | ALWAYS | DENY)."""

    decided = Signal(str)

    def __init__(self, call: PendingCall, *, note: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolApprovalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet("#toolApprovalCard { border: 1px solid rgba(38,139,210,0.6); border-radius: 6px;"
                           " background: rgba(38,139,210,0.08); }")
        self.call = call
        self.future: asyncio.Future[str] | None = None
        server = call.tool.server if call.tool else "?"
        title = QLabel(f"⚙ <b>{call.tool.tool if call.tool else call.call.name}</b> "
                       f"<span style='color: gray'>· {server}</span>", self)
        self.args = QLabel(pretty_arguments(call.arguments), self)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.TypeWriter)
        self.args.setFont(mono)
        self.args.setWordWrap(True)
        self.note = QLabel(note, self)
        self.note.setWordWrap(True)
        self.note.setVisible(bool(note))
        self.allow_once = QPushButton("Allow once", self)
        self.always = QPushButton("Always allow this tool", self)
        self.deny = QPushButton("Deny", self)
        self.allow_once.setObjectName("allowOnce")
        self.always.setObjectName("alwaysAllow")
        self.deny.setObjectName("denyCall")
        self.allow_once.clicked.connect(lambda: self._decide(ALLOW_ONCE))
        self.always.clicked.connect(lambda: self._decide(ALWAYS))
        self.deny.clicked.connect(lambda: self._decide(DENY))
        self.status = QLabel("Asks for your approval", self)
        self.status.setObjectName("toolStatus")
        self.result = QLabel(self)
        self.result.setFont(mono)
        self.result.setWordWrap(True)
        self.result.setVisible(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.allow_once)
        buttons.addWidget(self.always)
        buttons.addWidget(self.deny)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(4)
        for w in (title, self.args, self.note):
            layout.addWidget(w)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.result)
        self._started: float | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._tick)

    def ask(self) -> "asyncio.Future[str]":
        """A future the user's click resolves."""
        self.future = asyncio.get_event_loop().create_future()
        return self.future

    def _decide(self, decision: str) -> None:
        for b in (self.allow_once, self.always, self.deny):
            b.setEnabled(False)
        self.decided.emit(decision)
        if self.future is not None and not self.future.done():
            self.future.set_result(decision)

    def show_decision(self, decision: str | None) -> None:
        """After the approval: running (with its time) or denied."""
        for b in (self.allow_once, self.always, self.deny):
            b.setVisible(False)
        if decision == DENY:
            self.status.setText("Denied: the model is told so")
        else:
            how = {"auto": "Always allowed", ALWAYS: "Always allowed from now on"}.get(decision or "", "Allowed")
            self._how = how
            self._started = time.monotonic()
            self._tick()
            self._timer.start()

    def _tick(self) -> None:
        if self._started is not None:
            self.status.setText(f"{self._how} · running {seconds_label(time.monotonic() - self._started)}")

    def show_outcome(self) -> None:
        """The call's result (or error) and how long it ran."""
        self._timer.stop()
        o = self.call.outcome
        if o is None:
            return
        if self.call.decision != DENY:
            verdict = "failed" if o.is_error else "done"
            self.status.setText(f"{verdict} in {seconds_label(o.seconds)}"
                                + (" · result cut to fit" if o.truncated else ""))
        text = o.text if len(o.text) <= RESULT_PREVIEW else o.text[:RESULT_PREVIEW] + " …"
        self.result.setText(text)
        self.result.setStyleSheet("color: #c0392b" if o.is_error else "")
        self.result.setVisible(True)
        for b in (self.allow_once, self.always, self.deny):
            b.setVisible(False)
