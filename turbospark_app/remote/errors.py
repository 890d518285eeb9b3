"""What can go wrong talking to a remote server, each as a stable kind and a clear sentence."""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass

from ..host.lazy_import import lazy_module

aiohttp = lazy_module("aiohttp")  # loaded by the first request (host/lazy_import.py)


@dataclass
class RemoteError(Exception):
    """A remote request failed. `kind` is stable (the pane and tests key on it):

    refused | dns | tls | connect | timeout | auth | model_not_found | busy | bad_request |
    context_overflow | server | dropped | protocol
    """

    kind: str
    message: str
    status: int | None = None

    def __str__(self) -> str:
        return self.message


_HTTP_KIND = {401: "auth", 403: "auth", 404: "model_not_found", 429: "busy", 503: "busy"}


def http_error(status: int, server_message: str, code: str | None, url: str, model: str) -> RemoteError:
    """The RemoteError for a non-2xx reply (after retries, for 429 / 503)."""
    kind = _HTTP_KIND.get(status, "server" if status >= 500 else "bad_request")
    if status == 400 and code in ("context_length_exceeded", "exceed_context_size_error"):
        kind = "context_overflow"
    if kind == "auth":
        text = (f"The server refused the API key (HTTP {status}): {server_message}. "
                "Check the endpoint's key in Settings › Endpoints.")
    elif kind == "model_not_found":
        text = (f"The server has no model “{model}” (HTTP 404): {server_message}. "
                "Pick one of its models (Settings › Endpoints › Test connection lists them).")
    elif kind == "busy":
        text = f"The server is busy (HTTP {status}) and still was after retrying: {server_message}"
    elif kind == "server":
        text = f"The server failed (HTTP {status}): {server_message}"
    else:
        text = f"The server rejected the request (HTTP {status}): {server_message}"
    return RemoteError(kind, f"{text} [{url}]", status)


def connection_error(exc: BaseException, url: str, timeouts: tuple[float, float]) -> RemoteError:
    """The RemoteError for an exception raised while connecting or reading.
    `timeouts`: (connect, read) seconds, named in the timeout message."""
    connect_s, read_s = timeouts
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError, ssl.SSLError)):
        return RemoteError("tls", f"TLS failed for {url}: {_reason(exc)}. Check the certificate, "
                           "or use http:// for a server without TLS.")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return RemoteError("timeout", f"Connecting to {url} timed out after {connect_s:g} s.")
    if isinstance(exc, (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return RemoteError("timeout", f"The server sent nothing for {read_s:g} s ({url}); "
                           "the connection was closed. The reply so far is kept.")
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, socket.gaierror) or _is_dns(exc):
            return RemoteError("dns", f"The host name of {url} could not be resolved: {_reason(os_error)}.")
        if isinstance(os_error, ConnectionRefusedError):
            return RemoteError("refused", f"Connection refused by {url}: is the server running, "
                               "and is the port right?")
        return RemoteError("connect", f"Could not connect to {url}: {_reason(os_error)}.")
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                        aiohttp.ClientOSError, ConnectionError)):
        return RemoteError("dropped", f"The connection to {url} dropped mid-reply ({_reason(exc)}). "
                           "The reply so far is kept.")
    if isinstance(exc, aiohttp.InvalidURL):
        return RemoteError("bad_request", f"Not a valid URL: {url}")
    return RemoteError("protocol", f"{type(exc).__name__}: {exc} ({url})")


def _is_dns(exc: BaseException) -> bool:
    dns_error = getattr(aiohttp, "ClientConnectorDNSError", None)
    return dns_error is not None and isinstance(exc, dns_error)


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown reason"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)
