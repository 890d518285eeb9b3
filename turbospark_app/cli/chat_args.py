"""The `chat` subcommand's flags, apart from the command itself: every start builds the parser,
and the command's own module imports the engine (numpy, ~0.1 s), which a parser needs none of.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .arg_types import float_in, int_at_least, non_empty

# engine.foundation.DEFAULT_PREFILL_CHUNK (importing the engine package would import numpy;
# tests/test_cli_flags.py holds the two equal)
DEFAULT_PREFILL_CHUNK = 512


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    """The `chat` subcommand's flags."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one user message; print the reply and exit")
    src.add_argument("--script", type=Path, help="a file of user messages, one per line")
    p.add_argument("--system", help="system prompt (default: the model template's own)")
    p.add_argument("--image", type=Path, action="append", default=None, metavar="FILE",
                   help="an image (PNG, JPEG, WebP, GIF's first frame) shown to the model with the "
                   "first message (repeatable; needs a model with a vision projector: --mmproj)")
    # The names llama.cpp's and the OpenAI API's users type work too (-n, --max-tokens, --temp).
    p.add_argument("--max-new", "--max-tokens", "--n-predict", "-n", dest="max_new",
                   type=int_at_least(1), default=256, metavar="N",
                   help="most tokens per reply (default 256)")
    p.add_argument("--temperature", "--temp", dest="temperature", type=float_in(0.0), default=0.0,
                   help="sampling temperature (default 0: greedy, the same reply every time)")
    p.add_argument("--top-k", type=int_at_least(0), default=0,
                   help="sample from the k most likely tokens (default 0: all)")
    p.add_argument("--top-p", type=float_in(0.0, 1.0, low_open=True), default=1.0,
                   help="nucleus sampling: the smallest set of tokens holding this probability "
                   "(default 1: all)")
    p.add_argument("--min-p", type=float_in(0.0, 1.0, high_open=True), default=0.0,
                   help="drop tokens less likely than this fraction of the top one (default 0)")
    p.add_argument("--repeat-penalty", type=float_in(0.0, low_open=True), default=1.0,
                   help="penalise tokens among the last 64 of the context, as llama.cpp does "
                   "(default 1: off)")
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="seed of the sampler: the same seed and settings give the same reply")
    p.add_argument("--stop", type=non_empty, action="append", default=None, metavar="TEXT",
                   help="stop string (repeatable)")
    p.add_argument("--max-tps", type=float_in(0.0, low_open=True), default=None, metavar="TOK/S",
                   help="cap the decode rate")
    p.add_argument("--chunked", action=argparse.BooleanOptionalAction, default=True,
                   help="prefill in chunks (default) or token by token (--no-chunked)")
    p.add_argument("--chunk-size", type=int_at_least(1), default=DEFAULT_PREFILL_CHUNK,
                   help=f"prompt tokens per prefill chunk (default {DEFAULT_PREFILL_CHUNK}; Stop "
                   "reaches inside a chunk)")
    p.add_argument("--quiet-summary", action="store_true", help="no per-turn summary line")
    p.add_argument("--raw", action="store_true",
                   help="raw completion: the text is continued as is (no roles, no template); the "
                   "default for a model without a chat template")
    p.add_argument("--json-schema", type=Path, default=None, metavar="FILE",
                   help="constrain every reply to JSON valid under the JSON schema in FILE "
                   "(constrained decoding: the reply is that JSON and nothing else)")
    p.add_argument("--chat-template", choices=["chatml"], default=None,
                   help="use the built-in ChatML template instead of the model's own (offered when "
                   "the model's template is refused at load and its vocabulary has ChatML's tokens)")
    p.add_argument("--mcp-config", type=Path, default=None, metavar="FILE",
                   help="MCP servers the model may call (an mcp.json: {\"mcpServers\": {...}}); each "
                   "call is shown on stderr and asked unless --allow-tools allows it")
    p.add_argument("--allow-tools", default="", metavar="NAME,...|all",
                   help="tools that run without asking (server__tool or tool names, or all)")
    p.add_argument("--tool-choice", default="auto", metavar="auto|none|required|NAME",
                   help="force a tool call on the first step (constrained, so it works on a model "
                   "whose template has no tools)")
    p.add_argument("--max-tool-steps", type=int_at_least(1), default=10, metavar="N",
                   help="tool steps per message before the loop is ended (default 10)")
    p.add_argument("--attach", type=Path, action="append", default=None, metavar="FILE",
                   help="a document for the conversation (PDF, Markdown, text, code, HTML; "
                   "repeatable): whole when it fits the context with room for the reply, else the "
                   "passages retrieved for each question; the reply is followed by its Sources")
    p.add_argument("--collection", action="append", default=None, metavar="NAME",
                   help="answer from an indexed collection (`turbospark docs index`; repeatable)")
    p.add_argument("--embedder", metavar="GGUF", default=None,
                   help="the embedding GGUF for --attach (default: TURBOSPARK_EMBEDDER, else "
                   "all-MiniLM-L6-v2)")
    from .remote_args import add_remote_arguments

    add_remote_arguments(p)
