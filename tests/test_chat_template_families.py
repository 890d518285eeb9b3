"""Each family's own chat template rendered in the sandbox (copies in chat_templates.py), the
errors they raise named after the model, Gemma 2's system message folded, and a template error
in the window: shown, and the typed message put back."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_fakes import FakeBackend, send, wait_idle

import chat_templates as T
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text import chat_template as chat_template_module
from turbospark_app.model.text.chat_template import CHATML_TEMPLATE, ChatTemplate, TemplateError
from turbospark_app.model.text.tokenizer import GGUFTokenizer

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
]
NO_SYSTEM = CONVERSATION[1:]

GEMMA_TEXT = ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
              "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


@pytest.fixture
def fixed_date(monkeypatch):
    """strftime_now answers for 1 March 2026, so date-stamped system prompts can be compared."""
    from datetime import datetime

    monkeypatch.setattr(chat_template_module, "_strftime_now",
                        lambda fmt: datetime(2026, 3, 1).strftime(fmt))


def test_gemma3_folds_the_system_prompt_into_the_first_user_turn():
    template = ChatTemplate(T.GEMMA3, bos_token="<bos>", eos_token="<eos>", name="Gemma 3 1b It")
    assert template.render(CONVERSATION) == GEMMA_TEXT
    assert template.render([{"role": "user", "content": "  Hi \n"}], add_generation_prompt=False) == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n")


def test_gemma2_refuses_a_system_role_so_it_is_folded_for_it():
    template = ChatTemplate(T.GEMMA2, bos_token="<bos>", name="Gemma 2 2b It")
    assert template.render(CONVERSATION) == GEMMA_TEXT  # same prompt as Gemma 3 writes itself
    assert template.render(NO_SYSTEM) == GEMMA_TEXT.replace("Be brief.\n\n", "")


ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."
SYSTEM_TWICE = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"},
                {"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(("source", "name", "messages", "reason"), [
    (T.GEMMA3, "Gemma 3 1b It", SYSTEM_TWICE, ALTERNATE),
    (T.GEMMA3, "Gemma 3 1b It", [NO_SYSTEM[0], NO_SYSTEM[0]], ALTERNATE),
    (T.GEMMA2, "Gemma 2 2b It", SYSTEM_TWICE, "System role not supported"),  # two: nothing to fold
    (T.GEMMA2, "Gemma 2 2b It", [NO_SYSTEM[0], NO_SYSTEM[0]], ALTERNATE),
    # Folded, the system message is fine; what is left wrong is said.
    (T.GEMMA2, "Gemma 2 2b It", [CONVERSATION[0], NO_SYSTEM[0], NO_SYSTEM[0]], ALTERNATE),
])
def test_refused_messages_are_a_clear_error_naming_the_template(source, name, messages, reason):
    template = ChatTemplate(source, bos_token="<bos>", name=name)
    with pytest.raises(TemplateError) as info:
        template.render(messages)
    assert str(info.value) == f"the model's chat template ({name}) failed: {reason}"
    assert info.value.__cause__ is not None  # the traceback stays for the log, not the user


def test_qwen3_drops_old_reasoning_and_keeps_the_open_one():
    template = ChatTemplate(T.QWEN3, name="Qwen3 0.6B")
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello!"},
               {"role": "user", "content": "Bye"}]
    assert template.render(history) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
    # The reply after the last question keeps its reasoning.
    assert template.render(history[:2], add_generation_prompt=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nHello!<|im_end|>\n")
    assert template.render(CONVERSATION[:2], enable_thinking=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_phi3_and_phi4_mini():
    assert ChatTemplate(T.PHI3, eos_token="<|endoftext|>").render(CONVERSATION) == (
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
        "<|user|>\nBye<|end|>\n<|assistant|>\n")
    assert ChatTemplate(T.PHI3, eos_token="<|endoftext|>").render(
        NO_SYSTEM[:1], add_generation_prompt=False) == "<|user|>\nHi<|end|>\n<|endoftext|>"
    assert ChatTemplate(T.PHI4_MINI).render(CONVERSATION) == (
        "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Hello!<|end|><|user|>Bye<|end|>"
        "<|assistant|>")


def test_granite3_default_system_prompt_tools_and_controls(fixed_date):
    template = ChatTemplate(T.GRANITE3, name="Granite 3.1 2b Instruct")
    default = ("<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024.\n"
               "Today's Date: March 01, 2026.\nYou are Granite, developed by IBM.")
    assert template.render(NO_SYSTEM[:1]) == (
        default + " You are a helpful AI assistant.<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>")
    assert template.render(CONVERSATION, add_generation_prompt=False) == (
        "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Bye<|end_of_text|>\n")
    tools = [{"name": "get_time", "arguments": {}}]
    text = template.render(NO_SYSTEM[:1], tools=tools, controls={"length": "short"})
    assert '<|start_of_role|>tools<|end_of_role|>[\n    {\n        "name": "get_time"' in text
    assert text.endswith('<|start_of_role|>assistant {"length": "short"}<|end_of_role|>')


def test_smollm3_reasoning_modes(fixed_date):
    template = ChatTemplate(T.SMOLLM3, name="SmolLM3 3B")
    head = ("<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n"
            "Today Date: 01 March 2026\n")
    text = template.render([{"role": "system", "content": "Be brief. /no_think"}, *NO_SYSTEM])
    assert text == (head + "Reasoning Mode: /no_think\n\n## Custom Instructions\n\nBe brief.\n\n<|im_end|>\n"
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\nHello!"
                    "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n")
    thinking = template.render(NO_SYSTEM[:1])
    assert thinking.startswith(head + "Reasoning Mode: /think\n\n## Custom Instructions\n\nYou are a "
                               "helpful AI assistant named SmolLM")
    assert thinking.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_olmo2_and_chatml():
    olmo = ChatTemplate(T.OLMO2, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    assert olmo.render(CONVERSATION) == (
        "<|endoftext|><|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>\n"
        "<|user|>\nBye\n<|assistant|>\n")
    assert ChatTemplate(CHATML_TEMPLATE).render(CONVERSATION) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")


def test_undefined_variable_and_unnamed_and_builtin_templates_say_which():
    with pytest.raises(TemplateError, match=r"^the model's chat template failed: UndefinedError: "):
        ChatTemplate("{{ nothing.deeper }}").render(NO_SYSTEM)
    with pytest.raises(TemplateError, match=r"^the built-in ChatML template failed: TypeError"):
        ChatTemplate(None).render([{"role": "user", "content": None}])


def gemma_gguf(tmp_path: Path) -> Path:
    """A Gemma-style SentencePiece vocabulary (no space prefix, <bos> wanted) with Gemma 3's template."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    pieces = ["Hi", "us", "er", "user", "mo", "de", "del", "model", "▁", "\n", "H", "i", "u", "s", "e",
              "r", "m", "o", "d", "l"]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * (len(specials) + 256) + [-100.0 - i for i in range(len(pieces))]
    return write_tokenizer_gguf(tmp_path / "gemma.gguf", model="llama", tokens=tokens, types=types,
                                scores=scores, ids={"bos": 2, "eos": 1, "unknown": 3}, add_bos=True,
                                add_space_prefix=False, name="Gemma 3 1b It", template=T.GEMMA3)


