"""The tokenizer of a GGUF file, built with Hugging Face `tokenizers` from its metadata, giving
the ids llama.cpp's `llama_tokenize` gives (tests/test_tokenizer_llama_cpp.py compares the two
per family). The app itself tokenizes with llama.cpp's own tokenizer once it has loaded a file
(`llamacpp.vocab`: exact by construction, faster to open and to encode); this one reads a GGUF's
tokenizer without llama.cpp. `TokenizerSpec` (the tokenizer metadata) serves both.

Vocabulary types:
- `gpt2`: byte-level BPE (vocab + merges), pre-tokenization per `tokenizer.ggml.pre` with
  llama.cpp's regexes over llama.cpp's Unicode tables (`vocab_rules`). A byte the vocabulary
  has no token for (SmolLM2 lacks 21) is dropped, and no merge crosses it, as in llama.cpp.
- `llama`: SentencePiece BPE with `<0xNN>` byte fallback and '▁' for spaces. llama.cpp merges the
  best-scoring adjacent pair whose text is any token of the vocabulary; the BPE merges are
  derived from the scores accordingly (a character inside a token that is no token itself gets
  a stand-in id, given back as its bytes). With `tokenizer.ggml.add_space_prefix` (absent: true;
  Gemma's converter writes false) a ' ' goes in front of the first text fragment and of every
  fragment that follows a special token, as llama.cpp does.
Anything else raises `TokenizerError`.

Special tokens are taken out of the text before the model sees it, as llama.cpp does
(`special_split`): control and unknown ones when parsing special tokens
(`encode(parse_special=...)`), user-defined ones always; so "<|im_start|>" in a rendered prompt
encodes to its single id. Phi-3's special tokens drop the whitespace after them
(`vocab_rules.strips_after_special`). `token_bytes` maps a token id to the bytes it adds to the
text, as `llama_token_to_piece` (`token_pieces`); `decode` is the concatenation of those bytes.

End of generation: `eog_ids` (every id that ends a reply, found as llama.cpp finds them:
`vocab_rules.special_ids`), split into `eos_ids` and `end_of_turn_ids` for the stop reason;
`eot_id` is the end-of-turn token. `adopt` takes llama.cpp's own answers once it has the file.

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

from .special_split import SpecialSplitter
from .token_pieces import LazyPieces, byte_chars
from .vocab_rules import (
    NORMAL,
    SUPPORTED_PRE,
    SpecialIds,
    build_pre_tokenizer,
    default_add_bos,
    pre_tokenizer_rule,
    special_ids,
)

__all__ = ["GGUFTokenizer", "TokenizerError", "TokenizerSpec", "SUPPORTED_PRE", "build_hf_tokenizer",
           "check_spec", "read_field", "without_surrogates"]

_CACHE_FORMAT = 4  # 4: llama.cpp's splits, special tokens split out here, SPM stand-ins
_FIM_KINDS = ("pre", "suf", "mid", "pad", "rep", "sep")


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
    fim_ids: dict[str, int] = dataclasses.field(default_factory=dict)  # fill-in-the-middle, by kind

    @classmethod
    def from_reader(cls, reader: Any, *, check: bool = True, with_merges: bool = True) -> TokenizerSpec:
        """Read the spec from a checked `GGUFHeader`; raises TokenizerError when incomplete
        (or, with `check`, inconsistent: `check_spec`). `with_merges=False` leaves the merges
        and scores out (empty): what a build needs, and llama.cpp's tokenizer does not."""
        g = lambda key, default=None: read_field(reader, f"tokenizer.ggml.{key}", default)  # noqa: E731
        model = g("model")
        tokens = g("tokens")
        if not model or not tokens:
            raise TokenizerError("the GGUF has no tokenizer (tokenizer.ggml.model / .tokens missing)")
        types = g("token_type") or [NORMAL] * len(tokens)
        if len(types) != len(tokens):
            raise TokenizerError(f"{len(tokens)} tokens but {len(types)} token types")
        pre = g("pre", "default")
        # llama.cpp's defaults when a key is absent: SentencePiece <unk>=0, <s>=1, </s>=2;
        # byte-level BPE 11 for both BOS and EOS (out of the vocabulary: none).
        base = {"bos": 1, "eos": 2, "unk": 0} if model == "llama" else {"bos": 11, "eos": 11}
        default = lambda kind: base[kind] if kind in base and base[kind] < len(tokens) else None  # noqa: E731
        name = read_field(reader, "general.name")
        fim = {kind: g(f"fim_{kind}_token_id") for kind in _FIM_KINDS}
        for kind, old in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle")):
            fim[kind] = g(f"{old}_token_id", fim[kind])  # the older keys win, as in llama.cpp
        spec = cls(
            model=model, pre=pre, tokens=[_as_llama_cpp_reads(t, i) for i, t in enumerate(tokens)],
            token_types=[int(t) for t in types],
            merges=g("merges", []) if with_merges else [],
            scores=[float(s) for s in g("scores", [])] if with_merges else [],
            bos_id=g("bos_token_id", default("bos")), eos_id=g("eos_token_id", default("eos")),
            eot_id=g("eot_token_id"), eom_id=g("eom_token_id"),
            unk_id=g("unknown_token_id", default("unk")),
            add_bos=bool(g("add_bos_token", default_add_bos(model, pre))),
            add_space_prefix=bool(g("add_space_prefix", model == "llama")),
            chat_template=read_field(reader, "tokenizer.chat_template") or None,
            model_name=name if isinstance(name, str) else None,
            fim_ids={k: v for k, v in fim.items() if v is not None},
        )
        if check:
            check_spec(spec)
        return spec

    def meta(self) -> dict[str, Any]:
        """Everything but merges and scores (which only the build needs): for the cache."""
        # Shallow: asdict deep-copies every list (~1 s for a 128k vocabulary); JSON needs no copy.
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["merges"], d["scores"] = [], []
        return d


