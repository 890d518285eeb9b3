"""llama.cpp's own tokenizer over a loaded model's vocabulary (`llama_tokenize`,
`llama_token_to_piece`): the app's tokenizer whenever llama.cpp has the model loaded.

It gives llama.cpp's ids by construction, and measured on the default model it encodes 2.5x as
fast as the `tokenizers` build (`text.tokenizer.GGUFTokenizer`: 0.77 s against 1.93 s for 2 MB of
text) and costs ~0.1 s less to open (no tokenizer to build or read from a cache: the file's token
texts and types, and llama.cpp's answers for each id). The token types and the end-of-generation
set are llama.cpp's (`llama_vocab_get_attr`, `llama_vocab_is_eog`).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Sequence

from ..text.tokenizer import TokenizerSpec, without_surrogates
from ..text.vocab_rules import (
    BYTE,
    CONTROL,
    EOT_TEXTS,
    NORMAL,
    UNDEFINED,
    UNKNOWN,
    UNUSED,
    USER_DEFINED,
    SpecialIds,
    with_stop_reasons,
)
from . import library

# llama_token_attr bits (llama.h), strongest first: the type the app's rules reason with.
_ATTR_TYPES = ((1 << 3, CONTROL), (1 << 0, UNKNOWN), (1 << 4, USER_DEFINED), (1 << 2, NORMAL),
               (1 << 5, BYTE), (1 << 1, UNUSED))
_ATTR_RSTRIP = 1 << 8
_NULL = -1  # LLAMA_TOKEN_NULL

def tokenize(vocab: Any, data: bytes, parse_special: bool) -> list[int]:
    """`llama_tokenize(add_special=False)` of UTF-8 `data`."""
    if not data:
        return []
    C = library.binding()
    room = len(data) + 8
    while True:
        buf = (C.llama_token * room)()
        n = int(C.llama_tokenize(vocab, data, len(data), buf, room, False, parse_special))
        if n >= 0:
            return list(buf[:n])
        room = -n


def token_piece(vocab: Any, token_id: int, special: bool = False) -> bytes:
    """`llama_token_to_piece(lstrip=0)`: the bytes a token adds to the text."""
    C = library.binding()
    buf = ctypes.create_string_buffer(64)
    n = int(C.llama_token_to_piece(vocab, token_id, buf, 64, 0, special))
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = int(C.llama_token_to_piece(vocab, token_id, buf, -n, 0, special))
    return buf.raw[:max(n, 0)]


def eog_ids(vocab: Any, n_vocab: int, candidates: Sequence[int] | None = None) -> frozenset[int]:
    """Every id llama.cpp ends generation on (EOS, EOT, EOM, FIM separators, <|im_end|>, ...),
    asked of each id in `candidates` (default: every id)."""
    is_eog = library.binding().llama_vocab_is_eog
    ids = range(n_vocab) if candidates is None else candidates
    return frozenset(i for i in ids if is_eog(vocab, i))


def _attr_type(attr: int) -> int:
    return next((t for bit, t in _ATTR_TYPES if attr & bit), UNDEFINED)


# llama.cpp's EOG set holds its special ids (EOS, EOT, EOM, FIM ends) and tokens it marks as
# control; a normal token is never one, so only these are asked (a 256k vocabulary has ~1k).
_SPECIAL_GETTERS = ("llama_vocab_eos", "llama_vocab_eot", "llama_vocab_fim_pad", "llama_vocab_fim_rep",
                    "llama_vocab_fim_sep", "llama_vocab_sep", "llama_vocab_bos", "llama_vocab_pad")


def _id(value: int) -> int | None:
    return None if value == _NULL else int(value)


def bos_rule(vocab: Any) -> tuple[int | None, bool]:
    """llama.cpp's BOS id and whether it adds one to a prompt (`llama_vocab_get_add_bos`)."""
    C = library.binding()
    return _id(C.llama_vocab_bos(vocab)), bool(C.llama_vocab_get_add_bos(vocab))


