"""`turbospark chat`: headless chat for scripting and QA.

One prompt (`--prompt`), a script of turns (`--script FILE`, one user message per line; piped
stdin is read the same way, line by line as it arrives), or an interactive session (a terminal).
Replies stream to stdout; each turn ends with a one-line summary on stderr. Ctrl-C cancels the
reply through the engine's cancel predicate within milliseconds, even inside a prefill chunk (the
turn runs on a worker thread, see `interrupt`): the partial reply is kept (reason cancelled) and
the conversation goes on from it; a second Ctrl-C during the same reply, or Ctrl-C at the
interactive prompt, quits.

`--raw`: raw completion. Each line is text the model continues, with no roles and no template;
the prompt of a turn is everything so far (lines and replies, concatenated), so the next turn
reuses the previous one's KV prefix. A model without a chat template (a base model) always runs
this way, with or without the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import gc
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

from ..chat.api import ChatBackend, ChatMessage, TurnSettings, reply_token_ids
from ..engine import (
    EngineError,
    GenerationConfig,
    RateConfig,
    RawDecodeProgress,
    RawDecodeResult,
    Shaping,
    StopReason,
    TailProgress,
    TokenProgress,
    load_progress,
)
from ..engine.raw_completion import drive_raw_completion
from .arg_types import read_lines
from .interrupt import CtrlC, leave_now
from .progress import StderrProgress


def settings_from_args(args: argparse.Namespace) -> TurnSettings:
    """TurnSettings from the chat flags."""
    shaping = Shaping(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repeat_penalty,
        seed=args.seed,
    )
    gen = GenerationConfig(
        max_new_tokens=args.max_new,
        shaping=shaping,
        stop_strings=tuple(args.stop or ()),
        rate=RateConfig(max_tokens_per_sec=args.max_tps),
    )
    return TurnSettings(
        generation=gen,
        system_prompt=args.system,
        chunked_prefill=args.chunked,
        chunk_size=args.chunk_size,
    )


def summary_line(result: RawDecodeResult, ttft: float | None) -> str:
    """The one-line turn summary (prompt, reused, new, rates, drafts, stop reason)."""
    parts = [
        f"prompt {result.prompt_tokens} tok",
        f"reused {result.reused_prefix_tokens}",
        f"new {result.new_tokens} tok",
        f"prefill {result.prefill_tokens_per_sec:.1f} tok/s",
        f"decode {result.decode_tokens_per_sec:.1f} tok/s",
    ]
    if ttft is not None:
        parts.append(f"ttft {ttft * 1000:.0f} ms")
    if result.drafted_tokens:
        parts.append(f"draft {result.accepted_tokens}/{result.drafted_tokens} accepted")
    if result.restored_tokens:
        parts.append(f"restored {result.restored_tokens} from RAM")
    if result.image_encode_stopped:  # Stop reached into the encode (the projector's cb_eval)
        parts.append(f"image: encode stopped after {result.image_encode_seconds:.2f} s")
    elif result.image_tokens:
        parts.append(f"image: {result.image_tokens} tok, encoded in {result.image_encode_seconds:.2f} s")
    if result.session_slot_evicted:
        parts.append("slot evicted")
    parts.append(f"stop {result.reason.value}")
    return "[" + " | ".join(parts) + "]"


class Conversation:
    """A headless conversation over a ChatBackend: messages in, streamed reply out."""

    def __init__(self, backend: ChatBackend, settings: TurnSettings, session_id: str = "cli",
                 *, raw: bool = False) -> None:
        """`raw`: raw completion (each turn's prompt is the texts so far, concatenated)."""
        self.backend = backend
        self.settings = settings
        self.session_id = session_id
        self.raw = raw
        self.messages: list[ChatMessage] = []

    def turn(
        self, user_text: str, out: TextIO, cancel: Callable[[], bool], images: Sequence[Any] = (),
    ) -> tuple[RawDecodeResult, float | None]:
        """Run one turn, streaming the reply into `out`; `images` go with the user's text (shown
        to the model first). Raises EngineError (nothing recorded)."""
        pending = [*self.messages, ChatMessage("user", user_text, images=tuple(images))]
        # `raw` only when set, as the engine thread does (backends that never run raw).
        turn = self.backend.prepare_turn(self.session_id, pending, self.settings,
                                         **({"raw": True} if self.raw else {}))
        start = time.monotonic()
        ttft: float | None = None
        ids: list[int] = []
        text: list[str] = []

        def on_progress(event: RawDecodeProgress) -> None:
            nonlocal ttft
            if isinstance(event, TokenProgress):
                if ttft is None:
                    ttft = time.monotonic() - start
                ids.append(event.id)
                text.append(event.delta)
                out.write(event.delta)
            elif isinstance(event, TailProgress):
                text.append(event.text)
                out.write(event.text)
            out.flush()

        stream = self.backend.stream_turn(turn, cancel)
        result = drive_raw_completion(stream, self.settings.generation.rate, cancel, on_progress)
        # The ids it was generated with (stop tokens are never emitted), so the next prompt
        # continues this turn's KV instead of re-tokenizing the text.
        self.messages = [
            *pending,
            ChatMessage("assistant", "".join(text), reply_token_ids(result.reason, ids)),
        ]
        return result, ttft


def _user_turns(args: argparse.Namespace, stdin: TextIO | None = None) -> Iterable[str] | None:
    """The user turns: --prompt, --script, piped stdin read like a script (one turn per non-blank
    line, taken as it arrives, no "> " marker on stdout); None for a terminal (interactive)."""
    if args.prompt is not None:
        return [args.prompt]
    if args.script is not None:
        return [ln for ln in args.script.read_text(encoding="utf-8").splitlines() if ln.strip()]
    stdin = sys.stdin if stdin is None else stdin
    if stdin is None or stdin.isatty():
        return None
    return (ln.rstrip("\r\n") for ln in stdin if ln.strip())


def _raw_flag_problem(args: argparse.Namespace) -> str | None:
    """Why `--raw` cannot go with the other flags (None: it can)."""
    if not getattr(args, "raw", False):
        return None
    if getattr(args, "endpoint", None):
        return "--raw runs on this computer's model only (not with --endpoint)"
    if args.system is not None:
        return "--system has no place in raw completion (no roles); put the text in the prompt"
    if args.chat_template is not None:
        return "--chat-template and --raw exclude each other (raw completion uses no template)"
    return None


def chat_command(args: argparse.Namespace) -> int:
    """Entry point of `turbospark chat`."""
    problem = _raw_flag_problem(args)
    if problem is not None:
        print(f"turbospark: {problem}", file=sys.stderr)
        return 2
    try:  # before the model loads: a script that cannot be read is said at once
        turns = _user_turns(args)
    except OSError as e:
        print(f"turbospark: cannot read --script {args.script}: {e.strerror or e}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:
        print(f"turbospark: --script {args.script} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
              f"offset {e.start})", file=sys.stderr)
        return 2
    images: list[Any] = []
    if getattr(args, "image", None):  # read before the model loads: a bad image is said at once
        from ..media.images import ImageError, load_image

        try:
            images = [load_image(p) for p in args.image]
        except ImageError as e:
            print(f"turbospark: --image: {e}", file=sys.stderr)
            return 2
        if getattr(args, "raw", False) or getattr(args, "endpoint", None):
            print("turbospark: --image needs the local model's chat (not --raw or --endpoint)",
                  file=sys.stderr)
            return 2
    schema_path = getattr(args, "json_schema", None)
    schema: Any = None
    if schema_path is not None:  # read before the model loads: a bad file is said at once
        schema = read_json_schema(schema_path)
        if schema is None:
            return 2
    tools = None
    if getattr(args, "mcp_config", None) is not None:  # read before the model loads, as the schema
        from ..tools.config import ConfigError
        from .chat_tools import CliTools

        if getattr(args, "endpoint", None) or getattr(args, "raw", False) or schema_path is not None:
            print("turbospark: --mcp-config runs on the local model's chat only (not with --endpoint, "
                  "--raw or --json-schema)", file=sys.stderr)
            return 2
        try:
            tools = CliTools(args)
        except ConfigError as e:
            print(f"turbospark: --mcp-config: {e}", file=sys.stderr)
            return 2
    try:
        return _chat(args, turns, schema, schema_path, tools, images)
    finally:
        if tools is not None:
            tools.close()  # every server stopped: no orphans


def _chat(args: argparse.Namespace, turns: Iterable[str] | None, schema: Any, schema_path: Path | None,
          tools: Any, images: Sequence[Any] = ()) -> int:
    from ..model.choice.common import LoadChoiceError, engine_label
    from ..model.choice.kv_cache import cache_types_of
    from ..model.choice.speculation import choose_speculation
    from ..model.choice.threads import choose_threads
    from ..model.fetch import default_model_path, resolve_model_path
    from ..model.legacy import report_once

    if getattr(args, "endpoint", None):
        if getattr(args, "attach", None) or getattr(args, "collection", None):
            print("turbospark: --attach and --collection run with the local model only (not with "
                  "--endpoint)", file=sys.stderr)
            return 2
        if schema_path is not None:
            print("turbospark: --json-schema runs on the local model only (not with --endpoint)", file=sys.stderr)
            return 2
        from .remote_chat import remote_chat_command

        return remote_chat_command(args, settings_from_args(args), turns)

    def load() -> Any:
        from ..chat.backend import DEFAULT_SESSION_SLOTS, kv_budget_bytes, load_backend, state_cache_bytes

        return load_backend(
            path,
            session_slots=args.session_slots or DEFAULT_SESSION_SLOTS,
            max_kv_bytes=kv_budget_bytes(getattr(args, "kv_budget_mb", None)),
            max_context=getattr(args, "ctx_size", None),
            chat_template=args.chat_template,
            speculation=speculation,
            threads=threads,
            gpu_layers=gpu_layers,
            state_cache_bytes=state_cache_bytes(getattr(args, "cache_ram", None)),
            preload=preload,
            cache_types=cache_types,
            mmproj=getattr(args, "mmproj", None) or "auto",
        )

    path = None
    preload = None
    try:
        speculation = choose_speculation(getattr(args, "speculation", None)).mode  # flag > env > off
        threads = choose_threads(getattr(args, "threads", None)).count  # flag > env > cores
        cache_types = cache_types_of(args)  # flag > env > f16
        gpu_layers = -1 if getattr(args, "gpu_layers", None) is None else args.gpu_layers
        leftover = report_once()
        if leftover:
            print(f"turbospark: {leftover}", file=sys.stderr)
        path = resolve_model_path(args.model)
        preload = getattr(args, "preload", None)  # started by cli.main (see chat.preload)
        progress = StderrProgress()
        try:
            with load_progress.reporting(progress):
                backend = load()
        finally:
            progress.silence()  # a load that failed mid-phase leaves no line for later
    except (EngineError, OSError, LoadChoiceError) as e:
        print(f"turbospark: {e}", file=sys.stderr)
        if path is not None and path == default_model_path() and not path.exists():
            print("turbospark: the default model is not here yet: run `turbospark model fetch`",
                  file=sys.stderr)
        return 2
    if images and not getattr(backend, "has_vision", False):
        print(f"turbospark: --image: {path.name} takes no images: {getattr(backend, 'vision_reason', '')}", file=sys.stderr)
        return 2
    raw = bool(getattr(args, "raw", False)) or not getattr(backend, "has_chat_template", True)
    if raw and not getattr(args, "raw", False):
        print(f"turbospark: {path.name} has no chat template (a base model): raw completion, "
              "the text is continued as is", file=sys.stderr)
    settings = settings_from_args(args)
    if schema is not None:
        settings = with_json_schema(settings, schema, backend, schema_path)
        if settings is None:
            return 2
    conv = Conversation(backend, settings, raw=raw)
    docs = None
    if getattr(args, "attach", None) or getattr(args, "collection", None):
        from .chat_docs import open_documents

        docs = open_documents(args, backend)
        if docs is None:
            return 2
    if getattr(args, "leave_at_once", False):  # the process itself, not a caller in-process
        # The load's objects (~50,000) go to the permanent generation: a full collection during
        # a turn took 13-48 ms holding the GIL, and Ctrl-C's handler needs the GIL to run.
        gc.freeze()
    ctrl_c = CtrlC()
    cancel = ctrl_c.cancelled.is_set

    def one_turn(user_text: str) -> RawDecodeResult:
        prepared = docs.prepare(user_text) if docs is not None else None
        sent_text = prepared.text if prepared else user_text
        asked_at = len(conv.messages)  # where this turn's user message goes
        shown = list(images) if not conv.messages else []  # the images go with the first message
        if tools is not None:
            from .chat_tools import agent_turn

            # A document's text in the prompt suspends "always allow" (text the user did not write)
            result, ttft = agent_turn(conv, tools, sent_text, sys.stdout, cancel,
                                      untrusted_text=prepared is not None, images=shown), None
        else:
            result, ttft = conv.turn(sent_text, sys.stdout, cancel, shown)
        # Said here, on the worker, the moment the turn ends: from the main thread it would
        # first wait for that thread to wake (and, on a busy machine, to get a core).
        sys.stdout.write("\n")
        if prepared is not None:
            from .chat_docs import figures_line, sources_footer

            # The history keeps the question alone: the next turn brings its own sources.
            conv.messages[asked_at] = dataclasses.replace(conv.messages[asked_at], content=user_text)
            if prepared.sources:
                sys.stdout.write(sources_footer(prepared.sources) + "\n")
                print(figures_line(prepared), file=sys.stderr)
        if not args.quiet_summary:
            print(summary_line(result, ttft), file=sys.stderr)
        return result

    ended_by_ctrl_c = False
    try:
        with ctrl_c:
            interactive = turns is None
            if interactive:
                mode = ", raw completion: each line is continued, no roles" if raw else ""
                print(f"TurboSpark chat with {path.name} ({engine_label(backend.model_info()) or '?'}"
                      f"{mode}) — empty line or Ctrl-D quits, Ctrl-C stops a reply (at the prompt: quits).",
                      file=sys.stderr)
            for user_text in turns if turns is not None else read_lines(ctrl_c.read_line):
                if interactive and not user_text.strip():
                    break
                if not interactive:
                    print(f"> {user_text}", file=sys.stderr)
                try:
                    # On a worker thread: the main thread stays free to take Ctrl-C at once.
                    result = ctrl_c.run_turn(lambda: one_turn(user_text))
                except EngineError as e:
                    print(f"\nturbospark: {e}", file=sys.stderr)
                    if not interactive:
                        return 1
                    continue
                # Only Ctrl-C cancels a turn here; if no turn follows, the session ends with it.
                ended_by_ctrl_c = result.reason is StopReason.CANCELLED
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        ended_by_ctrl_c = True
    if ended_by_ctrl_c and getattr(args, "leave_at_once", False):
        leave_now(0)  # the user asked to be gone: skip the interpreter's teardown
    return 0


def read_json_schema(path: Path) -> Any:
    """The JSON schema in `path`, or None after saying why it cannot be read."""
    try:
        return json.loads(path.read_text("utf-8"))
    except OSError as e:
        print(f"turbospark: cannot read --json-schema {path}: {e.strerror or e}", file=sys.stderr)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"turbospark: --json-schema {path} is not JSON: {e}", file=sys.stderr)
    return None


def with_json_schema(settings: TurnSettings, schema: Any, backend: Any, path: Path) -> TurnSettings | None:
    """`settings` constrained to `schema` (compiled for the model's vocabulary), or None after
    saying which part of the schema cannot be compiled."""
    from ..chat.grammar import GrammarError, compile_json_schema

    try:
        spec = compile_json_schema(schema, backend.tokenizer, label=f"the JSON schema in {path}")
    except GrammarError as e:
        print(f"turbospark: {e}", file=sys.stderr)
        return None
    return dataclasses.replace(settings, generation=dataclasses.replace(settings.generation, constraint=spec))
