"""The chat template of a GGUF (`tokenizer.chat_template`), rendered like Hugging Face does.

Rendering uses jinja2's `ImmutableSandboxedEnvironment`: a template is data from a downloaded
file, so it must not reach Python internals (`__class__`, `__mro__`, ...) nor mutate what it is
given. As in transformers' `apply_chat_template`: `trim_blocks` and `lstrip_blocks`, the
`loopcontrols` extension, a `{% generation %}` block that renders its body, a `tojson` filter that
keeps non-ASCII text, and the helpers `raise_exception(message)` and `strftime_now(format)`.
The variables are `messages`, `add_generation_prompt`, `bos_token` and `eos_token` (plus any
extra keyword given to `render`, e.g. `tools`).

`ChatTemplate(None)` is plain ChatML (`CHATML_TEMPLATE`, no system message added): the built-in
template a user may choose (`chat_template="chatml"`). A GGUF without a template is a base model
and loads with none (raw completion, see `consistency`), not with ChatML.

Errors name the template: "the model's chat template (Gemma 2 2b It) failed: Conversation roles
must alternate user/assistant/user/assistant/..." (the name is the GGUF's general.name), or "the
built-in ChatML template ...". They are `TemplateError`s (EngineErrors): the window shows them
inline and puts the typed message back in the input box; `turbospark chat` prints them and keeps
the conversation as it was.

A system message the template refuses (Gemma 2: `raise_exception('System role not supported')`)
is folded into the first user message ("system\n\nuser"), as llama.cpp's template polyfills do
(only a single, leading system message: two would be reordered). If the template still refuses
the folded messages, that refusal is reported (it is about the rest of the conversation).

Rendering is bounded (`RenderBudget`): a template is code from a downloaded file, and the sandbox
caps one `range`, not nested loops. Every render counts the Python steps it runs (a trace hook on
the rendering thread), checks the clock and an optional cancel predicate every 1024 steps, counts
the characters it emits, and refuses a `*`, `+` or `%` that would build a string or list past the
character budget before it is built. Over budget is `TemplateBudgetExceeded`.

Default system prompt: pass no system message to get the model's own default. SmolLM2's template
inserts "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging
Face<|im_end|>\\n" whenever the first message is not a system message; a conversation that starts
with a system message replaces it.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from ...engine.errors import EngineError

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class TemplateError(EngineError):
    """The chat template is broken, unsafe, or refused the messages (`raise_exception`)."""


class TemplateBudgetExceeded(TemplateError):
    """Rendering ran past its budget (steps, seconds or characters), or was stopped."""


@dataclass(frozen=True)
class RenderBudget:
    """What one render may spend: traced Python steps, wall-clock seconds, output characters."""

    steps: int = 2_000_000
    seconds: float = 1.0
    max_chars: int = 2_000_000


DEFAULT_BUDGET = RenderBudget()
_CHECK_EVERY = 1024
_FORMAT_WIDTH = re.compile(r"%[-#0 +]*(\d+)")


class _OverBudget(BaseException):
    """Raised from the trace hook; a BaseException so no `except Exception` in a template swallows it."""


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


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, plus: no `*` / `+` / `%` / call that builds something past the budget."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, budget: RenderBudget, **options: Any) -> None:
        super().__init__(**options)
        self.budget = budget

    def _refuse(self, what: str) -> NoReturn:
        raise TemplateBudgetExceeded(
            f"the chat template {what}, past its budget of {self.budget.max_chars:,} characters")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        cap = self.budget.max_chars
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) is not None and isinstance(n, int) and _size(seq) * n > cap:
                    self._refuse(f"repeats a sequence {n:,} times")
        elif operator == "+" and _size(left) is not None and _size(right) is not None:
            if _size(left) + _size(right) > cap:
                self._refuse("joins sequences")
        elif operator == "%" and isinstance(left, str):
            if any(int(w) > cap for w in _FORMAT_WIDTH.findall(left)):
                self._refuse("formats a field")
        elif operator == "**" and isinstance(right, int) and right > 64 and left not in (0, 1, -1):
            raise TemplateBudgetExceeded(f"the chat template raises a number to the power {right:,}")
        return super().call_binop(context, operator, left, right)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # e.g. 'a'.ljust(10**9), 'a'|center(10**9): no size argument past the budget
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and value > self.budget.max_chars:
                self._refuse(f"asks a call for {value:,} items")
        return super().call(__context, __obj, *args, **kwargs)


def _environment(budget: RenderBudget) -> ImmutableSandboxedEnvironment:
    env = _BoundedEnvironment(
        budget,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
        autoescape=False,
    )
    env.filters["tojson"] = _tojson
    for name in ("center", "indent", "wordwrap", "truncate"):
        env.filters[name] = _bounded_filter(env, env.filters[name])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _bounded_filter(env: _BoundedEnvironment, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A size-taking filter (e.g. center) that refuses a size past the budget."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        return env.call(None, fn, *args, **kwargs)

    for attr in ("jinja_pass_arg",):  # keep jinja's @pass_environment / @pass_context marks
        if hasattr(fn, attr):
            setattr(bounded, attr, getattr(fn, attr))
    return bounded


def _render_bounded(chunks: Any, budget: RenderBudget, cancel: Callable[[], bool] | None) -> str:
    """Join the chunks a template generates, within `budget` (see the module docstring)."""
    steps = 0
    deadline = time.monotonic() + budget.seconds
    over: str | None = None

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal steps, over
        steps += 1
        if over is None and steps % _CHECK_EVERY == 0:
            if steps > budget.steps:
                over = f"ran past its budget of {budget.steps:,} steps"
            elif time.monotonic() > deadline:
                over = f"ran past its budget of {budget.seconds:g} seconds"
            elif cancel is not None and cancel():
                over = "was stopped while rendering"
        if over is not None:
            raise _OverBudget(over)
        # Lines are traced in the template's own code only (its loops); other calls count once.
        return tracer if frame.f_code.co_filename == "<template>" else None

    out: list[str] = []
    length = 0
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in chunks:
            length += len(chunk)
            if length > budget.max_chars:
                over = f"wrote more than its budget of {budget.max_chars:,} characters"
                break
            out.append(chunk)
    except _OverBudget:
        pass
    finally:
        sys.settrace(previous)
    if over is not None:
        raise TemplateBudgetExceeded(f"the chat template {over}")
    return "".join(out)


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    # ChatMessage-like objects (role, content attributes)
    return {"role": message.role, "content": message.content}


class ChatTemplate:
    """A compiled chat template; `render` turns messages into the prompt text."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "",
                 budget: RenderBudget = DEFAULT_BUDGET, name: str | None = None) -> None:
        """Compile `source` (None or empty: the built-in ChatML); raises TemplateError on a syntax
        error. `name` (the model's general.name) is said in error messages."""
        self.is_fallback = not source
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.budget = budget
        self.name = name
        if self.is_fallback:
            self.label = "the built-in ChatML template"
        else:
            self.label = f"the model's chat template ({name})" if name else "the model's chat template"
        try:
            self._template = _environment(budget).from_string(self.source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(
                f"{self.label} does not compile (line {exc.lineno}): {exc.message}"
            ) from exc

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatTemplate:
        """The template kept in a tokenizer's spec (`TokenizerSpec`), with its BOS/EOS token texts."""
        spec = tokenizer.spec

        def text(token_id: int | None) -> str:
            return spec.tokens[token_id] if token_id is not None and 0 <= token_id < len(spec.tokens) else ""

        return cls(spec.chat_template, bos_token=text(spec.bos_id), eos_token=text(spec.eos_id),
                   name=getattr(spec, "model_name", None))

    @classmethod
    def from_gguf(cls, path: str | Path) -> ChatTemplate:
        """The template of a GGUF file (through the tokenizer cache)."""
        from .tokenizer import GGUFTokenizer

        return cls.from_tokenizer(GGUFTokenizer.from_gguf(path))

    def render(self, messages: Sequence[Any], add_generation_prompt: bool = True, *,
               cancel: Callable[[], bool] | None = None, **extra: Any) -> str:
        """The prompt text for `messages` (dicts with "role" and "content", or ChatMessage-likes).

        With `add_generation_prompt` the text ends where the assistant's reply begins.
        Raises TemplateError when the template fails, refuses the messages, or tries something
        the sandbox forbids; TemplateBudgetExceeded past the budget or when `cancel()` is true.
        """
        dicts = [_as_dict(m) for m in messages]
        try:
            return self._render(dicts, add_generation_prompt, cancel, extra)
        except _RaisedByTemplate as exc:
            refusal = exc
            folded = _fold_system(dicts)
        if folded is not None:
            try:
                return self._render(folded, add_generation_prompt, cancel, extra)
            except _RaisedByTemplate as exc:  # folded, what the template still refuses is the news
                refusal = exc
            except TemplateBudgetExceeded:
                raise  # over budget or stopped: not a reason to blame the messages
            except TemplateError:
                pass  # the fold broke the template: the first refusal says more
        raise TemplateError(f"{self.label} failed: {refusal}") from refusal

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool,
                cancel: Callable[[], bool] | None, extra: dict[str, Any]) -> str:
        """One render; _RaisedByTemplate passes through (render may retry), the rest are
        TemplateErrors."""
        variables = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            chunks = self._template.generate(**variables)
            return _render_bounded(chunks, self.budget, cancel)
        except (TemplateError, _RaisedByTemplate):
            raise
        except SecurityError as exc:
            raise TemplateError(f"{self.label} tried an unsafe operation: {exc}") from exc
        except Exception as exc:  # jinja errors, or e.g. a TypeError from `'a' + none`
            raise TemplateError(f"{self.label} failed: {type(exc).__name__}: {exc}") from exc


def _fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The system message put in front of the first user message, or None when there is no
    leading system message to fold (or no user message after it)."""
    if not messages or messages[0].get("role") != "system":
        return None
    system, rest = messages[0], messages[1:]
    if any(m.get("role") == "system" for m in rest):
        return None  # more than one: folding would reorder them
    first_user = next((i for i, m in enumerate(rest) if m.get("role") == "user"), None)
    if first_user is None or not isinstance(system.get("content"), str):
        return None
    user = rest[first_user]
    if not isinstance(user.get("content"), str):
        return None
    rest = list(rest)
    rest[first_user] = {**user, "content": f"{system['content']}\n\n{user['content']}"}
    return rest
