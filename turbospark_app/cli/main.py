"""The `turbospark` command: the desktop app by default, plus headless subcommands.

    turbospark                      the desktop app
    turbospark model fetch|path     the embedded default model
    turbospark model info [FILE]    the metadata of any GGUF, and whether llama.cpp runs it
    turbospark model search TEXT    Hugging Face GGUF repos, each file's size and fit verdict
    turbospark model get REPO[:Q]   download (resumable, verified) into the models folder
    turbospark model list           the models folder; --model REPO:QUANT opens one by name
    turbospark chat --prompt ...    headless chat for scripting and QA
    turbospark serve [--port 8080]  the local OpenAI-compatible API, without the window
    turbospark --self-test          load the model, generate a few tokens, print a summary
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any, Sequence

from ..model.choice.kv_cache import CACHE_TYPE_K, CACHE_TYPE_V, CACHE_TYPES
from ..model.choice.speculation import SPECULATION_ENV, SPECULATION_FLAG, SPECULATION_MODES
from ..model.choice.threads import MAX_THREADS, THREADS_ENV, THREADS_FLAG
from ..model.llamacpp.probe import PROBE_FLAG
from .arg_types import float_in, int_at_least, int_in


def _add_shared_flags(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Flags accepted before or after the subcommand. On a subparser they default to SUPPRESS,
    so `turbospark --model X chat` keeps X instead of the subparser's default overwriting it."""
    default = None if top else argparse.SUPPRESS
    p.add_argument(
        "--model",
        metavar="GGUF",
        default=default,
        help="a GGUF file to use instead of the default model (also: TURBOSPARK_MODEL)",
    )
    p.add_argument(
        "--mmproj",
        metavar="GGUF",
        default=default,
        help="the model's vision projector (image input): a mmproj GGUF, or \"off\" (default: a "
        "mmproj*.gguf beside the model whose width matches it)",
    )
    p.add_argument(
        "--session-slots",
        type=int_at_least(1),
        default=default,
        metavar="N",
        help="KV slots kept for conversations (default: the app's setting, 4)",
    )
    p.add_argument(
        "--kv-budget-mb",
        type=float_in(0.0, low_open=True),
        default=default,
        metavar="MB",
        help="bound on the KV memory all session slots share (it sets how many tokens the KV "
        "cache holds; least recently used idle slots are freed for a new turn) (default: the "
        "context size's worth)",
    )
    p.add_argument(
        "--cache-ram",
        type=float_in(0.0),
        default=default,
        metavar="MB",
        help="RAM for the KV state of conversations whose slot another one took: they come back "
        "without re-reading their history (0 = none kept; default: the app's setting, 1024)",
    )
    p.add_argument(
        "-c", "--ctx-size",
        dest="ctx_size",
        type=int_at_least(256),
        default=default,
        metavar="N",
        help="tokens the KV cache holds, shared by every conversation in memory; also the longest "
        "prompt + reply (default: the model's own context, at most 4096)",
    )
    p.add_argument(
        "-t", THREADS_FLAG,
        dest="threads",
        type=int_in(1, MAX_THREADS),
        default=default,
        metavar="N",
        help=f"threads llama.cpp computes with (default: the machine's performance cores). Wins "
        f"over {THREADS_ENV} and the app's setting",
    )
    p.add_argument(
        "-ngl", "--gpu-layers",
        dest="gpu_layers",
        type=int_at_least(0),
        default=default,
        metavar="N",
        help="layers on the GPU where llama.cpp has one (Metal on Apple Silicon); 0 = the CPU only "
        "(default: all)",
    )
    for short, spec, what in (("-ctk", CACHE_TYPE_K, "keys"), ("-ctv", CACHE_TYPE_V, "values")):
        p.add_argument(
            short, spec.flag,
            dest=spec.flag.lstrip("-").replace("-", "_"),
            choices=CACHE_TYPES,
            default=default,
            help=f"the KV cache's type for {what}, as llama-server's: q8_0 takes 0.53x of f16's "
            f"memory, q4_0 0.28x (a quantized V turns flash attention on). Wins over {spec.env} "
            "and the app's setting (default: f16)",
        )
    p.add_argument(
        SPECULATION_FLAG,
        choices=SPECULATION_MODES,
        default=default,
        help="lookup: a reply decoding alone drafts tokens by matching its last words against the "
        "prompt and itself, and verifies them in one pass (faster on replies that quote or edit "
        f"the prompt); off: one token per pass. Wins over {SPECULATION_ENV} and the app's setting",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `turbospark` parser (the desktop app unless a subcommand is given)."""
    parser = argparse.ArgumentParser(prog="turbospark", description=__doc__.splitlines()[0])
    _add_shared_flags(parser, top=True)
    parser.add_argument("--self-test", action="store_true", help="headless smoke test, exit 0 on success")
    sub = parser.add_subparsers(dest="command")

    model = sub.add_parser("model", help="the default model; the metadata of any GGUF (info FILE) "
                           "and whether llama.cpp runs it; Hugging Face: search TEXT, get "
                           "REPO[:QUANT], list, token")
    model.add_argument("action", choices=["fetch", "path", "info", "search", "get", "list", "token"])
    model.add_argument("operands", nargs="*", metavar="ARG",
                       help="info: any GGUF FILE (default: --model, else the default model); "
                       "search: words, a repo id or a Hub URL; get: REPO[:QUANT]")
    model.add_argument("--sort", choices=["downloads", "recent", "likes", "trending"],
                       default="downloads", help="search: the order of the repos (default: downloads)")
    model.add_argument("--limit", type=int_at_least(1), default=10, metavar="N",
                       help="search: at most N repos (default: 10)")
    _add_shared_flags(model, top=False)

    chat = sub.add_parser("chat", help="headless chat: stream a reply to stdout")
    _add_shared_flags(chat, top=False)
    from .chat_args import add_chat_arguments

    add_chat_arguments(chat)

    docs = sub.add_parser("docs", help="document collections: index a folder, list, search; fetch "
                          "the embedding model")
    _add_shared_flags(docs, top=False)
    from .docs_command import add_docs_arguments

    add_docs_arguments(docs)

    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API (no window)")
    _add_shared_flags(serve, top=False)
    from .serve_command import add_serve_arguments

    add_serve_arguments(serve)
    return parser


def _model_operands(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`model`'s operands by action: info [FILE] (args.file); fetch and path take none
    (model_command says so, exit 2)."""
    ops = list(args.operands)
    args.file = None
    if args.action in ("search", "get", "list", "token"):
        return  # catalog_command checks its own operands
    if ops:
        if len(ops) > 1:
            parser.error(f"`model {args.action}` takes at most one FILE")
        args.file = ops[0]


def _refuse_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    unknown: list[str]) -> None:
    """Exit 2 naming the arguments no flag takes, in the words of the subcommand they were given
    to (its usage, not the top level's), with the nearest flag when one is close."""
    target = parser
    if args.command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        target = sub.choices[args.command]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    flags = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    first = next((u.split("=", 1)[0] for u in unknown if u.startswith("-")), None)
    near = difflib.get_close_matches(first, flags, n=1, cutoff=0.6) if first else []
    if near:
        message += f" (did you mean {near[0]}?)"
    target.error(message)