def test_gemma_prompt_from_the_gguf_has_one_bos_and_names_the_model(tmp_path):
    tok = GGUFTokenizer.from_gguf(gemma_gguf(tmp_path), use_cache=False)
    template = ChatTemplate.from_tokenizer(tok)
    text = template.render(NO_SYSTEM[:1])
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = tok.encode_prompt(text)
    at = tok.token_to_id
    assert ids == [at("<bos>"), at("<start_of_turn>"), at("user"), at("\n"), at("Hi"), at("<end_of_turn>"),
                   at("\n"), at("<start_of_turn>"), at("model"), at("\n")]
    with pytest.raises(TemplateError, match=r"^the model's chat template \(Gemma 3 1b It\) failed: "
                                            "Conversation roles must alternate"):
        template.render([NO_SYSTEM[0], NO_SYSTEM[0]])


class _TemplatedBackend(FakeBackend):
    """FakeBackend whose prompt first goes through Gemma 3's template, after an imported
    history that already ends with a user message (so roles do not alternate)."""

    def prepare_turn(self, session_id, messages, settings, *, continue_final=False):
        template = ChatTemplate(T.GEMMA3, bos_token="<bos>", name="Gemma 3 1b It")
        template.render([{"role": "user", "content": "imported"},
                         *({"role": m.role, "content": m.content} for m in messages)])
        return super().prepare_turn(session_id, messages, settings, continue_final=continue_final)


def test_a_template_error_is_shown_in_the_window_and_the_message_goes_back(ui, qtbot):
    w = ui.window(_TemplatedBackend())
    pane = w.area.current_pane()
    send(qtbot, pane, "Hello there")
    wait_idle(qtbot, pane)
    assert pane.input.toPlainText() == "Hello there"
    plain = pane.transcript.document().toPlainText()
    assert "the model's chat template (Gemma 3 1b It) failed: Conversation roles must alternate" in plain
    assert "Traceback" not in plain and "put back in the input box" in plain
    assert w.store.messages(pane.conversation_id) == []
