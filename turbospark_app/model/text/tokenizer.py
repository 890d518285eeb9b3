"""The tokenizer of a GGUF file, built with Hugging Face `tokenizers` from its metadata.

Vocabulary types:
- `gpt2`: byte-level BPE (vocab + merges), pre-tokenization per `tokenizer.ggml.pre` following
  llama.cpp's llama-vocab.cpp (the table, and what an unknown name does: `vocab_rules`).
- `llama`: SentencePiece BPE with `<0xNN>` byte fallback and '▁' for spaces; the merges are
  derived from the piece scores, as Hugging Face's converter does (NORMAL and USER_DEFINED pieces:
  llama.cpp's SPM merges into any piece of the vocabulary; control pieces are left out so text
  never turns into a control token). With `tokenizer.ggml.add_space_prefix` (absent: true;
  Gemma's converter writes false) a ' ' goes in front of the first text fragment and of every
  fragment that follows a special token, as llama.cpp does.
Anything else raises `TokenizerError`.

Tokens of type CONTROL (and UNKNOWN) are special tokens and USER_DEFINED ones added tokens, so
"<|im_start|>" in a rendered prompt encodes to its single id. USER_DEFINED tokens are always
split out before BPE; CONTROL ones only when parsing special tokens (`encode(parse_special=...)`).
Phi-3's special tokens drop the whitespace after them (`vocab_rules.strips_after_special`).
`token_bytes` maps a token id to the exact bytes it adds to the text (CONTROL and UNKNOWN tokens
add nothing); `decode` is the concatenation of those bytes.

End of generation: `eog_ids` (every id that ends a reply, found as llama.cpp finds them:
`vocab_rules.special_ids`), split into `eos_ids` and `end_of_turn_ids` for the stop reason;
`eot_id` is the end-of-turn token.

BOS: `encode` never adds one: it turns text into ids, nothing more. `encode_prompt` is for a
rendered chat prompt and adds BOS only when the GGUF asks for it (`tokenizer.ggml.add_bos_token`)
and the template did not already put it there (as llama.cpp's chat path does). SmolLM2 says
add_bos_token = false, and its template does not use BOS. Without the key, llama.cpp's defaults:
SentencePiece adds BOS, byte-level BPE only for the Llama 3 and Tekken pre-tokenizers.

Building from a GGUF takes a few seconds (reading 49k tokens + 49k merges with gguf's reader), so
`from_gguf` keeps the built tokenizer in `<cache dir>/tokenizers/`, keyed by the file's identity.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...engine.errors import EngineError

from .vocab_rules import (
    BYTE,
    CONTROL,
    NORMAL,
    SUPPORTED_PRE,
    UNKNOWN,
    USER_DEFINED,
    SpecialIds,
    build_pre_tokenizer,
    default_add_bos,
    pre_tokenizer_rule,
    special_ids,
    strips_after_special,
)

__all__ = ["GGUFTokenizer", "TokenizerError", "TokenizerSpec", "SUPPORTED_PRE", "build_hf_tokenizer",
           "check_spec", "read_field"]

_CACHE_FORMAT = 3  # 3: EOG rules, pre-tokenizer table and SPM prefix of llama.cpp


class TokenizerError(EngineError):
    """The GGUF's tokenizer metadata is missing, malformed or of an unsupported kind."""


