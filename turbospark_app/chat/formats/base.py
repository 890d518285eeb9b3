"""The incremental reply parser: reasoning, answer, tool calls (see the package docstring)."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Protocol, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolCall:
    """One call: its id, the function's name and its arguments as JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of the reply's `index`-th call, as OpenAI streams one: the first piece carries the
    call's id and name, every piece the next text of its arguments."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


ReplyDelta = ContentDelta | ReasoningDelta | ToolCallDelta


@dataclass
class ParsedReply:
    """What the whole reply said."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


RawCall = tuple[str, str, "str | None"]  # (name, arguments JSON, id the model gave or None)
OpenCall = tuple[str, str, "str | None"]  # (name, arguments written so far, id the model gave)


@dataclass(frozen=True)
class CallsRead:
    """A tool-call section as read so far: its complete calls (None: it cannot be calls), and
    the call after them that is being written (its name known, its arguments begun), if any."""

    calls: list[RawCall] | None = field(default_factory=list)
    open: OpenCall | None = None


class CallFormat(Protocol):
    """What the parser needs of a family's tool-call format (`families.ToolFormat`)."""

    name: str
    starts: tuple[str, ...]
    bare_json: bool
    id_style: str

    def parse(self, section: str, final: bool) -> CallsRead:
        """The calls in `section` (which begins at a start marker): the complete ones (None
        when it cannot be calls, only decided for sure when `final`) and the one being written.
        A finished call's arguments begin with every `open` arguments given for it before."""
        ...


def new_call_id(style: str = "openai") -> str:
    """An OpenAI-style call id; "mistral": 9 letters and digits (Mistral's templates refuse others)."""
    if style == "mistral":
        return secrets.token_hex(5)[:9]
    return "call_" + secrets.token_hex(12)


