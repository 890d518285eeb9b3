"""Engine errors (the reference's `RuntimeError`). Every one derives from `EngineError`."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises."""


class EmptyPrompt(EngineError):
    """The prompt has no tokens."""

    def __init__(self) -> None:
        super().__init__("the prompt is empty: nothing to complete")


class ZeroBudget(EngineError):
    """`max_new_tokens` is zero."""

    def __init__(self) -> None:
        super().__init__("max_new_tokens is 0: the reply has no token budget")


class ContextOverflow(EngineError):
    """prompt + max_new exceeds the model's context window."""

    def __init__(self, prompt: int, max_new: int, max_context: int) -> None:
        self.prompt = prompt
        self.max_new = max_new
        self.max_context = max_context
        super().__init__(
            f"context overflow: {prompt} prompt tokens + {max_new} new tokens "
            f"> {max_context} context tokens"
        )


class ProducerError(EngineError):
    """The logit producer (the model) failed; the original exception is `__cause__`."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"model failed: {type(cause).__name__}: {cause}")


class SelectionError(EngineError):
    """Token selection could not proceed: invalid shaping parameters or non-finite logits."""


class InvalidRate(EngineError):
    """The rate cap is not a finite number > 0 tokens/sec (None means uncapped)."""

    def __init__(self, cap: object) -> None:
        self.cap = cap
        super().__init__(f"invalid rate cap: {cap!r} (must be a finite number > 0 tokens/sec)")