def _as_llama_cpp_reads(text: Any, i: int) -> Any:
    """A token's text as llama.cpp holds it: up to the first NUL (it reads a C string), and an
    empty one renamed (it could never be matched or printed)."""
    if not isinstance(text, str):
        return text  # _check_types refuses it
    text = text.split("\x00", 1)[0]
    return text or f"[EMPTY_{i}]"


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
                        ("unknown_token_id", spec.unk_id),
                        *((f"fim_{k}_token_id", v) for k, v in spec.fim_ids.items())):
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


def _vocab(spec: TokenizerSpec) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, text in enumerate(spec.tokens):
        vocab.setdefault(text, i)  # a duplicate keeps its first id, as llama.cpp does
    return vocab


def _stand_ins(spec: TokenizerSpec, vocab: dict[str, int]) -> dict[str, int]:
    """Characters inside SentencePiece tokens that are no token themselves, with ids past the
    vocabulary: llama.cpp merges any adjacent symbols whose text is a token, so "é" + "!" can
    make "é!" though "é" alone would be bytes; `tokenizers` only merges tokens."""
    extra: dict[str, int] = {}
    for piece in vocab:
        if len(piece) > 1:
            for ch in piece:
                if ch not in vocab and ch not in extra:
                    extra[ch] = len(spec.tokens) + len(extra)
    return extra