def llama_cpp_rules(model: Any, spec: TokenizerSpec) -> SpecialIds:
    """llama.cpp's token types (from its attributes), Phi-3 rstrip and end-of-generation set
    for a loaded model, sorted into stop reasons as `vocab_rules` does. The end-of-turn token is
    `vocab_rules`' pick: llama.cpp takes the first candidate its hash map yields (SmolLM2's
    <|endoftext|> rather than <|im_end|>); both end generation either way."""
    C = library.binding()
    vocab, n = model.vocab, model.vocab_size
    get_attr = C.llama_vocab_get_attr
    attrs = [get_attr(vocab, i) for i in range(n)]
    kinds: dict[int, int] = {}  # attr -> type: a vocabulary has a handful of distinct attrs
    types = [kinds[a] if a in kinds else kinds.setdefault(a, _attr_type(a)) for a in attrs]
    rstrip = {i for i, a in enumerate(attrs) if a & _ATTR_RSTRIP}
    special = {i for i, t in enumerate(types) if t != NORMAL}
    special.update(int(getattr(C, g)(vocab)) for g in _SPECIAL_GETTERS if hasattr(C, g))
    candidates = sorted(i for i in special if 0 <= i < n)
    tokens = spec.tokens if len(spec.tokens) == n else [f"<{i}>" for i in range(n)]
    eot = spec.eot_id if spec.eot_id is not None else next(
        (i for t in EOT_TEXTS for i in [_first(tokens, t)] if i is not None), None)
    return with_stop_reasons(tokens, types, eog_ids(vocab, n, candidates), eos_id=_id(C.llama_vocab_eos(vocab)),
                             eot_id=eot, eom_id=spec.eom_id, rstrip_ids=rstrip)


def _first(tokens: Sequence[str], text: str) -> int | None:
    try:
        return tokens.index(text)
    except ValueError:
        return None


