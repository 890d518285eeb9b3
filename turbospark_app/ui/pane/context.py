"""How much of the model's context a conversation uses, and what to do when it no longer fits.

The meter: after each turn the conversation holds `prompt tokens + reply tokens` of the
context (both exact, from the turn's stats); while a reply streams, the prompt (from Started)
plus the tokens so far. A reopened conversation shows its last reply's
figure, when that reply came from the model loaded now (another model tokenizes differently,
so its count would be a guess: the meter says "–" until the next turn).

Overflow (`Failed.kind == "context_overflow"`, raised by prepare_turn before the model is
touched): the pane keeps the message in its input and offers
    New Conversation    the message moves to a fresh conversation
    Drop Oldest Turns   the oldest user/assistant exchanges are deleted from this conversation
                        until the prompt plus the reply budget fits, then the message is resent
`turns_to_drop` picks how many exchanges cover the excess, counting each message at an upper
bound of its tokens (its own token ids, else one token per byte). Erring HIGH is on purpose:
dropping too few costs one more cheap admission check (the resend overflows again, with exact
numbers, and more is dropped), dropping too many would delete turns for nothing. When only the
new message is left and it still does not fit, that is said plainly.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QWidget,
)

from ...conversations.store import StoredMessage
from ..formatting import bytes_label

# engine.errors.ContextOverflow's message: "context overflow: {p} prompt tokens + {n} new tokens > {c} context tokens"
_OVERFLOW_RE = re.compile(r"(\d+) prompt tokens \+ (\d+) new tokens > (\d+) context tokens")
_TEMPLATE_TOKENS_PER_MESSAGE = 12  # role markers and separators (ChatML: 5; errs high)


def overflow_numbers(message: str) -> tuple[int, int, int] | None:
    """(prompt tokens, reply budget, context) from a context-overflow message, or None."""
    m = _OVERFLOW_RE.search(message)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def turns(messages: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """The conversation as exchanges: each a user message and the replies that follow it
    (leading non-user messages form an exchange of their own)."""
    out: list[list[StoredMessage]] = []
    for m in messages:
        if m.role == "user" or not out:
            out.append([m])
        else:
            out[-1].append(m)
    return out


def estimate_tokens(message: StoredMessage, model_id: str = "") -> int:
    """An upper bound of a message's share of the prompt: its token ids when they are the
    loaded model's (they go into the prompt as they are), else its UTF-8 length (no tokenizer
    makes more tokens than bytes), plus the template's markers."""
    own_ids = message.token_ids and (message.stats or {}).get("model_id") == model_id and model_id
    n = len(message.token_ids or ()) if own_ids else len(message.content.encode("utf-8"))
    return n + _TEMPLATE_TOKENS_PER_MESSAGE


def turns_to_drop(history: Sequence[StoredMessage], excess: int, model_id: str = "") -> int:
    """How many of the oldest exchanges of `history` (the messages BEFORE the new one) to drop
    to free `excess` tokens by their upper-bound sizes; at least 1 when there is one."""
    freed, n = 0, 0
    for exchange in turns(history):
        if n and freed >= excess:
            break
        freed += sum(estimate_tokens(m, model_id) for m in exchange)
        n += 1
    return n


def usage_from_messages(messages: Sequence[StoredMessage], model_id: str) -> int | None:
    """Tokens the conversation holds after its last reply (prompt + reply), when that reply was
    made by the model `model_id`; None when unknown."""
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if last is None:
        return 0 if not messages else None
    stats = last.stats or {}
    if not stats.get("started", True) or stats.get("model_id", model_id) != model_id:
        return None
    prompt, new = stats.get("prompt_tokens"), stats.get("new_tokens")
    return prompt + new if isinstance(prompt, int) and isinstance(new, int) else None


class ContextMeter(QWidget):
    """A small bar: "1,234 / 2,048 tok" (palette colours only)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("contextMeter")
        self.bar = QProgressBar(self)
        self.bar.setObjectName("contextBar")
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(70)
        self.bar.setMaximumHeight(8)
        self.label = QLabel(self)
        self.label.setObjectName("contextLabel")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.bar, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.label)
        self.used: int | None = None
        self.max_context = 0
        # The loaded model's info (kv_cache, kv_bytes_per_token): the pane points it at its bridge
        self.model_info: Callable[[], Mapping[str, Any]] = dict
        self.set_usage(None, 0)

    def set_usage(self, used: int | None, max_context: int, detail: str = "") -> None:
        """Show `used` of `max_context` tokens (None = unknown until the next turn)."""
        self.used, self.max_context = used, max_context
        if not max_context:
            self.bar.setRange(0, 1)
            self.bar.setValue(0)
            self.label.setText("context –")
            self.setToolTip("The model is not loaded yet")
            return
        self.bar.setRange(0, max_context)
        self.bar.setValue(min(used or 0, max_context))
        shown = "–" if used is None else f"{used:,}"
        info = self.model_info()
        per_token = int(info.get("kv_bytes_per_token") or 0)
        kv = f" · {bytes_label(used * per_token)} KV" if used and per_token else ""
        self.label.setText(f"{shown} / {max_context:,} tok{kv}")
        share = "" if used is None else f" ({100 * used / max_context:.0f}%)"
        tip = f"This conversation uses {shown} of the model's {max_context:,}-token context{share}."
        if used is None:
            tip += "\nCounted after the next reply (the last one was made by another model, or none yet)."
        if per_token:
            types = (info.get("kv_cache") or {}).get("label", "f16")
            tip += (f"\nIts KV cache ({types}, {bytes_label(per_token)} a token): "
                    f"{bytes_label((used or 0) * per_token)} of {bytes_label(max_context * per_token)}.")
        self.setToolTip(tip + (f"\n{detail}" if detail else ""))


class OverflowChoice(QMessageBox):
    """The question asked on overflow. `chosen` carries "new", "drop" or "cancel"."""

    chosen = Signal(str)

    def __init__(self, numbers: tuple[int, int, int] | None, droppable: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("overflowChoice")
        self.setIcon(QMessageBox.Icon.Warning)
        self.setWindowTitle("The conversation is too long")
        self.setText("This message does not fit the model's context window.")
        if numbers is not None:
            prompt, budget, context = numbers
            detail = (f"The prompt would be {prompt:,} tokens, plus up to {budget:,} for the reply, but the "
                      f"model holds {context:,}.")
        else:
            detail = "The prompt plus the reply budget is longer than the model's context."
        self.setInformativeText(detail + " Your message is still in the input box.")
        self.new_button: QPushButton = self.addButton("New Conversation", QMessageBox.ButtonRole.AcceptRole)
        self.drop_button: QPushButton = self.addButton("Drop Oldest Turns", QMessageBox.ButtonRole.DestructiveRole)
        self.drop_button.setToolTip("Delete the oldest exchanges of this conversation until the message fits, "
                                    "then send it")
        self.drop_button.setEnabled(droppable > 0)
        self.addButton(QMessageBox.StandardButton.Cancel)
        self.setDefaultButton(self.new_button)
        self.buttonClicked.connect(self._clicked)

    def _clicked(self, button: Any) -> None:
        self.chosen.emit("new" if button is self.new_button else "drop" if button is self.drop_button else "cancel")
