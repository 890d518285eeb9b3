"""A returning API chat is restored from RAM however little of its prompt it shares with the
others (llama-server's prompt cache): 6 chats without a system prompt of their own (the
template's default one is shared) take turns through 4 slots, through the official `openai`
client; a chat coming back after 5 others re-reads at most 2 tokens more than one that kept its
slot."""

from __future__ import annotations

import pytest
from api_harness import api, openai_client  # noqa: F401 (fixture)

pytestmark = pytest.mark.real_model


def _reread(reply) -> int:
    return reply.usage.prompt_tokens - reply.usage.prompt_tokens_details.cached_tokens


def test_six_chats_through_four_slots_come_back_from_ram(api) -> None:  # noqa: F811
    client = openai_client(api.servers[0])
    model = client.models.list().data[0].id
    chats = [[{"role": "user", "content": f"Chat {c + 1}: name a colour."}] for c in range(6)]
    reread: list[list[int]] = [[] for _ in chats]
    for turn in range(3):
        for c, chat in enumerate(chats):
            reply = client.chat.completions.create(model=model, messages=chat, max_tokens=12,
                                                   temperature=0)
            reread[c].append(_reread(reply))
            chat += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                     {"role": "user", "content": f"Turn {turn + 2}: and another?"}]
    # One chat alone, asked the same way, keeps its slot: what a returning turn must re-read.
    alone = [{"role": "user", "content": "Chat 9: name a colour."}]
    first = client.chat.completions.create(model=model, messages=alone, max_tokens=12, temperature=0)
    alone += [{"role": "assistant", "content": first.choices[0].message.content or ""},
              {"role": "user", "content": "Turn 2: and another?"}]
    kept = _reread(client.chat.completions.create(model=model, messages=alone, max_tokens=12,
                                                  temperature=0))
    returning = [n for per_chat in reread for n in per_chat[1:]]
    assert kept <= 24, kept  # (the new user message, the template's turn marks, a reply's end)
    assert max(returning) <= kept + 2, (kept, reread)
    # The shared default system prompt is still reused by a new chat: it does not re-read it.
    assert max(per_chat[0] for per_chat in reread[1:]) < reread[0][0] - 10, reread
    print("re-read per chat and turn:", reread, "kept slot:", kept)