def read_field(header: Any, key: str, default: Any = None) -> Any:
    """A metadata value of a checked `GGUFHeader`: str, int, float, bool, or a list of those."""
    return header.value(key, default)


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer metadata of a GGUF (`tokenizer.ggml.*`)."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    scores: list[float]
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None
    unk_id: int | None
    add_bos: bool
    add_space_prefix: bool
    chat_template: str | None = None  # kept here so a cached tokenizer needs no GGUF reader
    model_name: str | None = None  # general.name: names the template in errors; Phi-3's rstrip

    @classmethod
    def from_reader(cls, reader: Any) -> TokenizerSpec:
        """Read the spec from a checked `GGUFHeader`; raises TokenizerError when incomplete."""
        g = lambda key, default=None: read_field(reader, f"tokenizer.ggml.{key}", default)  # noqa: E731
        model = g("model")
        tokens = g("tokens")
        if not model or not tokens:
            raise TokenizerError("the GGUF has no tokenizer (tokenizer.ggml.model / .tokens missing)")
        types = g("token_type") or [NORMAL] * len(tokens)
        if len(types) != len(tokens):
            raise TokenizerError(f"{len(tokens)} tokens but {len(types)} token types")
        pre = g("pre", "default")
        # llama.cpp's SentencePiece defaults when a key is absent: <unk>=0, <s>=1, </s>=2.
        spm = {"bos": 1, "eos": 2, "unk": 0} if model == "llama" else {}
        default = lambda kind: spm[kind] if kind in spm and spm[kind] < len(tokens) else None  # noqa: E731
        name = read_field(reader, "general.name")
        spec = cls(
            model=model, pre=pre, tokens=tokens, token_types=[int(t) for t in types],
            merges=g("merges", []), scores=[float(s) for s in g("scores", [])],
            bos_id=g("bos_token_id", default("bos")), eos_id=g("eos_token_id", default("eos")),
            eot_id=g("eot_token_id"), eom_id=g("eom_token_id"),
            unk_id=g("unknown_token_id", default("unk")),
            add_bos=bool(g("add_bos_token", default_add_bos(model, pre))),
            add_space_prefix=bool(g("add_space_prefix", model == "llama")),
            chat_template=read_field(reader, "tokenizer.chat_template") or None,
            model_name=name if isinstance(name, str) else None,
        )
        check_spec(spec)
        return spec

    def meta(self) -> dict[str, Any]:
        """Everything but merges and scores (which only the build needs): for the cache."""
        # Shallow: asdict deep-copies every list (~1 s for a 128k vocabulary); JSON needs no copy.
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["merges"], d["scores"] = [], []
        return d


def _check_types(spec: TokenizerSpec) -> None:
    for key, values, kind in (("tokens", spec.tokens, str), ("merges", spec.merges, str),
                              ("token_type", spec.token_types, int)):
        if not isinstance(values, list) or not all(isinstance(v, kind) for v in values):
            raise TokenizerError(f"tokenizer.ggml.{key} must be a list of {kind.__name__}")
    if not isinstance(spec.chat_template, (str, type(None))):
        raise TokenizerError("tokenizer.chat_template must be text")


def check_spec(spec: TokenizerSpec) -> None:
    """Special-token ids inside the vocabulary; BPE merges made of known tokens. TokenizerError."""
    _check_types(spec)
    n = len(spec.tokens)
    for name, value in (("bos_token_id", spec.bos_id), ("eos_token_id", spec.eos_id),
                        ("eot_token_id", spec.eot_id), ("eom_token_id", spec.eom_id),
                        ("unknown_token_id", spec.unk_id)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or not 0 <= value < n):
            raise TokenizerError(f"tokenizer.ggml.{name} = {value!r} is outside the vocabulary "
                                 f"of {n:,} tokens")
    if spec.add_bos and spec.bos_id is None:  # llama.cpp refuses such a file too
        raise TokenizerError("the tokenizer adds a BOS token (tokenizer.ggml.add_bos_token, or its "
                             f"default for a {spec.model!r} vocabulary) but tokenizer.ggml.bos_token_id "
                             "is not set")
    if spec.model != "gpt2":
        return
    known = set(spec.tokens)
    for i, merge in enumerate(spec.merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"tokenizer.ggml.merges: merge #{i} {merge!r} is not two tokens")
        for piece in (*parts, "".join(parts)):
            if piece not in known:
                raise TokenizerError(f"tokenizer.ggml.merges: merge #{i} {merge!r} refers to "
                                     f"{piece!r}, which is not a token")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_OF_CHAR = {ord(ch): b for b, ch in _bytes_to_unicode().items()}