def _preload(args: argparse.Namespace) -> Any:
    """A `chat.preload.Preload` of the file `turbospark chat` will open, or None (a remote
    engine, a file not there, or one too big for its load to be all overhead)."""
    if getattr(args, "endpoint", None):
        return None
    from ..chat.preload import start_preload
    from ..model.fetch import resolve_model_path

    try:
        path = resolve_model_path(args.model)
    except Exception:  # said by chat_command, which resolves it again
        return None
    layers = getattr(args, "gpu_layers", None)
    preload = start_preload(path, -1 if layers is None else layers)  # (its thread finds the verdict)
    if preload is None and os.path.isfile(path):
        from ..model.llamacpp.probe import verdict_soon

        verdict_soon(path)  # a big file's first open: its check in a child beside the imports
    return preload


def main(argv: Sequence[str] | None = None) -> int:
    """Run `turbospark` with `argv`, or with the process's own arguments when None (the console
    script, `python -m turbospark_app`, the frozen app's launcher)."""
    if getattr(sys, "frozen", False):
        import multiprocessing

        # A frozen app is its own Python: the PDF reader's spawned child (documents.pdf_worker)
        # starts as this executable with multiprocessing's flags, handled here.
        multiprocessing.freeze_support()
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == [PROBE_FLAG] and len(raw) == 2:  # the loader's child (llamacpp.probe): no parser
        from ..model.llamacpp.probe import child_main

        return child_main(raw[1])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args, unknown)
    if args.command == "model":
        _model_operands(parser, args)
    model = getattr(args, "model", None)
    if model and not os.path.exists(os.path.expanduser(model)):  # `--model REPO:QUANT`, by name
        from .catalog_command import resolve_model_name  # (a file's path skips the import)

        args.model = resolve_model_name(args.model)
    if args.command == "model" and args.action in ("search", "get", "list", "token"):
        from .catalog_command import run_catalog_command

        return run_catalog_command(args)
    if args.command == "model":
        from .model_command import run_model_command

        return run_model_command(args)
    if args.command == "chat":
        args.preload = _preload(args)  # the model loads while the chat modules import
        try:
            from .chat_command import chat_command

            # Called as the process itself (not by a test in-process): a session that Ctrl-C
            # ended may skip the interpreter's teardown (interrupt.leave_now).
            args.leave_at_once = argv is None
            return chat_command(args)
        finally:
            if args.preload is not None:
                args.preload.close()  # a model the command did not take (it ended first)
    if args.command == "docs":
        from .docs_command import docs_command

        return docs_command(args)
    if args.command == "serve":
        from .serve_command import serve_command

        return serve_command(args)
    if args.self_test:
        from .self_test import self_test

        return self_test(args)
    from ..host.xcb_check import check_window_platform

    hint = check_window_platform()
    if hint is not None:  # Qt would abort with "Could not load the Qt platform plugin xcb"
        print(hint, file=sys.stderr)
        return 1
    from ..ui.app import run_app

    return run_app(args)


if __name__ == "__main__":
    sys.exit(main())