def _held(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of `buf` that is a proper prefix of a marker."""
    longest = max((len(m) for m in markers), default=1) - 1
    for n in range(min(len(buf), longest), 0, -1):
        tail = buf[-n:]
        if any(m.startswith(tail) for m in markers):
            return n
    return 0


class ReplyParser:
    """Fed a reply's text in pieces (`feed`), gives back deltas; `finish()` at the end.

    `fmt`: the tool-call format (None: no tools, the text is answer or reasoning only).
    `reasoning`: (open, close) markers, or None. `thinking`: the prompt already opened the
    reasoning block (a template whose generation prompt ends with the open marker).
    """

    def __init__(self, fmt: CallFormat | None = None, reasoning: tuple[str, str] | None = None,
                 *, thinking: bool = False) -> None:
        self.fmt = fmt
        self.reasoning = reasoning
        self.reply = ParsedReply()
        self._state = "reasoning" if thinking and reasoning else "start"
        self._buf = ""
        self._section = ""
        self._gap = ""
        self._emitted_calls = 0
        self._open: tuple[str, str, str] | None = None  # the call being streamed: id, name, arguments sent
        self._answer_started = False  # answer text went out (a bare-JSON call must come first)

    # -- feeding ---------------------------------------------------------------------------

    def feed(self, text: str) -> list[ReplyDelta]:
        """The deltas `text` releases (possibly none: it may be held back)."""
        if self._state == "tools":
            self._section += text
            return self._calls(final=False)
        self._buf += text
        out: list[ReplyDelta] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[ReplyDelta]:
        """The reply ended: everything held back, and the tool calls' final parse."""
        out: list[ReplyDelta] = []
        if self._state == "tools":
            out += self._calls(final=True)
        elif self._state == "reasoning":
            self._reason(out, self._buf)
        else:
            self._answer(out, self._buf)
        self._buf = ""
        return out

    # -- internals -------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """"start", "reasoning", "content" or "tools"."""
        return self._state

    def _step(self, out: list[ReplyDelta]) -> bool:
        """One transition on the held text; True when another may follow."""
        buf = self._buf
        if self._state == "start":
            lead = buf.lstrip()
            if self.reasoning:
                opener = self.reasoning[0]
                if lead.startswith(opener):
                    self._buf = lead[len(opener):]
                    self._state = "reasoning"
                    return True
                if opener.startswith(lead):
                    return False  # could still open the reasoning block
            self._state = "content"
            return True
        if self._state == "reasoning":
            assert self.reasoning is not None
            closer = self.reasoning[1]
            at = buf.find(closer)
            if at >= 0:
                self._reason(out, buf[:at])
                self._buf = buf[at + len(closer):].lstrip()
                self._state = "content"
                return True
            keep = _held(buf, [closer])
            self._reason(out, buf[: len(buf) - keep])
            self._buf = buf[len(buf) - keep:]
            return False
        # content
        fmt = self.fmt
        if fmt is None:
            self._answer(out, buf)
            self._buf = ""
            return False
        if fmt.bare_json and not self._answer_started:
            lead = buf.lstrip()
            if lead[:1] in ("{", "["):
                self._enter_tools(out, "", lead)
                return False
            if not lead:
                return False
        hits = [(buf.find(m), m) for m in fmt.starts if m in buf]
        if hits:
            at, _ = min(hits)
            self._enter_tools(out, buf[:at], buf[at:])
            return False
        keep = _held(buf, fmt.starts)
        release = buf[: len(buf) - keep]
        # Trailing whitespace waits too: before a call it is dropped, wherever the text was cut.
        release, space = release.rstrip(), release[len(release.rstrip()):]
        self._answer(out, release)
        self._buf = space + buf[len(buf) - keep:]
        return False

    def _enter_tools(self, out: list[ReplyDelta], before: str, section: str) -> None:
        kept = before.rstrip()
        self._answer(out, kept)
        self._gap = before[len(kept):]  # given back with the section if it is no call after all
        self._state = "tools"
        self._buf = ""
        self._section = section
        out += self._calls(final=False)

    def _answer(self, out: list[ReplyDelta], text: str) -> None:
        if not text:
            return
        if not self._answer_started:
            text = text.lstrip()
            if not text:
                return
        self._answer_started = True
        self.reply.content += text
        out.append(ContentDelta(text))

    def _reason(self, out: list[ReplyDelta], text: str) -> None:
        if not self.reply.reasoning:
            text = text.lstrip()
        if text:
            self.reply.reasoning += text
            out.append(ReasoningDelta(text))

    def _calls(self, final: bool) -> list[ReplyDelta]:
        assert self.fmt is not None
        read = self.fmt.parse(self._section, final)
        found = read.calls
        out: list[ReplyDelta] = []
        if (found is None or (final and not found)) and self._emitted_calls == 0 and self._open is None:
            if final:  # not calls after all: the text is the answer's
                section, self._section = self._gap + self._section, ""
                self._answer(out, section)
            return out
        for name, arguments, given_id in (found or [])[self._emitted_calls:]:
            index = self._emitted_calls
            if self._open is None:
                call_id = given_id or new_call_id(self.fmt.id_style)
                out.append(ToolCallDelta(index, arguments, call_id, name))
            else:  # its start and arguments so far went out: the rest of them
                call_id, _, sent = self._open
                self._open = None
                if arguments.startswith(sent):
                    if len(arguments) > len(sent):
                        out.append(ToolCallDelta(index, arguments[len(sent):]))
                else:  # the formats promise this cannot happen
                    log.warning("call %d: arguments %r do not continue the streamed %r", index, arguments, sent)
            self.reply.tool_calls.append(ToolCall(call_id, name, arguments))
            self._emitted_calls += 1
        if final:
            if self._open is not None:  # begun, never finished (the reply was cut): as written
                call_id, name, sent = self._open
                self._open = None
                self.reply.tool_calls.append(ToolCall(call_id, name, sent))
                self._emitted_calls += 1
        elif found is not None and read.open is not None:
            out += self._stream_open(*read.open)
        return out

    def _stream_open(self, name: str, arguments: str, given_id: str | None) -> list[ReplyDelta]:
        """The call being written: its start once, then each new piece of its arguments."""
        assert self.fmt is not None
        index = self._emitted_calls
        if self._open is None:
            self._open = (given_id or new_call_id(self.fmt.id_style), name, arguments)
            return [ToolCallDelta(index, arguments, self._open[0], name)]
        call_id, name, sent = self._open
        if len(arguments) <= len(sent) or not arguments.startswith(sent):
            return []
        self._open = (call_id, name, arguments)
        return [ToolCallDelta(index, arguments[len(sent):])]
