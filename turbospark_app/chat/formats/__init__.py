"""A reply's text split into reasoning, answer and tool calls, per model family's format.

    base       the incremental ReplyParser (fed the streamed deltas), its deltas and result
    reader     a reply read token by token (control tokens spelled out) and its figures
    families   one ToolFormat per family format, the reasoning markers, and
               `detect_format(template_source)`
    call_parsers  how each format's section reads (from llama.cpp's common/chat parsers): the
               complete calls and the one being written
    json_scan  JSON read as far as it is written (where the arguments being written start)

Fed the text as it streams (control tokens spelled out: `special_text`), the parser releases
answer and reasoning deltas at once, withholds only what could still become a marker, and
streams each tool call as OpenAI does: its id and name once they are written and its arguments
have begun, then each new piece of the arguments. A tool-call section that does not parse at the end
is given back as answer text: nothing the model wrote is lost.
"""

from .base import (
    ContentDelta,
    ParsedReply,
    ReasoningDelta,
    ReplyDelta,
    ReplyParser,
    ToolCall,
    ToolCallDelta,
    new_call_id,
)
from .reader import ReplyFigures, ReplyReader, prompt_tail, special_text
from .families import (
    FORMATS,
    Reasoning,
    ToolFormat,
    detect_format,
    detect_reasoning,
    forced_call_format,
    parser_for,
    thinking_switch,
)

__all__ = [
    "ContentDelta", "FORMATS", "ParsedReply", "Reasoning", "ReasoningDelta", "ReplyDelta",
    "ReplyParser", "ToolCall", "ToolCallDelta", "ToolFormat", "detect_format", "detect_reasoning",
    "forced_call_format", "new_call_id", "parser_for", "prompt_tail", "ReplyFigures", "ReplyReader",
    "special_text", "thinking_switch",
]