def _spm_merges(spec: TokenizerSpec, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to llama.cpp's SentencePiece merging: every way of making a token
    (of any type: llama.cpp looks its text up in the whole vocabulary) from two symbols, best
    score first. `vocab` includes the stand-ins."""
    if len(spec.scores) != len(spec.tokens):
        raise TokenizerError("a `llama` (SentencePiece) vocabulary needs tokenizer.ggml.scores")
    found: list[tuple[float, int, int, str, str]] = []
    n = len(spec.tokens)
    for piece, pid in vocab.items():
        if pid >= n or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                found.append((-spec.scores[pid], vocab[left], vocab[right], left, right))
    # Best score first; equal scores in vocabulary order (llama.cpp takes the leftmost pair of
    # equal score, which a merge list cannot say: real vocabularies rarely tie).
    found.sort()
    return [(left, right) for _, _, _, left, right in found]


def _missing_byte_chars(vocab: dict[str, int]) -> str:
    return "".join(ch for ch in byte_chars() if ch not in vocab)


def build_hf_tokenizer(spec: TokenizerSpec) -> Any:
    """A `tokenizers.Tokenizer` for the text between special tokens (which `GGUFTokenizer`
    splits out itself): llama.cpp's BPE or SentencePiece over one fragment."""
    from tokenizers import Tokenizer, decoders, models, normalizers

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
            tok.pre_tokenizer = build_pre_tokenizer(rule, _missing_byte_chars(vocab))
            tok.decoder = decoders.ByteLevel()
        elif spec.model == "llama":
            vocab.update(_stand_ins(spec, vocab))
            unk = spec.tokens[spec.unk_id] if spec.unk_id is not None else None
            tok = Tokenizer(models.BPE(
                vocab, _spm_merges(spec, vocab), unk_token=unk, fuse_unk=True, byte_fallback=True
            ))
            tok.normalizer = normalizers.Replace(" ", "\u2581")  # the space prefix: GGUFTokenizer
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
    return tok


def _ids_of(spec: TokenizerSpec) -> SpecialIds:
    """The special ids and effective token types of `spec` (`vocab_rules.special_ids`)."""
    return special_ids(spec.tokens, spec.token_types, eos_id=spec.eos_id, eot_id=spec.eot_id,
                       eom_id=spec.eom_id, fim_ids=spec.fim_ids, model_name=spec.model_name)


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


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate (no UTF-8 for it) as U+FFFD: what both tokenizers encode."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)


class GGUFTokenizer:
    """A GGUF's tokenizer; implements the engine's `EngineTokenizer` protocol."""

    kind = "tokenizers"  # for Model Info: which tokenizer turns text into ids

    def __init__(self, hf_tokenizer: Any, spec: TokenizerSpec) -> None:
        self._hf = hf_tokenizer
        self.spec = spec
        self.vocab_size: int = len(spec.tokens)
        self.bos_id: int | None = spec.bos_id
        self.eos_id: int | None = spec.eos_id
        self.add_bos: bool = spec.add_bos
        self._ids = _vocab(spec)
        self._space_prefix = spec.model == "llama" and spec.add_space_prefix
        self._byte_ids = {b: self._ids.get(f"<0x{b:02X}>", spec.unk_id) for b in range(256)}
        # SentencePiece stand-ins (ids past the vocabulary) and the byte tokens they stand for.
        self._stand_ins: dict[int, list[int]] = {}
        for i in range(self.vocab_size, hf_tokenizer.get_vocab_size(with_added_tokens=False)):
            utf8 = (hf_tokenizer.id_to_token(i) or "").encode("utf-8")
            self._stand_ins[i] = [t for t in (self._byte_ids[b] for b in utf8) if t is not None]
        # The file's own rules are worked out on first use (~20 ms for 49k tokens): the backend
        # gives it llama.cpp's first (`adopt`), and then they are never needed.

    _RULES = frozenset({"_types", "_rstrip", "_bytes", "_splitter", "eot_id", "eog_ids", "end_of_turn_ids",
                        "eos_ids", "tool_call_ids"})

    def __getattr__(self, name: str) -> Any:
        if name in GGUFTokenizer._RULES and "spec" in self.__dict__ and "_types" not in self.__dict__:
            self._set_rules(_ids_of(self.spec))
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _set_rules(self, found: SpecialIds) -> None:
        self._types = found.token_types
        self._rstrip = found.rstrip_ids
        self._bytes = LazyPieces(self.spec.model, self.spec.tokens, found.token_types)
        self._splitter = SpecialSplitter(self.spec.tokens, found.token_types, found.rstrip_ids)
        self.eot_id: int | None = found.eot_id
        # Every id that ends a reply; split (disjoint) into the two stop reasons.
        self.eog_ids: frozenset[int] = found.eog_ids
        self.end_of_turn_ids: frozenset[int] = found.end_of_turn_ids
        self.eos_ids: frozenset[int] = found.eos_ids
        self.tool_call_ids: frozenset[int] = found.tool_call_ids

    @property
    def token_types(self) -> list[int]:
        """Each token's type after llama.cpp's promotions (`vocab_rules.special_ids`)."""
        return list(self._types)

    @property
    def rstrip_ids(self) -> frozenset[int]:
        """The special tokens that drop the whitespace after them (Phi-3)."""
        return self._rstrip

    def adopt(self, found: SpecialIds) -> None:
        """Take llama.cpp's own token types and end-of-generation ids for this file (the
        backend has them once it loaded it): the special tokens and pieces follow them."""
        if "_types" not in self.__dict__ or found.token_types != self._types or found.rstrip_ids != self._rstrip:
            self._set_rules(found)
            return
        self.eot_id = found.eot_id
        self.eog_ids, self.eos_ids = found.eog_ids, found.eos_ids
        self.end_of_turn_ids, self.tool_call_ids = found.end_of_turn_ids, found.tool_call_ids

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

    def _fragment(self, text: str, prefix: bool) -> list[int]:
        ids = self._hf.encode(" " + text if prefix else text, add_special_tokens=False).ids
        if self._stand_ins and any(i >= self.vocab_size for i in ids):
            ids = [t for i in ids for t in (self._stand_ins.get(i) or [i])]
        return ids

    def _encode(self, text: str, parse_special: bool, first_prefix: bool) -> list[int]:
        text = without_surrogates(text)
        ids: list[int] = []
        after_special = first_prefix  # SentencePiece: a space before the first fragment...
        for part in self._splitter.split(text, parse_special=parse_special):
            if isinstance(part, int):
                ids.append(part)
                after_special = True  # ... and before every one after a special token
            else:
                ids += self._fragment(part, self._space_prefix and after_special)
                after_special = False
        return ids

    def encode(self, text: str, *, add_bos: bool = False, parse_special: bool = True) -> list[int]:
        """Text to ids, as `llama_tokenize(add_special=False)`: special-token texts (e.g.
        "<|im_start|>") become their single ids, or, with `parse_special=False`, are spelled
        as text (user-defined tokens are split out either way, as llama.cpp does)."""
        ids = self._encode(text, parse_special, first_prefix=True)
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        """Ids of text that goes on from earlier text of the same prompt (the later messages of
        a raw-completion conversation): as `encode`, but without the space SentencePiece puts in
        front of a whole text, which would add a space the user never typed."""
        return self._encode(text, True, first_prefix=False)

    def encode_prompt(self, rendered: str) -> list[int]:
        """Ids of a rendered chat prompt: BOS first when the GGUF asks for it and it is absent."""
        ids = self.encode(rendered)
        if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text: the tokens' bytes joined, invalid UTF-8 replaced by U+FFFD."""
        data = b"".join(self.token_bytes(int(i)) for i in ids)
        if self._space_prefix and data.startswith(b" "):
            data = data[1:]  # the space SentencePiece put in front of the text
        return data.decode("utf-8", errors="replace")
