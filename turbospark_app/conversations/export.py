"""A conversation as Markdown (the branch on screen, to read or paste) or as JSON (everything:
every message with its place in the tree, the branch on screen, settings, per-reply figures).

Pure functions over the store; the window asks for a file name and writes the text.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from .parts import ATTACHMENT, IMAGE, SOURCES, TOOL_CALL, TOOL_RESULT, Part
from .roles import role_names
from .store import INTERRUPTED, Store, StoredMessage
from .tree import children_of, variant_of

EXPORT_FORMAT = "turbospark-conversation"
EXPORT_VERSION = 1
_ENDINGS = {"cancelled": "stopped", "max_tokens": "token limit", INTERRUPTED: "interrupted"}


class ExportError(Exception):
    """The conversation does not exist (any more)."""


def conversation_json(store: Store, conversation_id: str, *, model: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document (see the module docstring); `model`: the loaded model's facts."""
    conv = store.conversation(conversation_id)
    if conv is None:
        raise ExportError(f"no conversation {conversation_id}")
    everything = store.all_messages(conversation_id)
    kids = children_of(everything)
    branch = store.messages(conversation_id)
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "conversation": {
            "id": conv.id, "title": conv.title, "created": conv.created, "updated": conv.updated,
            "system_prompt": conv.system_prompt, "settings": conv.settings,
            "raw_completion": conv.raw,
        },
        "model": _model_facts(model or {}),
        "branch_on_screen": [m.id for m in branch],
        "messages": [_message_json(m, kids) for m in everything],
    }


def conversation_markdown(store: Store, conversation_id: str, *, images_dir: Path | None = None) -> str:
    """The branch on screen as Markdown: each message under its role, replies with their
    figures and how they ended; a message with alternatives says which one is shown. A user
    message's images are links to their stored files (`images_dir`: by default
    `<data dir>/images`, where the window keeps them), its attachments their names."""
    if images_dir is None:
        from ..host.folders import data_dir

        images_dir = data_dir() / "images"
    conv = store.conversation(conversation_id)
    if conv is None:
        raise ExportError(f"no conversation {conversation_id}")
    kids = children_of(store.all_messages(conversation_id))
    lines = [f"# {conv.title}", ""]
    settings = ", ".join(f"{k} {v}" for k, v in sorted(conv.settings.items()) if k != "system_prompt")
    if settings:
        lines += [f"*Settings: {settings}*", ""]
    if conv.raw:
        lines += ["*Raw completion: the texts below run on as one prompt, with no roles.*", ""]
    if conv.system_prompt:
        lines += ["**System prompt:**", "", _quote(conv.system_prompt), ""]
    names = role_names(conv.raw)  # raw completion: "Text" / "Continuation", as on screen
    for m in store.messages(conversation_id):
        position, count = variant_of(m, kids)
        title = names.get(m.role, m.role.title())
        if count > 1:
            title += f" (alternative {position} of {count})"
        lines += [f"## {title}", ""]
        lines += _parts_markdown(m.parts)
        lines += _media_markdown(m.parts, images_dir)
        lines += [m.content if m.role == "assistant" else _user_text(m.content), ""]
        lines += _sources_markdown(m.parts)
        figures = _figures_line(m)
        if figures:
            lines += [f"*{figures}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _parts_markdown(parts: Sequence[Part]) -> list[str]:
    """An agent reply's steps: each call (arguments as JSON) and its result. (A step's text
    spells its calls in the model's own markup: it is in the JSON export, not repeated here.)"""
    out: list[str] = []
    for p in parts:
        if p.kind == TOOL_CALL:
            approval = p.meta.get("approval", "")
            out += [f"**Tool call** `{p.name}`" + (f" ({approval})" if approval else "") + ":", "",
                    "```json", _pretty(p.arguments or "{}"), "```", ""]
        elif p.kind == TOOL_RESULT:
            head = "Tool error" if p.meta.get("is_error") else "Tool result"
            seconds = p.meta.get("seconds")
            timing = f" ({float(seconds) * 1000:.0f} ms)" if seconds is not None else ""
            out += [f"**{head}** `{p.name}`{timing}:", "", "```", p.text, "```", ""]
    return out


def _media_markdown(parts: Sequence[Part], images_dir: Path) -> list[str]:
    """A user message's images (linked to their stored files) and attachments (named)."""
    out: list[str] = []
    for p in parts:
        if p.kind == IMAGE and p.meta.get("file"):
            alt = (p.name or "image").replace("]", ")").replace("[", "(")
            out += [f"![{alt}]({(images_dir / str(p.meta['file'])).resolve().as_uri()})", ""]
    for p in parts:
        if p.kind == ATTACHMENT:
            bits = [f"`{p.name}`"]
            if p.meta.get("pages"):
                bits.append(f"{p.meta['pages']} pages")
            if p.meta.get("tokens") is not None:
                bits.append(f"{int(p.meta['tokens']):,} tokens")
            mode = p.meta.get("mode")
            if mode == "retrieved":
                bits.append(f"retrieved: {p.meta.get('used', 0)} of {p.meta.get('chunks', 0)} chunks")
            elif mode:
                bits.append(str(mode))
            out += ["**Attachment:** " + " · ".join(bits), ""]
    return out


def _sources_markdown(parts: Sequence[Part]) -> list[str]:
    """A reply's Sources (its `sources` part): `[n] file, page n` and the passage, quoted."""
    meta = next((p.meta for p in parts if p.kind == SOURCES), None)
    if not meta or not meta.get("sources"):
        return []
    out = ["**Sources:**", ""]
    for s in meta["sources"]:
        page = f", page {s['page']}" if s.get("page") is not None else ""
        out += [f"{s.get('n')}. `{s.get('path', '')}`{page}", "", _quote(str(s.get("text", "")).strip()), ""]
    return out


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments


def _user_text(text: str) -> str:
    # User text is shown verbatim in the app: keep it so (no accidental Markdown).
    return "\n".join(("    " + line if line.strip() else line) for line in text.split("\n")) \
        if any(c in text for c in "*_#`[<") else text


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in text.split("\n"))