def _byte_level_bytes(text: str) -> bytes:
    try:
        return text.translate(_BYTE_OF_CHAR).encode("latin-1")
    except UnicodeEncodeError:  # a character outside the byte map: keep its UTF-8
        return b"".join(
            bytes([_BYTE_OF_CHAR[ord(c)]]) if ord(c) in _BYTE_OF_CHAR else c.encode("utf-8") for c in text
        )


def _token_bytes_table(spec: TokenizerSpec, types: Sequence[int]) -> list[bytes]:
    table: list[bytes] = []
    for text, ttype in zip(spec.tokens, types, strict=True):
        if ttype in (CONTROL, UNKNOWN):
            table.append(b"")
        elif ttype == USER_DEFINED and spec.model == "llama":
            # SPM merges may build a user-defined piece such as "▁▁" from spaces: give them back.
            table.append(text.replace("\u2581", " ").encode("utf-8"))
        elif ttype == USER_DEFINED:
            table.append(text.encode("utf-8"))  # stored as raw text, like HF added tokens
        elif spec.model == "gpt2":
            table.append(_byte_level_bytes(text))
        elif ttype == BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            table.append(bytes([int(text[3:5], 16)]))
        else:
            table.append(text.replace("\u2581", " ").encode("utf-8"))
    return table


def _vocab(spec: TokenizerSpec) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, text in enumerate(spec.tokens):
        vocab.setdefault(text, i)  # a duplicate keeps its first id, as llama.cpp does
    return vocab


