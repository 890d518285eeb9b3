"""The wire format: OpenAI response bodies, stream chunks, SSE framing, usage and timings.

Stream order (what the `openai` package and Open WebUI rely on): a role chunk, content
chunks, a finish chunk with an empty delta and `finish_reason`, then with
`stream_options.include_usage` a usage chunk with `choices: []` (earlier chunks carry
`usage: null`), then `data: [DONE]`. Every chunk has the same `id` and `created`.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..engine.progress import StopReason
from ..service.events import Finished, Token

DONE = b"data: [DONE]\n\n"
PING = b": ping\n\n"

_FINISH = {
    StopReason.END_OF_TURN: "stop", StopReason.EOS: "stop", StopReason.STOP_STRING: "stop",
    StopReason.MAX_TOKENS: "length", StopReason.TOOL_CALLS: "tool_calls",
    StopReason.CANCELLED: "stop",
}


def sse(payload: dict[str, Any]) -> bytes:
    """One SSE event."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def finish_reason(reason: StopReason, kind: str) -> str:
    """OpenAI's finish_reason; the legacy completions API has no `tool_calls`."""
    value = _FINISH[reason]
    return "stop" if kind == "completion" and value == "tool_calls" else value


def new_id(kind: str) -> str:
    """A response id: chatcmpl-… or cmpl-…."""
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


def usage(finished: Finished) -> dict[str, Any]:
    """`usage` with prompt_tokens_details.cached_tokens (= the reused KV prefix); when the reply
    speculated, completion_tokens_details with OpenAI's predicted-output counts (accepted /
    rejected draft tokens)."""
    r = finished.result
    out: dict[str, Any] = {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.new_tokens,
        "total_tokens": r.prompt_tokens + r.new_tokens,
        "prompt_tokens_details": {"cached_tokens": r.reused_prefix_tokens},
    }
    if r.drafted_tokens:
        out["completion_tokens_details"] = {
            "accepted_prediction_tokens": r.accepted_tokens,
            "rejected_prediction_tokens": r.drafted_tokens - r.accepted_tokens,
        }
    return out


def timings(finished: Finished) -> dict[str, Any]:
    """llama.cpp-style timings: cache_n, prompt_n, predicted_n, *_ms, *_per_second."""
    r = finished.result
    prompt_n = max(0, min(r.prompt_tokens, r.kv_position) - r.reused_prefix_tokens)
    return {
        "cache_n": r.reused_prefix_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": round(r.prefill_seconds * 1000, 3),
        "prompt_per_second": round(r.prefill_tokens_per_sec, 3),
        "predicted_n": r.new_tokens,
        "predicted_ms": round(r.decode_seconds * 1000, 3),
        "predicted_per_second": round(r.decode_tokens_per_sec, 3),
        # llama.cpp server's speculation figures (0 / 0 without drafts)
        "draft_n": r.drafted_tokens,
        "draft_n_accepted": r.accepted_tokens,
        # of cache_n, the tokens whose KV came back from RAM (the slot had been taken)
        "restored_n": r.restored_tokens,
    }


TokenText = Callable[[int], bytes]


def _text(token_bytes: TokenText, token_id: int) -> tuple[str, list[int]]:
    data = token_bytes(token_id)
    return data.decode("utf-8", errors="replace"), list(data)


def chat_logprobs(tokens: Sequence[Token], token_bytes: TokenText) -> dict[str, Any]:
    """`choices[].logprobs` of the chat API: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    content = []
    for t in tokens:
        text, data = _text(token_bytes, t.id)
        top = []
        for tid, lp in t.top_logprobs:
            alt, alt_bytes = _text(token_bytes, tid)
            top.append({"token": alt, "logprob": lp, "bytes": alt_bytes})
        content.append({"token": text, "logprob": t.logprob, "bytes": data, "top_logprobs": top})
    return {"content": content, "refusal": None}


def legacy_logprobs(tokens: Sequence[Token], token_bytes: TokenText, offset: int) -> dict[str, Any]:
    """The completions API's logprobs: tokens, token_logprobs, top_logprobs, text_offset."""
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t in tokens:
        text, _ = _text(token_bytes, t.id)
        out["tokens"].append(text)
        out["token_logprobs"].append(t.logprob)
        out["top_logprobs"].append({_text(token_bytes, i)[0]: lp for i, lp in t.top_logprobs})
        out["text_offset"].append(offset)
        offset += len(text)
    return out


@dataclass
class Envelope:
    """What every body and chunk of one response shares."""

    id: str
    kind: str  # "chat" | "completion"
    created: int
    model: str
    fingerprint: str

    @classmethod
    def new(cls, kind: str, model: str, fingerprint: str) -> "Envelope":
        return cls(new_id(kind), kind, int(time.time()), model, fingerprint)

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def chunk(self, delta: dict[str, Any] | str | None, finish: str | None = None,
              logprobs: dict[str, Any] | None = None, include_usage: bool = False) -> dict[str, Any]:
        """A stream chunk with one choice (`delta`: a chat delta dict, or completion text)."""
        if self.kind == "chat":
            body = self._base("chat.completion.chunk")
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": logprobs,
                                      "finish_reason": finish}
        else:
            body = self._base("text_completion")
            choice = {"index": 0, "text": delta or "", "logprobs": logprobs, "finish_reason": finish}
        body["choices"] = [choice]
        if include_usage:
            body["usage"] = None
        return body

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        """The last chunk of a stream with include_usage: no choices, the full usage."""
        body = self._base("chat.completion.chunk" if self.kind == "chat" else "text_completion")
        body.update(choices=[], usage=usage(finished), timings=timings(finished))
        return body

    def final(self, text: str, finished: Finished, logprobs: dict[str, Any] | None) -> dict[str, Any]:
        """The non-stream body."""
        finish = finish_reason(finished.result.reason, self.kind)
        if self.kind == "chat":
            body = self._base("chat.completion")
            choice: dict[str, Any] = {
                "index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": logprobs, "finish_reason": finish,
            }
        else:
            body = self._base("text_completion")
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        body.update(choices=[choice], usage=usage(finished), timings=timings(finished))
        return body
