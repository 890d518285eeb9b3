"""The local OpenAI-compatible API (aiohttp) over the engine thread.
May import: engine, chat, documents, service, media (no widgets; images are decoded by QtGui's
QImage in media; `turbospark serve` is `cli.serve_command`).

    config     ServerConfig: bind, key, CORS origins, queue bound, timings
    security   Host / Origin / key / content-type middleware, errors in the OpenAI shape
    params     request bodies -> validated parameters
    wire       response bodies, stream chunks, SSE, usage, timings, logprobs
    jobs       the jobs bridge to the engine thread and the board the status route reads
    responder  one request as a job: stream or not, cancelled in `finally:`
    routes     the endpoints; app: ApiServer (start/stop on the running loop)
    embeddings POST /v1/embeddings over the documents' embedder (opened on first use)
"""

from typing import TYPE_CHECKING, Any

from .config import DEFAULT_PORT, ServerConfig

if TYPE_CHECKING:
    from .app import ApiServer

__all__ = ["ApiServer", "DEFAULT_PORT", "ServerConfig"]


def __getattr__(name: str) -> Any:
    # ApiServer (aiohttp, ~0.1 s) on first use: `turbospark`'s argument parser reads the config only.
    if name == "ApiServer":
        from .app import ApiServer

        return ApiServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
