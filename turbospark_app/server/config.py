"""The API server's settings (the `turbospark serve` flags and the window's Settings)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_PORT = 8080
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for a loopback bind address or host name."""
    name = host.strip().lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """Safe by default: loopback only, no CORS, prompts never logged."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None  # required (Bearer or X-Api-Key) when set; mandatory off-loopback
    allowed_origins: tuple[str, ...] = ()  # CORS off unless listed ("*" allowed, never with a key)
    max_queue: int = 16  # API requests waiting for the engine; more get 503 + Retry-After
    prefill_chunk: int = 512  # prompt tokens per llama_decode (a disconnect stops one inside, on the CPU)
    ping_interval: float = 1.0  # SSE `: ping` while nothing else is sent (long prefill)
    stall_timeout: float = 15.0  # a client that reads nothing for this long is dropped
    # Images come as base64 in the body: room for one image at media.images' limit (20 MiB, 27
    # of base64) and the text around it.
    max_body_bytes: int = 28 << 20
    allow_image_urls: bool = False  # fetch http(s) image URLs (an SSRF door: opt-in, --allow-image-urls)

    def check(self) -> None:
        """Raise ValueError for an unsafe or impossible configuration."""
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535 (got {self.port})")
        if not is_loopback(self.host) and not self.api_key:
            raise ValueError(
                f"binding to {self.host} exposes the model beyond this machine: an API key is "
                "required (--api-key or TURBOSPARK_API_KEY)"
            )
        if self.max_queue < 0 or self.prefill_chunk < 1:
            raise ValueError("max_queue must be >= 0 and prefill_chunk >= 1")
        if self.ping_interval <= 0 or self.stall_timeout <= 0:
            raise ValueError("ping_interval and stall_timeout must be > 0")
