"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with a real status.

Every refusal is raised as ApiError before the response headers go out, so a client sees
a real status code (a context overflow is a 400, never a 5xx the `openai` client would retry).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    """A refusal with its HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 (the wire name)
        param: str | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        error.update(self.extra)
        return {"error": error}

    def response(self) -> web.Response:
        """The JSON response."""
        return web.json_response(self.body(), status=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """400 invalid_request_error."""
    return ApiError(400, message, param=param, code=code)


def unavailable(message: str) -> ApiError:
    """503 with Retry-After (the model is loading or the queue is full): clients retry."""
    return ApiError(503, message, type="unavailable_error", code="unavailable",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def context_exceeded(prompt_tokens: int, max_tokens: int, n_ctx: int, param: str) -> ApiError:
    """400 context_length_exceeded, with llama.cpp's n_prompt_tokens / n_ctx."""
    return ApiError(
        400,
        f"This model's maximum context length is {n_ctx} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} for "
        f"the completion). Please reduce the prompt or the max tokens.",
        param=param, code="context_length_exceeded",
        extra={"n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx},
    )


def from_http_exception(exc: web.HTTPException) -> ApiError:
    """aiohttp's own refusals (404 route, 405 method, 413 body) in the OpenAI shape."""
    kinds = {404: ("not_found_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed"),
             413: ("invalid_request_error", "request_too_large")}
    type_, code = kinds.get(exc.status, ("invalid_request_error", None))
    message = exc.reason if exc.status != 413 else "the request body is larger than 1 MiB"
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
    return ApiError(exc.status, message, type=type_, code=code, headers=headers)
