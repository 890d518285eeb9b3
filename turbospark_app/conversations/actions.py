"""What a conversation action sends, independent of who runs the turn (no Qt, no engine).

Every action becomes a `TurnPlan`: the messages that form the prompt, whether the final
(assistant) message is left open, and where the reply goes in the store's tree:

    send        the branch on screen + the new user message; a new reply under it
    regenerate  the branch up to the last reply's user message; a new sibling reply (the old
                ones stay as alternatives)
    continue    the branch with the last reply LEFT OPEN (`continue_final`: no end-of-turn after
                it, like Hugging Face's `continue_final_message`); the text is appended to the
                same reply row
    edit        the branch up to the edited message's parent + the new text as a sibling user
                message (the old one keeps the turns after it: a kept branch)

Any turn runner (the local engine thread, a remote OpenAI-compatible server) serves a plan from
its `TurnRequest(messages, continue_final=...)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from ..chat.api import ChatMessage
from .parts import Part, chat_messages
from .reply_stats import INTERRUPTED, combine_stats, partial_stats, previous_runs
from .store import Store, StoredMessage
from .tree import active_path, children_of, variant_of

__all__ = ["CONTINUABLE", "ConversationTree", "TurnPlan", "can_continue", "combine_stats", "partial_stats",
           "previous_runs", "prompt_messages"]

# Replies that ended before their natural end: Stop, the token limit, a crash.
CONTINUABLE = ("cancelled", "max_tokens", INTERRUPTED)


@dataclass(frozen=True)
class TurnPlan:
    """What to send and where the reply goes (see the module docstring)."""

    kind: str  # "send" | "regenerate" | "continue" | "edit"
    history: tuple[StoredMessage, ...]  # the prompt's messages (the open reply last, on continue)
    parent_id: int | None  # where the new user message / reply goes in the tree
    user_text: str | None = None  # a new user message (send, edit)
    target: StoredMessage | None = None  # continue: the reply that grows
    replaces: int | None = None  # the sibling on screen now (shown again if the turn fails)
    discard: int | None = None  # an empty reply a crash left: deleted when the new one starts
    user_parts: tuple[Part, ...] = ()  # the new user message's images and attachments

    @property
    def continue_final(self) -> bool:
        """The final message of `history` is an assistant reply to be continued."""
        return self.kind == "continue"


def can_continue(message: StoredMessage | None) -> bool:
    """A reply that ended early (Stop, token limit, crash) and has text to continue from."""
    return (message is not None and message.role == "assistant"
            and message.stop_reason in CONTINUABLE and bool(message.content))


def prompt_messages(history: Sequence[StoredMessage], model_id: str) -> tuple[ChatMessage, ...]:
    """The prompt's ChatMessages (an agent reply's steps and tool results expanded, see
    `parts`). A reply's token ids go along only when they came from the model `model_id`
    (another model's ids are another vocabulary; "" = no model: no ids)."""
    out: list[ChatMessage] = []
    for m in history:
        same = bool(model_id) and (m.stats or {}).get("model_id", model_id) == model_id
        leading = m.parts if same else tuple(dataclasses.replace(p, token_ids=None) for p in m.parts)
        out.extend(chat_messages(m.role, leading, m.content, m.token_ids if same else None))
    return tuple(out)


class ConversationTree:
    """A conversation's messages as the store keeps them: the branch on screen, the
    alternatives of each turn, and the plans of the actions on it."""

    def __init__(self, store: Store, conversation_id: str) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.reload()

    def reload(self) -> None:
        """Re-read the tree from the store."""
        self.all = self.store.all_messages(self.conversation_id)
        self._kids = children_of(self.all)
        self.path: list[StoredMessage] = active_path(self.all)

    def variant(self, message: StoredMessage) -> tuple[int, int]:
        """(position, count) among its alternatives: `‹ 2/3 ›`."""
        return variant_of(message, self._kids)

    def sibling(self, message_id: int, step: int) -> StoredMessage | None:
        """The alternative `step` places before/after `message_id` (None at either end)."""
        message = next((m for m in self.all if m.id == message_id), None)
        if message is None:
            return None
        siblings = self._kids.get(message.parent_id, [])
        i = [m.id for m in siblings].index(message_id) + step
        return siblings[i] if 0 <= i < len(siblings) else None

    def switch(self, message_id: int, step: int) -> bool:
        """Show the previous (-1) / next (+1) alternative; True when something changed."""
        other = self.sibling(message_id, step)
        if other is None:
            return False
        self.store.select_message(other.id)
        self.reload()
        return True

    @property
    def last(self) -> StoredMessage | None:
        return self.path[-1] if self.path else None

    # -- plans -------------------------------------------------------------------------------

    def plan_send(self, text: str) -> TurnPlan:
        """A new user message after the branch on screen."""
        return TurnPlan("send", tuple(self.path), self.last.id if self.last else None, text)

    def plan_regenerate(self) -> TurnPlan | None:
        """A new reply to the last user message (the reply on screen becomes an alternative);
        also answers a user message left unanswered (e.g. by a crash). None: nothing to do."""
        last = self.last
        if last is None:
            return None
        if last.role == "assistant" and not last.content and last.stop_reason == INTERRUPTED:
            # Cut off before its first token: answered afresh, not kept as an empty alternative.
            return TurnPlan("regenerate", tuple(self.path[:-1]), last.parent_id, discard=last.id)
        if last.role == "assistant":
            return TurnPlan("regenerate", tuple(self.path[:-1]), last.parent_id, replaces=last.id)
        return TurnPlan("regenerate", tuple(self.path), last.id)

    def plan_continue(self) -> TurnPlan | None:
        """Continue the last reply in place (None when it ended on its own, or has no text)."""
        last = self.last
        if not can_continue(last):
            return None
        assert last is not None
        return TurnPlan("continue", tuple(self.path), last.parent_id, target=last)

    def plan_edit(self, user_id: int, text: str) -> TurnPlan | None:
        """Send `text` in place of the user message `user_id` (on screen)."""
        index = next((i for i, m in enumerate(self.path) if m.id == user_id and m.role == "user"), None)
        if index is None:
            return None
        old = self.path[index]
        # The edited message keeps its images and attachments (the composer may add more).
        return TurnPlan("edit", tuple(self.path[:index]), old.parent_id, text, replaces=old.id,
                        user_parts=old.parts)