class LlamaCppTokenizer:
    """Implements the engine's `EngineTokenizer` (and what the prompt builder, templates and
    grammars use of a tokenizer) with llama.cpp's vocabulary of a loaded model."""

    kind = "llama.cpp"  # for Model Info: which tokenizer turns text into ids

    @property
    def _vocab(self) -> Any:
        """llama.cpp's vocabulary (raises once the model is closed: a freed one would crash)."""
        return self._model.vocab

    def __init__(self, model: Any, spec: TokenizerSpec) -> None:
        self._model = model  # keeps the vocabulary alive (and says when it was closed)
        C = library.binding()
        self.spec = spec
        self.vocab_size: int = model.vocab_size
        bos, add_bos = bos_rule(self._vocab)
        self.bos_id: int | None = bos
        self.add_bos: bool = add_bos
        self.eos_id: int | None = _id(C.llama_vocab_eos(self._vocab))
        found = llama_cpp_rules(model, spec)
        self._types = found.token_types
        self._rstrip = found.rstrip_ids
        self.eot_id: int | None = found.eot_id
        self.eog_ids: frozenset[int] = found.eog_ids
        self.eos_ids: frozenset[int] = found.eos_ids
        self.end_of_turn_ids: frozenset[int] = found.end_of_turn_ids
        self.tool_call_ids: frozenset[int] = found.tool_call_ids
        self._pieces: list[bytes | None] = [None] * self.vocab_size
        self._spm_prefix = spec.model == "llama" and spec.add_space_prefix
        self._barrier = _barrier(spec) if self._spm_prefix else None
        self._unspellable = _unspellable(spec)

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        """Token text -> its first id. Built when first asked: for a 262k vocabulary it is
        ~0.1 s that a reply which never looks a text up (the one-token reply) need not wait for."""
        tokens = self.spec.tokens
        return dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))  # the first id wins

    @property
    def token_types(self) -> list[int]:
        """Each token's type as llama.cpp has it (from its attributes)."""
        return list(self._types)

    @property
    def rstrip_ids(self) -> frozenset[int]:
        """The special tokens that drop the whitespace after them (Phi-3)."""
        return self._rstrip

    def encode(self, text: str, *, add_bos: bool = False, parse_special: bool = True) -> list[int]:
        """Text to ids (special-token texts to their ids unless `parse_special` is False)."""
        text = without_surrogates(text)  # a lone surrogate has no UTF-8: one U+FFFD
        if self._unspellable:
            text = "".join(c for c in text if c in self._ids
                           or not self._unspellable.intersection(c.encode("utf-8")))
        ids = tokenize(self._vocab, text.encode("utf-8"), parse_special)
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        """`encode` without the space SentencePiece puts in front of a whole text. llama.cpp
        always adds it, so the text goes after a character no token contains (nothing merges
        across it) and that character's ids are dropped again."""
        if self._barrier is None or not text:
            return self.encode(text)
        head = self.encode(self._barrier)
        ids = self.encode(self._barrier + text)
        if ids[:len(head)] != head:  # cannot happen for a true barrier; stay safe
            return self.encode(text)
        return ids[len(head):]

    def encode_prompt(self, rendered: str) -> list[int]:
        """Ids of a rendered chat prompt: BOS first when the model asks for it and it is absent."""
        ids = self.encode(rendered)
        if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids.insert(0, self.bos_id)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes the token adds to the text (b"" for control tokens)."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} out of range (vocabulary of {self.vocab_size})")
        piece = self._pieces[token_id]
        if piece is None:
            piece = self._pieces[token_id] = token_piece(self._vocab, token_id)
        return piece

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose vocabulary text is `text`."""
        return self._ids.get(text)

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary text of a token id."""
        return self.spec.tokens[token_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text: the tokens' bytes joined, invalid UTF-8 replaced by U+FFFD."""
        data = b"".join(self.token_bytes(int(i)) for i in ids)
        if self._spm_prefix and data.startswith(b" "):
            data = data[1:]  # the space SentencePiece put in front of the text
        return data.decode("utf-8", errors="replace")


def _barrier(spec: TokenizerSpec) -> str | None:
    """A character no token longer than it contains (SentencePiece merges nothing across it),
    no special token, and spelled by a token of its own or its byte token."""
    codes = (*range(1, 9), *range(14, 32), 0x7F)
    # One scan of the longer tokens joined by "\n" (not a candidate) for each candidate, and the
    # kinds of the candidates' own and byte tokens only: a set of every token's characters and a
    # dict of every token took 0.13 s for a 262k vocabulary.
    longer = "\n".join(t for t in spec.tokens if len(t) > 1)
    wanted = {chr(c) for c in codes} | {f"<0x{c:02X}>" for c in codes}
    kinds = {t: k for t, k in zip(spec.tokens, spec.token_types) if t in wanted}  # the last id wins
    for code in codes:
        ch = chr(code)
        if ch in longer or kinds.get(ch) in (CONTROL, UNKNOWN, USER_DEFINED):
            continue
        if ch in kinds or f"<0x{code:02X}>" in kinds:
            return ch
    return None


def _unspellable(spec: TokenizerSpec) -> frozenset[int]:
    """SentencePiece bytes llama.cpp has no token for: its byte fallback throws on them (and
    the process aborts), so characters made of them never reach it."""
    if spec.model != "llama":
        return frozenset()
    known = set(spec.tokens)
    return frozenset(b for b in range(256)
                     if f"<0x{b:02X}>" not in known and not (b < 0x80 and chr(b) in known))


def tokenizer_spec(header: Any) -> TokenizerSpec:
    """What `LlamaCppTokenizer` keeps of a GGUF's tokenizer (token texts and types, special
    ids, template; no merges or scores: llama.cpp has those). Raises TokenizerError for a file
    without one. Read while llama.cpp loads the weights: it needs no model."""
    return TokenizerSpec.from_reader(header, check=False, with_merges=False)


def load_tokenizer(header: Any, model: Any, spec: TokenizerSpec | None = None) -> LlamaCppTokenizer:
    """The tokenizer of a GGUF that llama.cpp loaded as `model` (a `LlamaCppModel`, or its
    vocabulary alone); `spec`: `tokenizer_spec(header)` when already read."""
    return LlamaCppTokenizer(model, spec if spec is not None else tokenizer_spec(header))


__all__ = ["LlamaCppTokenizer", "bos_rule", "eog_ids", "llama_cpp_rules", "load_tokenizer", "token_piece",
           "tokenize", "tokenizer_spec"]
