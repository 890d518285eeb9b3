"""The remote flags of `turbospark chat` (`--endpoint`, ...), apart from `remote_chat` so that
building the parser does not import the HTTP client (aiohttp: ~0.12 s of every start)."""

from __future__ import annotations

import argparse

from .arg_types import float_in

API_KEY_ENV = "TURBOSPARK_API_KEY"


def add_remote_arguments(p: argparse.ArgumentParser) -> None:
    """The remote flags of `turbospark chat`."""
    p.add_argument("--endpoint", metavar="URL",
                   help="chat with an OpenAI-compatible server (base URL, or a saved endpoint's name)")
    p.add_argument("--remote-model", metavar="NAME", help="the model id on that server")
    p.add_argument("--api-key", metavar="KEY", help=f"the server's API key (also: {API_KEY_ENV})")
    p.add_argument("--read-timeout", type=float_in(0.0, low_open=True), default=120.0, metavar="S",
                   help="give up on a remote stream silent for this long (default 120 s)")
