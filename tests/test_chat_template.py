"""ChatTemplate: SmolLM2's template, the ChatML fallback, the sandbox and error reporting."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from turbospark_app.engine.errors import EngineError
from turbospark_app.model.text.chat_template import CHATML_TEMPLATE, ChatTemplate, TemplateError

# tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf, verbatim.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
DEFAULT_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
)
USER_HI = [{"role": "user", "content": "Hi"}]


def test_smollm2_injects_its_default_system_prompt():
    text = ChatTemplate(SMOLLM2_TEMPLATE).render(USER_HI)
    assert text == DEFAULT_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_smollm2_with_own_system_and_history_without_generation_prompt():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Spain?"},
    ]
    text = ChatTemplate(SMOLLM2_TEMPLATE).render(messages, add_generation_prompt=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd Spain?<|im_end|>\n"
    )


@pytest.mark.real_model
def test_the_gguf_template_is_smollm2s(default_model_path):
    template = ChatTemplate.from_gguf(default_model_path)
    assert not template.is_fallback and template.source == SMOLLM2_TEMPLATE
    assert (template.bos_token, template.eos_token) == ("<|im_start|>", "<|im_end|>")
    expected = DEFAULT_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert template.render(USER_HI) == expected


@pytest.mark.real_model
def test_rendered_prompt_tokenizes_with_single_special_ids(default_model_path):
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    tok = GGUFTokenizer.from_gguf(default_model_path, use_cache=False)
    ids = tok.encode_prompt(ChatTemplate.from_tokenizer(tok).render(USER_HI))
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # 3x <|im_start|>, 2x <|im_end|>
    tail = [1, *tok.encode("assistant\n")]
    assert ids[-len(tail):] == tail


@pytest.mark.parametrize("source", [None, ""])
def test_chatml_fallback_without_a_template(source):
    template = ChatTemplate(source)
    assert template.is_fallback and template.source == CHATML_TEMPLATE
    assert template.render(USER_HI) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert template.render(USER_HI, add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"


@dataclass(frozen=True)
class Msg:
    role: str
    content: str
    token_ids: tuple[int, ...] | None = None


def test_message_objects_and_variables():
    source = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m['content'] }}]{% endfor %}"
    source += "{{ eos_token }}"
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    assert template.render([Msg("user", "a"), Msg("assistant", "b")]) == "<s>[user:a][assistant:b]</s>"


def test_hf_helpers_and_whitespace_control():
    source = (
        "{% for m in messages %}\n"
        "    {% if loop.index > 1 %}{% break %}{% endif %}\n"
        "{% generation %}{{ m | tojson }}{% endgeneration %}\n"
        "{% endfor %}{{ strftime_now('%Y') | length }}"
    )
    text = ChatTemplate(source).render([{"role": "user", "content": "é<b>"}, USER_HI[0]])
    # trim_blocks/lstrip_blocks drop the block lines' whitespace; tojson keeps "é" and "<".
    assert text == '{"role": "user", "content": "é<b>"}4'


@pytest.mark.parametrize(("source", "message"), [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe operation"),
    ("{{ messages.__class__ }}{{ cycler.__init__.__globals__ }}", "unsafe operation"),
    ("{% set _ = messages.append({'role': 'x'}) %}", "unsafe operation"),
    ("{{ raise_exception('Only user and assistant roles are supported') }}",
     "failed: Only user and assistant roles are supported"),
    ("{{ messages[0]['content'] + 1 }}", "failed: TypeError"),
    ("{{ nothing.deeper }}", "failed: UndefinedError"),
])
def test_render_errors_are_template_errors(source, message):
    with pytest.raises(TemplateError, match=message) as info:
        ChatTemplate(source).render(USER_HI)
    assert isinstance(info.value, EngineError)


def test_syntax_error_is_reported_at_load():
    with pytest.raises(TemplateError, match=r"does not compile \(line 2\)"):
        ChatTemplate("{% for m in messages %}\n{% endif %}")