def _spm_merges(spec: TokenizerSpec, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-ordered merging (as HF's converter derives)."""
    if len(spec.scores) != len(spec.tokens):
        raise TokenizerError("a `llama` (SentencePiece) vocabulary needs tokenizer.ggml.scores")
    found: list[tuple[float, int, int, str, str]] = []
    for piece, pid in vocab.items():
        if spec.token_types[pid] not in (NORMAL, USER_DEFINED) or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                found.append((-spec.scores[pid], vocab[left], vocab[right], left, right))
    found.sort()  # best score first; ties in vocabulary order
    return [(left, right) for _, _, _, left, right in found]


def build_hf_tokenizer(spec: TokenizerSpec) -> Any:
    """A `tokenizers.Tokenizer` equivalent to the GGUF's tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    vocab = _vocab(spec)
    rule = pre_tokenizer_rule(spec.pre) if spec.model == "gpt2" else None
    if spec.model == "gpt2" and rule is None:
        raise TokenizerError(
            f"unsupported pre-tokenizer {spec.pre!r} (tokenizer.ggml.pre); supported: {', '.join(SUPPORTED_PRE)}"
        )
    try:
        if rule is not None:
            merges = []
            for line in spec.merges:
                cut = line.find(" ", 1)  # from 1: a merge's left part is never empty
                if cut < 0:
                    raise TokenizerError(f"malformed merge {line!r} (tokenizer.ggml.merges)")
                merges.append((line[:cut], line[cut + 1 :]))
            tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=rule.ignore_merges))
            tok.pre_tokenizer = build_pre_tokenizer(rule)
            tok.decoder = decoders.ByteLevel()
        elif spec.model == "llama":
            unk = spec.tokens[spec.unk_id] if spec.unk_id is not None else None
            tok = Tokenizer(models.BPE(
                vocab, _spm_merges(spec, vocab), unk_token=unk, fuse_unk=True, byte_fallback=True
            ))
            steps = [normalizers.Replace(" ", "\u2581")]
            if spec.add_space_prefix:
                # The normalizer runs on each fragment between added tokens: llama.cpp's rule
                # (a space before the first fragment and before every one after a special token).
                steps.insert(0, normalizers.Prepend("\u2581"))
            tok.normalizer = normalizers.Sequence(steps)
            tok.decoder = decoders.Sequence([
                decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
            ])
        else:
            raise TokenizerError(
                f"unsupported tokenizer model {spec.model!r} (tokenizer.ggml.model); supported: gpt2, llama"
            )
    except Exception as exc:
        if isinstance(exc, TokenizerError):
            raise
        raise TokenizerError(f"could not build the {spec.model} tokenizer: {exc}") from exc
    types = _ids_of(spec).token_types
    pick = lambda *kinds: [t for t, k in zip(spec.tokens, types, strict=True) if k in kinds]  # noqa: E731
    strip = strips_after_special(spec.model_name)
    keep = ("<unk>", "<s>", "<|endoftext|>")  # llama.cpp's Phi-3 exceptions
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, rstrip=strip and t not in keep)
                            for t in pick(CONTROL, UNKNOWN)])
    tok.add_tokens([AddedToken(t, special=False, normalized=False, rstrip=strip)
                    for t in pick(USER_DEFINED)])
    return tok


def _ids_of(spec: TokenizerSpec) -> SpecialIds:
    """The special ids and effective token types of `spec` (`vocab_rules.special_ids`)."""
    return special_ids(spec.tokens, spec.token_types, eos_id=spec.eos_id, eot_id=spec.eot_id,
                       eom_id=spec.eom_id)


def _gguf_identity(path: Path) -> str:
    import tokenizers

    st = path.stat()
    # The spec's field names are part of the key: a changed spec must not load old entries.
    layout = ",".join(f.name for f in dataclasses.fields(TokenizerSpec))
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{layout}|{tokenizers.__version__}"
    ident += f"|{_CACHE_FORMAT}"
    return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:32]


def _store(cache_file: Path, tokenizer: GGUFTokenizer, *, stale_pattern: str) -> None:
    """Write a cache entry atomically and drop older entries of the same file; best effort."""
    doc = {"spec": tokenizer.spec.meta(), "tokenizer": tokenizer._hf.to_str()}
    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, cache_file)  # atomic: a concurrent reader sees all or nothing
        for stale in cache_file.parent.glob(stale_pattern):
            if stale != cache_file:
                stale.unlink(missing_ok=True)
    except OSError:  # a full or read-only cache only costs the next start its speed
        tmp.unlink(missing_ok=True)


class GGUFTokenizer:
    """A GGUF's tokenizer; implements the engine's `EngineTokenizer` protocol."""

    def __init__(self, hf_tokenizer: Any, spec: TokenizerSpec) -> None:
        self._hf = hf_tokenizer
        self.spec = spec
        self.vocab_size: int = len(spec.tokens)
        self.bos_id: int | None = spec.bos_id
        self.eos_id: int | None = spec.eos_id
        self.add_bos: bool = spec.add_bos
        self._ids = _vocab(spec)
        found = _ids_of(spec)
        self._bytes = _token_bytes_table(spec, found.token_types)
        self.eot_id: int | None = found.eot_id
        # Every id that ends a reply; split (disjoint) into the two stop reasons.
        self.eog_ids: frozenset[int] = found.eog_ids
        self.end_of_turn_ids: frozenset[int] = found.end_of_turn_ids
        self.eos_ids: frozenset[int] = found.eos_ids
        self.tool_call_ids: frozenset[int] = found.tool_call_ids
        self._literal_hf: Any = None  # built on first encode(parse_special=False)
        self._strip_first_space = spec.model == "llama" and spec.add_space_prefix
        self._hf_tail: Any = None  # the same tokenizer without the space prefix (built on first use)
        # Byte-level vocabularies may lack a few byte tokens (SmolLM2 lacks 21); HF's BPE would
        # silently drop such a byte and leave the rest of its character as garbage.
        missing = b""
        if spec.model == "gpt2":
            missing = bytes(b for b, ch in _bytes_to_unicode().items() if ch not in self._ids)
        self._missing_bytes = missing
        self._replacement = "" if set(missing) & set("\ufffd".encode("utf-8")) else "\ufffd"

    @classmethod
    def from_reader(cls, reader: Any) -> GGUFTokenizer:
        """Build from a checked `GGUFHeader` (no cache)."""
        spec = TokenizerSpec.from_reader(reader)
        return cls(build_hf_tokenizer(spec), spec)

    @classmethod
    def from_gguf(cls, path: str | Path, *, reader: Any = None, use_cache: bool = True) -> GGUFTokenizer:
        """Build from a GGUF file, through the tokenizer cache; `reader` (its `GGUFHeader`) saves
        re-reading the header. Raises ModelFileError for a file whose header does not hold."""
        from tokenizers import Tokenizer

        path = Path(path)
        cache_file = None
        if use_cache:
            from ...host.folders import cache_subdir

            stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in path.stem)[:80]
            cache_file = cache_subdir("tokenizers") / f"{stem}-{_gguf_identity(path)}.json"
            try:
                doc = json.loads(cache_file.read_text(encoding="utf-8"))
                return cls(Tokenizer.from_str(doc["tokenizer"]), TokenizerSpec(**doc["spec"]))
            except FileNotFoundError:
                pass
            except Exception:  # a corrupt or outdated entry is rebuilt below
                cache_file.unlink(missing_ok=True)
        if reader is None:
            from ..gguf.header import read_header

            reader = read_header(path)
        tokenizer = cls.from_reader(reader)
        if cache_file is not None:
            _store(cache_file, tokenizer, stale_pattern=f"{stem}-*.json")
        return tokenizer

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes the token adds to the text (b"" for control tokens)."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} out of range (vocabulary of {self.vocab_size})")
        return self._bytes[token_id]

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose vocabulary text is `text` (e.g. "<|im_end|>", "Ġthe")."""
        return self._ids.get(text)

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary text of a token id."""
        return self.spec.tokens[token_id]

    def _encodable(self, text: str) -> str:
        """`text` with lone surrogates and characters needing a byte without a token as U+FFFD."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            text = "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)
            data = text.encode("utf-8")
        if self._missing_bytes and len(data.translate(None, self._missing_bytes)) != len(data):
            bad = set(self._missing_bytes)
            text = "".join(self._replacement if bad & set(c.encode("utf-8")) else c for c in text)
        return text

    def encode(self, text: str, *, add_bos: bool = False, parse_special: bool = True) -> list[int]:
        """Text to ids; special-token texts (e.g. "<|im_start|>") become their single ids, or,
        with `parse_special=False`, are spelled as text (user-defined tokens are split out
        either way, as llama.cpp does).

        A character the vocabulary cannot spell (SmolLM2 has no token for some C0 controls and
        for the lead bytes of planes 4-11) is encoded as U+FFFD instead of being mangled.
        """
        hf = self._hf
        if not parse_special:
            if self._literal_hf is None:
                from tokenizers import Tokenizer

                literal = Tokenizer.from_str(self._hf.to_str())
                literal.encode_special_tokens = True  # special tokens' texts are plain text here
                self._literal_hf = literal
            hf = self._literal_hf
        ids = hf.encode(self._encodable(text), add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        """Ids of text that goes on from earlier text of the same prompt (the later messages of
        a raw-completion conversation): as `encode`, but without the space SentencePiece puts in
        front of a whole text, which would add a space the user never typed."""
        if not self._strip_first_space:
            return self.encode(text)
        if self._hf_tail is None:  # (two threads may both build it: either copy is right)
            from tokenizers import Tokenizer, normalizers

            tail = Tokenizer.from_str(self._hf.to_str())
            tail.normalizer = normalizers.Replace(" ", "\u2581")
            self._hf_tail = tail
        return self._hf_tail.encode(self._encodable(text), add_special_tokens=False).ids

    def encode_prompt(self, rendered: str) -> list[int]:
        """Ids of a rendered chat prompt: BOS first when the GGUF asks for it and it is absent."""
        ids = self.encode(rendered)
        if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text: the tokens' bytes joined, invalid UTF-8 replaced by U+FFFD."""
        data = b"".join(self.token_bytes(int(i)) for i in ids)
        if self._strip_first_space and data.startswith(b" "):
            data = data[1:]  # the space SentencePiece put in front of the text
        return data.decode("utf-8", errors="replace")
