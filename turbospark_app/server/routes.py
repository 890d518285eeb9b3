"""The routes: /v1/models(+/{id}), /v1/chat/completions, /v1/completions, /health, /status.

A chat or completions request is checked completely before anything is queued or any header
goes out: JSON and parameters, the model id, the engine's state, the prompt (rendered and
tokenized off the event loop) against the context window, the queue bound. A chat request to a
model without a chat template (a base model) is a 400 `no_chat_template` pointing to
/v1/completions, which takes its raw prompts as for any model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from ..chat.api import ChatMessage, TurnSettings
from ..chat.grammar import GrammarError
from ..chat.structured import StructuredError, StructuredPlan, plan_structured
from ..engine.config import GenerationConfig, RateConfig
from ..engine.errors import EngineError
from ..engine.selection import validate_shaping
from .config import ServerConfig
from .errors import ApiError, bad_request, context_exceeded, unavailable
from .jobs import Engine, JobBoard
from .images import resolve_images
from .params import ApiParams, check_logit_bias, check_token_ids, parse_chat, parse_completion
from .responder import Admitted, Timing, respond
from .wire import Envelope


class ServerView(Protocol):
    """What the routes read of their ApiServer (app.py; no import: app imports us)."""

    engine: Engine
    config: ServerConfig
    board: JobBoard
    timing: Timing
    stopping: bool
    started_at: int

    def describe(self) -> dict[str, Any]: ...


def model_id(model_info: dict[str, Any]) -> str:
    """The id clients use: the GGUF file name without `.gguf`."""
    name = str(model_info.get("file_name") or Path(str(model_info.get("path", "model"))).name)
    return name[:-5] if name.lower().endswith(".gguf") else name


def fingerprint(model_info: dict[str, Any]) -> str:
    """system_fingerprint: changes when the model file does."""
    key = f"{model_info.get('file_name')}:{model_info.get('file_size_bytes')}"
    return "fp_" + hashlib.sha256(key.encode()).hexdigest()[:10]


class Routes:
    """The handlers of one ApiServer."""

    def __init__(self, server: ServerView) -> None:
        self.server = server

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)
        app.router.add_get("/status", self.status)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model_id:.+}", self.model)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)

    # -- facts ----------------------------------------------------------------------------

    def _facts(self) -> tuple[dict[str, Any], int, Any]:
        facts = self.server.engine.facts
        if facts is not None and facts[2] is not None:
            return facts
        if self.server.engine.state == "failed":
            raise unavailable("the model could not be loaded; load another model in TurboSpark")
        raise unavailable("the model is loading")

    def _model_entry(self, info: dict[str, Any]) -> dict[str, Any]:
        # "capabilities" as Ollama's /api/show names them: "vision" when the model takes images.
        caps = ["completion"] + (["chat"] if info.get("has_chat_template", True) else []) + (
            ["vision"] if info.get("vision") else [])
        return {"id": model_id(info), "object": "model", "created": self.server.started_at,
                "owned_by": "turbospark", "capabilities": caps,
                "meta": {"n_ctx": info.get("max_context"), "file_name": info.get("file_name"),
                         "vision": bool(info.get("vision")), "mmproj": info.get("mmproj")}}

    # -- GET ------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        self._facts()
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        info, _, _ = self._facts()
        return web.json_response({"object": "list", "data": [self._model_entry(info)]})

    async def model(self, request: web.Request) -> web.Response:
        info, _, _ = self._facts()
        wanted = request.match_info["model_id"]
        if wanted not in self._served_ids(info):
            raise self._not_found(wanted)
        return web.json_response(self._model_entry(info))

    async def status(self, request: web.Request) -> web.Response:
        engine = self.server.engine
        facts = engine.facts
        info = getattr(engine, "system_info", lambda: {})()
        doc: dict[str, Any] = {
            "state": engine.state,
            "model": None if facts is None else model_id(facts[0]),
            "n_ctx": None if facts is None else facts[1],
            "server": self.server.describe(),
            "engine": info.get("engine"),
            "slots": info.get("sessions"),
        }
        doc.update(self.server.board.describe())
        return web.json_response(doc)

    # -- POST -----------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        params = parse_chat(await _json(request))
        return await self._run(request, params)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        params = parse_completion(await _json(request))
        return await self._run(request, params)

    async def _run(self, request: web.Request, params: ApiParams) -> web.StreamResponse:
        admitted = await self._admit(params)
        srv = self.server
        return await respond(request, srv.board, admitted, srv.timing, lambda: srv.stopping)

    def _served_ids(self, info: dict[str, Any]) -> set[str]:
        return {model_id(info), str(info.get("file_name")), str(info.get("path"))}

    @staticmethod
    def _not_found(wanted: str) -> ApiError:
        return ApiError(404, f"The model '{wanted}' does not exist", type="invalid_request_error",
                        param="model", code="model_not_found")

    async def _admit(self, p: ApiParams) -> Admitted:
        info, n_ctx, builder = self._facts()
        if p.model is not None and p.model not in self._served_ids(info):
            raise self._not_found(p.model)
        try:
            validate_shaping(p.shaping)
        except EngineError as e:
            raise bad_request(str(e)) from None
        check_logit_bias(p.shaping, int(info.get("vocab_size") or 0) or 1 << 31)
        if p.kind == "chat" and not getattr(builder, "has_chat_template", True):
            # A base model: refused up front, not answered in a made-up chat format.
            raise bad_request(f"the model '{model_id(info)}' has no chat template (a base model "
                              "that continues text): send a raw prompt to /v1/completions instead",
                              "messages", code="no_chat_template")
        loop = asyncio.get_running_loop()
        if p.kind == "chat" and any(m.images for m in p.messages):
            if getattr(builder, "vision", None) is None:
                raise bad_request(f"the model '{model_id(info)}' takes no images (no vision projector: "
                                  f"{info.get('vision_label', 'no mmproj')})", "messages",
                                  code="model_has_no_vision")
            allow = self.server.config.allow_image_urls
            messages = await loop.run_in_executor(None, resolve_images, p.messages, allow)
            p = dataclasses.replace(p, messages=messages)
        try:  # rendering + tokenizing a long prompt must not hold up the event loop (the GUI's)
            ids, text, plan = await loop.run_in_executor(None, _prompt_ids, builder, p, info)
        except (GrammarError, StructuredError) as e:  # (compiling a grammar is off the loop too)
            raise bad_request(str(e), e.param or "response_format", code="invalid_schema"
                              if isinstance(e, GrammarError) else None) from None
        except EngineError as e:
            raise bad_request(f"the prompt could not be built: {e}", "messages") from None
        param = "messages" if p.kind == "chat" else "prompt"
        max_tokens = p.max_tokens if p.max_tokens is not None else n_ctx - len(ids)
        if max_tokens < 1 or len(ids) + max_tokens > n_ctx:
            raise context_exceeded(len(ids), max(1, max_tokens), n_ctx, param)
        if self.server.board.queued >= self.server.config.max_queue:
            raise unavailable(f"the server is busy ({self.server.config.max_queue} requests "
                              "already waiting); try again")
        settings = TurnSettings(
            generation=GenerationConfig(
                max_new_tokens=max_tokens, shaping=p.shaping, stop_strings=p.stop,
                rate=RateConfig(max_tokens_per_sec=p.rate_cap), constraint=plan.constraint,
            ),
            chunked_prefill=True,
            chunk_size=self.server.config.prefill_chunk,
            top_logprobs=p.top_logprobs if p.logprobs else None,
        )
        envelope = Envelope.new(p.kind, model_id(info), fingerprint(info))
        return Admitted(p, ids, text, settings, builder, envelope, plan)


def _prompt_ids(builder: Any, p: ApiParams, info: dict[str, Any]
                ) -> tuple[tuple[int, ...], str, StructuredPlan]:
    """(prompt ids, prompt text, structured plan) — runs in a worker thread (the builder is
    thread-safe; the plan's grammar compiles here, off the event loop)."""
    template = getattr(builder, "template", None) if p.kind == "chat" else None
    plan = (plan_structured(p.structured, template, builder.tokenizer) if p.structured.active
            else StructuredPlan())
    if p.kind == "chat":
        messages = tuple(p.messages)
        if plan.system_note:
            messages = (ChatMessage("system", plan.system_note), *messages)
        variables = {**plan.template_vars, **dict(p.template_vars)} or None
        if p.continue_final:
            try:
                return tuple(builder.open_assistant_ids(messages)), "", plan
            except ValueError as e:
                raise bad_request(str(e), "messages") from None
        return tuple(builder.chat_ids(messages, template_vars=variables)), "", plan
    if isinstance(p.prompt, str):
        return tuple(builder.raw_ids(p.prompt)), p.prompt, plan
    check_token_ids(p.prompt, int(info.get("vocab_size") or 0) or 1 << 31)
    text = b"".join(builder.token_bytes(t) for t in p.prompt).decode("utf-8", errors="replace")
    return p.prompt, text, plan


async def _json(request: web.Request) -> Any:
    raw = await request.read()  # over client_max_size: 413 (security middleware shapes it)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"the body is not valid JSON: {e}") from None
