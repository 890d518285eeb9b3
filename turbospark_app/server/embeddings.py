"""POST /v1/embeddings in OpenAI's shape, over the documents' embedder (all-MiniLM-L6-v2 by
default; `TURBOSPARK_EMBEDDER` picks another GGUF): L2-normalised vectors, as llama-server's
route gives them. `encoding_format` "float" or "base64" (little-endian float32, what the
official client asks for by default). The embedder opens on the first request, off the loop,
and runs off the loop (its own llama.cpp context, not the chat engine's thread).
"""

from __future__ import annotations

import asyncio
import base64
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np
from aiohttp import web

from .errors import ApiError, bad_request

MAX_INPUTS = 2048
EmbedderFactory = Callable[[], Any]


def _default_factory() -> Any:
    from ..documents.embedder import open_embedder

    return open_embedder(download=False)


class EmbeddingsRoute:
    """The route and the embedder it opens once (`factory` is how)."""

    def __init__(self, factory: EmbedderFactory | None = None) -> None:
        self._factory = factory or _default_factory
        self._embedder: Any = None
        self._lock = threading.Lock()

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self.embeddings)

    def _open(self) -> Any:
        with self._lock:
            if self._embedder is None:
                self._embedder = self._factory()
            return self._embedder

    async def embeddings(self, request: web.Request) -> web.Response:
        from .routes import _json

        body = await _json(request)
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        texts = _inputs(body.get("input"))
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise bad_request("encoding_format must be \"float\" or \"base64\"", "encoding_format")
        if body.get("dimensions") is not None:
            raise bad_request("dimensions: this embedding model's vectors cannot be shortened", "dimensions")
        try:
            embedder = await asyncio.to_thread(self._open)
        except Exception as exc:  # the model missing or refused: said, the server goes on
            raise ApiError(503, f"the embedding model is not available: {exc}", type="unavailable_error",
                           code="embedder_unavailable") from None

        def run() -> tuple[np.ndarray, int]:
            return embedder.embed(texts), sum(min(embedder.count_tokens(t), embedder.max_tokens) for t in texts)

        vectors, tokens = await asyncio.to_thread(run)
        name = Path(str(getattr(embedder.info, "name", "embedder"))).name
        name = name[:-5] if name.lower().endswith(".gguf") else name
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
                               if fmt == "base64" else [float(x) for x in v])}
                for i, v in enumerate(vectors)]
        return web.json_response({"object": "list", "data": data, "model": name,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def _inputs(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty array of strings", "input")
    if not all(isinstance(v, str) for v in value):
        raise bad_request("input: send text (arrays of token ids are not accepted here)", "input")
    if len(value) > MAX_INPUTS:
        raise bad_request(f"input: at most {MAX_INPUTS} strings per request", "input")
    if any(not v.strip() for v in value):
        raise bad_request("input: a string is empty", "input")
    return value
