"""The local OpenAI-compatible API (aiohttp) over the engine thread.
May import: engine, chat, service (no Qt; `turbospark serve` is `cli.serve_command`).

    config     ServerConfig: bind, key, CORS origins, queue bound, timings
    security   Host / Origin / key / content-type middleware, errors in the OpenAI shape
    params     request bodies -> validated parameters
    wire       response bodies, stream chunks, SSE, usage, timings, logprobs
    jobs       the jobs bridge to the engine thread and the board the status route reads
    responder  one request as a job: stream or not, cancelled in `finally:`
    routes     the endpoints; app: ApiServer (start/stop on the running loop)
"""

from .app import ApiServer
from .config import DEFAULT_PORT, ServerConfig

__all__ = ["ApiServer", "DEFAULT_PORT", "ServerConfig"]
