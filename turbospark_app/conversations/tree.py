"""A conversation as a tree of messages, and the branch on screen (pure Python, no SQL, no Qt).

Every message has a parent (the message before it; None for the first). Siblings are the
alternatives of one turn: the replies a Regenerate kept, or the versions of a user message an
Edit made (the turns after the old version stay under it: a kept branch). Exactly one sibling
of each group is `active`; the branch on screen is the chain of active children from the root.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Protocol, Sequence, TypeVar


class Node(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def active(self) -> bool: ...


N = TypeVar("N", bound=Node)


def children_of(messages: Iterable[N]) -> dict[int | None, list[N]]:
    """parent id -> its children in creation (id) order."""
    out: dict[int | None, list[N]] = defaultdict(list)
    for m in sorted(messages, key=lambda m: m.id):
        out[m.parent_id].append(m)
    return out


def active_child(siblings: Sequence[N]) -> N | None:
    """The sibling on screen: the active one (the newest, should several claim it)."""
    chosen = [m for m in siblings if m.active]
    if chosen:
        return chosen[-1]
    return siblings[-1] if siblings else None


def active_path(messages: Iterable[N]) -> list[N]:
    """The branch on screen, first message first."""
    kids = children_of(messages)
    path: list[N] = []
    seen: set[int] = set()
    node = active_child(kids.get(None, []))
    while node is not None and node.id not in seen:  # `seen`: a damaged file cannot loop us
        seen.add(node.id)
        path.append(node)
        node = active_child(kids.get(node.id, []))
    return path


def variant_of(message: N, kids: dict[int | None, list[N]]) -> tuple[int, int]:
    """(1-based position, count) of `message` among its siblings: the `‹ 2/3 ›` figures."""
    siblings = kids.get(message.parent_id, [])
    ids = [m.id for m in siblings]
    return (ids.index(message.id) + 1 if message.id in ids else 1), max(1, len(ids))


def subtree_ids(root_id: int, kids: dict[int | None, list[N]]) -> list[int]:
    """`root_id` and every message under it."""
    out, todo = [], [root_id]
    while todo:
        mid = todo.pop()
        out.append(mid)
        todo.extend(m.id for m in kids.get(mid, []))
    return out
