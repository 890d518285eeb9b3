"""Prompt building keeps generated ids, so every turn's prompt extends the previous KV."""

from __future__ import annotations

from typing import Any

from turbospark_app.chat.api import ChatMessage
from turbospark_app.chat.prompt import build_prompt_ids
from turbospark_app.model.text.chat_template import ChatTemplate


class CharTokenizer:
    """One id per character (ord), so re-tokenization is visible as different ids."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def chatml() -> ChatTemplate:
    return ChatTemplate(None)  # the ChatML fallback


def test_assistant_ids_are_spliced_not_retokenized() -> None:
    generated = (9001, 9002, 9003)  # ids that encode(text) would never produce
    msgs = [
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "hello", generated),
        ChatMessage("user", "bye"),
    ]
    ids = build_prompt_ids(chatml(), CharTokenizer(), msgs)
    text = "".join(chr(i) if i < 9000 else "|" for i in ids)
    assert "<|im_start|>assistant\n|||<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")


def test_each_turn_prompt_extends_the_previous_prompt_and_reply() -> None:
    tok, tpl = CharTokenizer(), chatml()
    msgs: list[ChatMessage] = []
    previous: list[int] = []
    for turn in range(5):
        msgs.append(ChatMessage("user", f"question {turn}"))
        ids = build_prompt_ids(tpl, tok, msgs, system_prompt="be brief")
        assert ids[: len(previous)] == previous  # the whole previous turn is a prefix
        reply = (7000 + turn, 7100 + turn)
        msgs.append(ChatMessage("assistant", "x", reply))
        previous = ids + list(reply)


def test_system_prompt_replaces_a_stored_system_message() -> None:
    msgs = [ChatMessage("system", "old"), ChatMessage("user", "q")]
    ids = build_prompt_ids(chatml(), CharTokenizer(), msgs, system_prompt="new")
    text = "".join(map(chr, ids))
    assert "new" in text and "old" not in text


def test_assistant_without_ids_is_tokenized_from_text() -> None:
    msgs = [ChatMessage("user", "a"), ChatMessage("assistant", "imported"), ChatMessage("user", "b")]
    text = "".join(map(chr, build_prompt_ids(chatml(), CharTokenizer(), msgs)))
    assert "<|im_start|>assistant\nimported<|im_end|>" in text


def test_template_that_drops_old_assistant_turns() -> None:
    class DropsAssistant:
        def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
            return "".join(f"[{m['role']}:{m['content']}]" for m in messages if m["role"] != "assistant")

    msgs = [ChatMessage("user", "a"), ChatMessage("assistant", "x", (9999,)), ChatMessage("user", "b")]
    ids = build_prompt_ids(DropsAssistant(), CharTokenizer(), msgs)
    assert 9999 not in ids and "".join(map(chr, ids)) == "[user:a][user:b]"


def test_a_reply_ended_by_a_stop_string_is_retokenized_next_turn() -> None:
    from turbospark_app.chat.api import reply_token_ids
    from turbospark_app.engine import StopReason

    # Its ids spell the stop string, which its text leaves out.
    assert reply_token_ids(StopReason.STOP_STRING, [1, 2, 3]) is None
    for reason in (StopReason.END_OF_TURN, StopReason.MAX_TOKENS, StopReason.CANCELLED):
        assert reply_token_ids(reason, [1, 2, 3]) == (1, 2, 3)


def qwen3() -> ChatTemplate:
    from chat_templates import QWEN3

    return ChatTemplate(QWEN3)


def spelled(ids: list[int]) -> str:
    return "".join(chr(i) if i < 9000 else "|" for i in ids)


def test_a_template_that_rewrites_an_old_reply_gets_its_own_text() -> None:
    # Qwen3 drops the reasoning of replies before the last question: the model must see that,
    # not the ids it generated (which hold the <think> block).
    reply = "<think>\nplan\n</think>\n\nHello!"
    msgs = [ChatMessage("user", "Hi"), ChatMessage("assistant", reply, (9001, 9002)),
            ChatMessage("user", "Bye")]
    ids = build_prompt_ids(qwen3(), CharTokenizer(), msgs)
    assert 9001 not in ids
    assert spelled(ids) == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
    # A reply the template writes as it is keeps its ids.
    plain = [msgs[0], ChatMessage("assistant", "Hello!", (9001, 9002)), msgs[2]]
    assert "<|im_start|>assistant\n||<|im_end|>" in spelled(build_prompt_ids(qwen3(), CharTokenizer(), plain))


def test_continuing_a_reply_the_template_keeps_whole_splices_its_ids() -> None:
    reply = "<think>\nplan\n</think>\n\nHel"
    msgs = [ChatMessage("user", "Hi"), ChatMessage("assistant", reply, (9001, 9002, 9003))]
    ids = build_prompt_ids(qwen3(), CharTokenizer(), msgs, continue_final=True)
    assert spelled(ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n|||"
