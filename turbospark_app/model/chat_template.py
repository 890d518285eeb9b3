"""The chat template of a GGUF (`tokenizer.chat_template`), rendered like Hugging Face does.

Rendering uses jinja2's `ImmutableSandboxedEnvironment`: a template is data from a downloaded
file, so it must not reach Python internals (`__class__`, `__mro__`, ...) nor mutate what it is
given. As in transformers' `apply_chat_template`: `trim_blocks` and `lstrip_blocks`, the
`loopcontrols` extension, a `{% generation %}` block that renders its body, a `tojson` filter that
keeps non-ASCII text, and the helpers `raise_exception(message)` and `strftime_now(format)`.
The variables are `messages`, `add_generation_prompt`, `bos_token` and `eos_token` (plus any
extra keyword given to `render`, e.g. `tools`).

A GGUF without a template gets plain ChatML (`CHATML_TEMPLATE`), which adds no system message.

Default system prompt: pass no system message to get the model's own default. SmolLM2's template
inserts "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging
Face<|im_end|>\\n" whenever the first message is not a system message; a conversation that starts
with a system message replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from ..engine.errors import EngineError

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class TemplateError(EngineError):
    """The chat template is broken, unsafe, or refused the messages (`raise_exception`)."""


class _RaisedByTemplate(Exception):
    """`raise_exception(...)` called by the template itself."""


def _raise_exception(message: str) -> NoReturn:
    raise _RaisedByTemplate(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja's own tojson HTML-escapes "<" and "'", which would corrupt prompts.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` (transformers marks assistant text with it)."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
        autoescape=False,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    # ChatMessage-like objects (role, content attributes)
    return {"role": message.role, "content": message.content}


class ChatTemplate:
    """A compiled chat template; `render` turns messages into the prompt text."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        """Compile `source` (None or empty: ChatML); raises TemplateError on a syntax error."""
        self.is_fallback = not source
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(
                f"the chat template does not compile (line {exc.lineno}): {exc.message}"
            ) from exc

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatTemplate:
        """The template kept in a `GGUFTokenizer`'s spec, with its BOS/EOS token texts."""
        spec = tokenizer.spec

        def text(token_id: int | None) -> str:
            return spec.tokens[token_id] if token_id is not None and 0 <= token_id < len(spec.tokens) else ""

        return cls(spec.chat_template, bos_token=text(spec.bos_id), eos_token=text(spec.eos_id))

    @classmethod
    def from_gguf(cls, path: str | Path) -> ChatTemplate:
        """The template of a GGUF file (through the tokenizer cache)."""
        from .tokenizer import GGUFTokenizer

        return cls.from_tokenizer(GGUFTokenizer.from_gguf(path))

    def render(self, messages: Sequence[Any], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages` (dicts with "role" and "content", or ChatMessage-likes).

        With `add_generation_prompt` the text ends where the assistant's reply begins.
        Raises TemplateError when the template fails, refuses the messages, or tries something
        the sandbox forbids.
        """
        variables = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": [_as_dict(m) for m in messages],
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**variables)
        except _RaisedByTemplate as exc:
            raise TemplateError(f"the chat template refused the messages: {exc}") from exc
        except SecurityError as exc:
            raise TemplateError(f"the chat template tried an unsafe operation: {exc}") from exc
        except Exception as exc:  # jinja errors, or e.g. a TypeError from `'a' + none`
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
