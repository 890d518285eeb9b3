"""llama.cpp's own tokenizer over a loaded model's vocabulary (`llama_tokenize`,
`llama_token_to_piece`), with the interface of `text.tokenizer.GGUFTokenizer`.

The app tokenizes with `GGUFTokenizer` (Hugging Face `tokenizers`) where that agrees with
llama.cpp id for id (`tests/test_tokenizer_llama_cpp.py` checks each family); a file whose
tokenizer it cannot build (a pre-tokenizer it does not know, a vocabulary type it lacks) uses
this one instead of being refused. `eog_ids(vocab)` gives llama.cpp's end-of-generation set
(`llama_vocab_is_eog`) to either.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from ..text.tokenizer import TokenizerSpec
from ..text.vocab_rules import special_ids
from . import library


def eog_ids(vocab: Any, n_vocab: int) -> frozenset[int]:
    """Every id llama.cpp ends generation on (EOS, EOT, EOM, FIM separators, <|im_end|>, ...)."""
    is_eog = library.binding().llama_vocab_is_eog
    return frozenset(i for i in range(n_vocab) if is_eog(vocab, i))


class LlamaCppTokenizer:
    """Implements the engine's `EngineTokenizer` (and what the prompt builder and templates
    use of `GGUFTokenizer`) with llama.cpp's vocabulary of a loaded model."""

    def __init__(self, model: Any, spec: TokenizerSpec) -> None:
        self._model = model  # keeps the vocabulary alive (and says when it was closed)
        self._C = library.binding()
        self.spec = spec
        self.vocab_size: int = model.vocab_size
        self.bos_id: int | None = spec.bos_id
        self.eos_id: int | None = spec.eos_id
        self.add_bos: bool = bool(self._C.llama_vocab_get_add_bos(model.vocab))
        self._ids: dict[str, int] = {}
        for i, text in enumerate(spec.tokens):
            self._ids.setdefault(text, i)
        found = special_ids(spec.tokens, spec.token_types, eos_id=spec.eos_id,
                            eot_id=spec.eot_id, eom_id=spec.eom_id)
        self.eot_id: int | None = found.eot_id
        self.tool_call_ids: frozenset[int] = found.tool_call_ids
        eog = eog_ids(model.vocab, self.vocab_size)
        self.eog_ids: frozenset[int] = eog
        self.eos_ids: frozenset[int] = found.eos_ids & eog
        self.end_of_turn_ids: frozenset[int] = eog - self.eos_ids
        self._pieces: list[bytes | None] = [None] * self.vocab_size
        self._spm_prefix = spec.model == "llama" and spec.add_space_prefix
        self.kind = "llama.cpp"

    def _tokenize(self, data: bytes, parse_special: bool) -> list[int]:
        C = self._C
        room = len(data) + 8
        while True:
            buf = (C.llama_token * room)()
            n = int(C.llama_tokenize(self._model.vocab, data, len(data), buf, room, False, parse_special))
            if n >= 0:
                return list(buf[:n])
            room = -n

    def encode(self, text: str, *, add_bos: bool = False, parse_special: bool = True) -> list[int]:
        """Text to ids (special-token texts to their ids unless `parse_special` is False)."""
        data = text.encode("utf-8", "replace") if text else b""
        ids = self._tokenize(data, parse_special) if data else []
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        """`encode` without the space SentencePiece puts in front of a whole text: the text is
        tokenized after a newline (which no piece crosses), and the newline's tokens dropped."""
        if not self._spm_prefix or not text:
            return self.encode(text)
        ids = self.encode("\n" + text)
        head = b""
        for cut, token in enumerate(ids, 1):
            head += self.token_bytes(token)
            if head in (b"\n", b" \n"):
                return ids[cut:]
            if len(head) >= 2:
                break
        return self.encode(text)

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
            buf = ctypes.create_string_buffer(64)
            vocab = self._model.vocab
            n = int(self._C.llama_token_to_piece(vocab, token_id, buf, 64, 0, False))
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = int(self._C.llama_token_to_piece(vocab, token_id, buf, -n, 0, False))
            piece = buf.raw[:max(n, 0)]
            self._pieces[token_id] = piece
        return piece

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose vocabulary text is `text`."""
        return self._ids.get(text)

    def id_to_token(self, token_id: int) -> str:
        return self.spec.tokens[token_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text: the tokens' bytes joined, invalid UTF-8 replaced by U+FFFD."""
        data = b"".join(self.token_bytes(int(i)) for i in ids)
        if self._spm_prefix and data.startswith(b" "):
            data = data[1:]
        return data.decode("utf-8", errors="replace")


def load_tokenizer(path: Any, header: Any, model: Any) -> Any:
    """The model's tokenizer: `tokenizers`' build where it matches llama.cpp (cached on disk),
    else llama.cpp's own; either way ending generation on llama.cpp's EOG ids."""
    from ..text.tokenizer import GGUFTokenizer, TokenizerError

    try:
        tokenizer = GGUFTokenizer.from_gguf(path, reader=header)
    except TokenizerError:
        return LlamaCppTokenizer(model, TokenizerSpec.from_reader(header))
    eog = eog_ids(model.vocab, model.vocab_size) & frozenset(range(tokenizer.vocab_size))
    tokenizer.eog_ids = eog
    tokenizer.eos_ids = tokenizer.eos_ids & eog
    tokenizer.end_of_turn_ids = eog - tokenizer.eos_ids
    tokenizer.kind = "tokenizers"
    return tokenizer
