"""The bytes each token adds to the text, as llama.cpp's `llama_token_to_piece(special=False)`
gives them (src/llama-vocab.cpp, `token_to_piece`), and GPT-2's byte-level alphabet.

By the token's type after llama.cpp's promotions (`vocab_rules.special_ids`):

    control, unknown   nothing
    user-defined       the token's text as stored (a SentencePiece "▁" stays "▁": converters
                       write user-defined spaces as " ")
    normal             byte-level BPE: the bytes its characters stand for; a character outside
                       the byte alphabet gives llama.cpp's "[UNK_BYTE_0x<hex><token text>]"
                       SentencePiece: the text with "▁" as " "
    byte               the byte of "<0xNN>"
    unused, undefined  nothing
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from .vocab_rules import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED

__all__ = ["LazyPieces", "byte_chars", "byte_of_char", "token_piece", "token_pieces"]


@lru_cache(maxsize=1)
def byte_chars() -> tuple[str, ...]:
    """GPT-2's reversible byte -> printable character map (index = byte value)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return tuple(mapping[b] for b in range(256))


@lru_cache(maxsize=1)
def byte_of_char() -> dict[int, int]:
    """The inverse of `byte_chars`, by code point (for `str.translate`)."""
    return {ord(ch): b for b, ch in enumerate(byte_chars())}


def _byte_level(text: str) -> bytes:
    table = byte_of_char()
    try:
        return text.translate(table).encode("latin-1")
    except UnicodeEncodeError:  # llama_decode_text's fallback for a character outside the map
        out = bytearray()
        for c in text:
            if ord(c) in table:
                out.append(table[ord(c)])
            else:
                utf8 = c.encode("utf-8")
                out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8") + b"]"
        return bytes(out)


def _hex_byte(text: str) -> int:
    """strtol(text.substr(3, 2), 16) as a char: the leading hex digits of text[3:5]."""
    digits = ""
    for c in text[3:5]:
        if c not in "0123456789abcdefABCDEF":
            break
        digits += c
    return int(digits, 16) & 0xFF if digits else 0


def token_piece(byte_level: bool, text: str, ttype: int) -> bytes:
    """One token's piece (`byte_level`: a `gpt2` vocabulary, else SentencePiece)."""
    if ttype in (CONTROL, UNKNOWN):
        return b""
    if ttype == USER_DEFINED:
        return text.encode("utf-8")
    if ttype == NORMAL:
        return _byte_level(text) if byte_level else text.replace("\u2581", " ").encode("utf-8")
    if ttype == BYTE:
        return bytes([_hex_byte(text)])
    return b""


def token_pieces(model: str, tokens: Sequence[str], types: Sequence[int]) -> list[bytes]:
    """Every token's piece for a `gpt2` (byte-level) or `llama` (SentencePiece) vocabulary;
    `types` are the effective token types."""
    byte_level = model == "gpt2"
    return [token_piece(byte_level, text, ttype) for text, ttype in zip(tokens, types, strict=True)]


class LazyPieces:
    """`token_pieces`, each made on first use: a reply needs a few hundred of a vocabulary's
    49k-256k, and making them all was a tenth of a second of every open."""

    def __init__(self, model: str, tokens: Sequence[str], types: Sequence[int]) -> None:
        if len(tokens) != len(types):
            raise ValueError(f"{len(tokens)} tokens but {len(types)} token types")
        self._byte_level = model == "gpt2"
        self._tokens, self._types = tokens, types
        self._made: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._tokens)

    def __getitem__(self, token_id: int) -> bytes:
        piece = self._made.get(token_id)
        if piece is None:
            if not 0 <= token_id < len(self._tokens):
                raise IndexError(token_id)
            piece = self._made[token_id] = token_piece(self._byte_level, self._tokens[token_id],
                                                       self._types[token_id])
        return piece
