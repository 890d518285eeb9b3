"""Consistency at load: does the tokenizer fit the weights, and does the chat template work?

`checked_template(path, rows, tokenizer, choice)` is run by `load_backend` (chat and the app)
and by the window's Open Model check, before anyone can type. It refuses, with the reason:
- a tokenizer with more tokens than the model has rows of logits (a prompt holding a high id
  would otherwise fail mid-chat), and special-token ids (BOS, EOS, end of turn) past the rows;
- a chat template that cannot render a tiny conversation within its budget, or whose prompt
  tokenizes to ids the model lacks.
A refused template says whether the built-in ChatML template could stand in (`chatml_available`:
the vocabulary has <|im_start|> and <|im_end|> as single tokens); `choice="chatml"` uses it.
A model WITHOUT a template (no `tokenizer.chat_template`: a base model) is not refused nor
forced into ChatML: `checked_template` returns None and the model runs as raw completion;
`choice="chatml"` still gives it ChatML when its vocabulary has the tokens.
(The tokenizer's own checks, ids within its vocabulary and merges naming known tokens, run when
it is built: `tokenizer.check_spec`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..gguf.header import ModelFileError
from .chat_template import ChatTemplate, TemplateError

CHATML = "chatml"
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
TINY_CONVERSATION = (
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
)


def chatml_available(tokenizer: Any) -> bool:
    """ChatML's markers are single tokens of this vocabulary, so ChatML prompts make sense."""
    return all(tokenizer.token_to_id(t) is not None for t in CHATML_TOKENS)


def check_vocabulary(path: Path, rows: int, tokenizer: Any) -> None:
    """The tokenizer's ids all have a row of logits (llama.cpp's vocabulary size, `rows`)."""
    n = tokenizer.vocab_size
    if n > rows:
        raise ModelFileError(path, f"the tokenizer has {n:,} tokens but the model has "
                             f"{rows:,} rows of logits: ids {rows:,} to {n - 1:,} could not be used")
    spec = tokenizer.spec
    for name, value in (("bos_token_id", spec.bos_id), ("eos_token_id", spec.eos_id),
                        ("eot_token_id", spec.eot_id), ("eom_token_id", spec.eom_id)):
        if value is not None and not 0 <= value < rows:
            raise ModelFileError(path, f"tokenizer.ggml.{name} = {value} is past the "
                                 f"{rows:,} rows of the model's vocabulary")


def _refused(exc: TemplateError, tokenizer: Any) -> TemplateError:
    offer = chatml_available(tokenizer)
    text = f"{exc} (refused at load: the template must render a 4-message conversation)"
    if offer:
        text += ("; this model has ChatML's special tokens, so the built-in ChatML template can "
                 "be used instead (`turbospark chat --chat-template chatml`, or Open Model's offer)")
    refused = type(exc)(text)
    refused.chatml_available = offer  # type: ignore[attr-defined]
    return refused


def check_template(template: ChatTemplate, tokenizer: Any, rows: int) -> None:
    """The template renders a tiny conversation (with a system message, or without one for
    templates that refuse it) within its budget, into ids that all have rows of logits."""
    try:
        text = template.render(TINY_CONVERSATION)
    except TemplateError as first:
        if type(first) is not TemplateError:  # over budget: no second try
            raise
        text = template.render(TINY_CONVERSATION[1:])
    ids = tokenizer.encode_prompt(text)
    if not text or not ids:
        raise TemplateError("the chat template renders a conversation as empty text")
    if max(ids) >= rows:
        raise TemplateError(f"the chat template's prompt holds token id {max(ids)}, past the "
                            f"{rows:,} rows of the model's vocabulary")


def checked_template(path: Path, rows: int, tokenizer: Any,
                     choice: str | None = None) -> ChatTemplate | None:
    """The model's chat template (or ChatML when `choice == "chatml"`), after every load check;
    None when the file has no template (a base model: raw completion only).
    Raises ModelFileError, or TemplateError with `chatml_available`."""
    check_vocabulary(path, rows, tokenizer)
    try:
        if choice == CHATML:
            if not chatml_available(tokenizer):
                raise TemplateError("the built-in ChatML template needs <|im_start|> and "
                                    "<|im_end|> tokens, which this model does not have")
            template = ChatTemplate(None)
        elif choice is not None:
            raise TemplateError(f"unknown chat template choice {choice!r} (known: {CHATML})")
        elif not tokenizer.spec.chat_template:
            return None  # a base model: raw completion, not a guessed chat format
        else:
            template = ChatTemplate.from_tokenizer(tokenizer)
        check_template(template, tokenizer, rows)
    except TemplateError as exc:
        raise _refused(exc, tokenizer) from exc
    return template
