"""Safe defaults as aiohttp middlewares: DNS-rebinding guard, CORS, API key, JSON-only POST,
and every refusal (ours or aiohttp's) in the OpenAI error shape.

Order of checks: Host (on a loopback bind, a page on evil.example whose name resolves to
127.0.0.1 must not reach us), Origin (a browser page not listed gets 403; a listed one gets
CORS headers and its preflight answered), key (constant-time compare; /health stays public
as in llama-server), then Content-Type on POST (cross-origin JSON forces a preflight).
"""

from __future__ import annotations

import hmac
import logging
from typing import Awaitable, Callable

from aiohttp import web

from .config import ServerConfig, is_loopback
from .errors import ApiError, from_http_exception

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC_PATHS = frozenset({"/health"})
CORS_HEADERS = "Authorization, Content-Type, X-Api-Key"


def host_allowed(host_header: str | None) -> bool:
    """True when a Host header names this machine by a loopback name."""
    if not host_header:
        return False
    host = host_header.strip()
    if host.startswith("["):  # [::1]:8080
        host = host[: host.find("]") + 1] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return is_loopback(host)


def presented_key(request: web.Request) -> str | None:
    """The key of `Authorization: Bearer <key>` or `X-Api-Key: <key>`."""
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("X-Api-Key") or None


def key_matches(presented: str | None, expected: str) -> bool:
    """Constant-time comparison (the length still shows; the content does not)."""
    return presented is not None and hmac.compare_digest(
        presented.encode("utf-8"), expected.encode("utf-8")
    )


def _origin_allowed(origin: str, config: ServerConfig) -> bool:
    return origin in config.allowed_origins or ("*" in config.allowed_origins and not config.api_key)


def _cors(response: web.StreamResponse, origin: str | None, config: ServerConfig) -> None:
    if origin is not None and _origin_allowed(origin, config) and not response.prepared:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"


def security_middleware(config: ServerConfig) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware enforcing `config` (see the module docstring)."""
    loopback = is_loopback(config.host)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        try:
            if loopback and not host_allowed(request.headers.get("Host")):
                raise ApiError(403, "the Host header does not name this machine (DNS rebinding guard)",
                               type="permission_error", code="host_not_allowed")
            if origin is not None and not _origin_allowed(origin, config):
                raise ApiError(403, f"origin {origin} is not allowed (add it to the allowed origins)",
                               type="permission_error", code="origin_not_allowed")
            if request.method == "OPTIONS" and origin is not None:
                return web.Response(status=204, headers={
                    "Access-Control-Allow-Origin": origin, "Vary": "Origin",
                    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                    "Access-Control-Allow-Headers": CORS_HEADERS,
                    "Access-Control-Max-Age": "600",
                })
            if config.api_key and request.path not in PUBLIC_PATHS:
                if not key_matches(presented_key(request), config.api_key):
                    raise ApiError(401, "invalid or missing API key (Authorization: Bearer <key> "
                                   "or X-Api-Key)", type="authentication_error",
                                   code="invalid_api_key")
            if request.method == "POST" and request.content_type != "application/json":
                raise ApiError(415, "the request body must be JSON (Content-Type: application/json)",
                               code="unsupported_media_type")
            response = await handler(request)
        except ApiError as e:
            response = e.response()
        except web.HTTPException as e:
            if e.status < 400:
                raise
            response = from_http_exception(e).response()
        _cors(response, origin, config)
        return response

    return middleware
