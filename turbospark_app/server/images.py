"""Images in API requests: OpenAI's `image_url` content parts -> decoded images.

`data:` URLs only, unless the server was started with `--allow-image-urls`: a server that fetches
any http(s) URL it is handed is a door into the networks it can reach (SSRF). Every image is
decoded and checked by `media.images` (size, format, frames, truncation) before the model sees
it: a bad one is a 400 naming the part, and the server goes on.
"""

from __future__ import annotations

import dataclasses
import urllib.request
from typing import Any, Sequence

from ..chat.api import ChatMessage
from ..media.images import MAX_BYTES, ImageError, decode_data_url, decode_image
from .errors import bad_request

FETCH_SECONDS = 10.0


def image_url_of(part: dict[str, Any], param: str) -> str:
    """The URL of an `image_url` part (checked for shape only)."""
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url:
        raise bad_request("an image_url part needs image_url.url (a data: URL)", param)
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("data", "http", "https"):
        raise bad_request(f"image URLs must be data: URLs (got a {scheme}: URL)", param)
    return url


def _fetch(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "TurboSpark"})
    with urllib.request.urlopen(req, timeout=FETCH_SECONDS) as resp:  # noqa: S310 (opt-in flag)
        data = resp.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ImageError(f"the image at {url} is over {MAX_BYTES >> 20} MiB")
    return data


def resolve_images(messages: Sequence[ChatMessage], allow_urls: bool) -> tuple[ChatMessage, ...]:
    """The messages with their image URLs decoded (`media.images.ImageInput`); ApiError 400
    for a URL that is refused or an image that cannot be used. Blocking: run it off the loop."""
    out = []
    for i, m in enumerate(messages):
        if not m.images:
            out.append(m)
            continue
        decoded = []
        for k, url in enumerate(m.images):
            param = f"messages[{i}].content"
            if not isinstance(url, str):
                decoded.append(url)
                continue
            try:
                if url.lower().startswith("data:"):
                    decoded.append(decode_data_url(url))
                elif not allow_urls:
                    raise bad_request("images must be sent as data: URLs; this server does not fetch "
                                      "http(s) URLs (start it with --allow-image-urls to allow that)", param,
                                      code="image_url_refused")
                else:
                    try:
                        data = _fetch(url)
                    except OSError as e:
                        raise ImageError(f"the image at {url} could not be fetched: {e}") from None
                    decoded.append(decode_image(data, name=url.rsplit("/", 1)[-1]))
            except ImageError as e:
                raise bad_request(f"image {k + 1} of message {i}: {e}", param, code="invalid_image") from None
        out.append(dataclasses.replace(m, images=tuple(decoded)))
    return tuple(out)