def _figures_line(m: StoredMessage) -> str:
    if m.role != "assistant":
        return ""
    stats = m.stats or {}
    parts = []
    ending = _ENDINGS.get(m.stop_reason or "")
    if ending:
        parts.append(ending)
    if "prompt_tokens" in stats:
        parts.append(f"prompt {stats['prompt_tokens']} tok, reused {stats.get('reused_prefix_tokens', 0)}")
    if stats.get("new_tokens") is not None:
        parts.append(f"new {stats['new_tokens']} tok")
    rate = stats.get("decode_tokens_per_sec")
    if rate:
        parts.append(f"{rate:.1f} tok/s")
    runs = stats.get("runs") or []
    if len(runs) > 1:
        parts.append(f"{len(runs)} runs (continued)")
    return " · ".join(parts)


def _message_json(m: StoredMessage, kids: dict[int | None, list[StoredMessage]]) -> dict[str, Any]:
    position, count = variant_of(m, kids)
    return {
        "id": m.id, "parent_id": m.parent_id, "on_screen": m.active, "role": m.role,
        "content": m.content, "created": m.created, "stop_reason": m.stop_reason,
        "alternative": {"position": position, "count": count},
        "token_count": None if m.token_ids is None else len(m.token_ids),
        "figures": m.stats,
        **({"parts": [p.to_json() for p in m.parts]} if m.parts else {}),
    }


def _model_facts(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "file_name", "file_size_bytes", "architecture", "quantization", "context_length", "max_context")
    return {k: info[k] for k in keys if k in info}


def write_text(path: str, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file: a failed write leaves no
    half file behind. Raises OSError."""
    from pathlib import Path

    target = Path(path)
    tmp = target.with_name(target.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)


def to_json_text(document: dict[str, Any]) -> str:
    """The document as indented JSON text (non-ASCII kept)."""
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"
