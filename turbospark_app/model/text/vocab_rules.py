"""What llama.cpp (src/llama-vocab.cpp, src/unicode.cpp) decides from a GGUF's tokenizer names
and token texts. The model runs on llama.cpp's token ids, so these follow llama.cpp (0.3.36's
vendored copy), quirks included; tests/test_tokenizer_llama_cpp.py compares them with it.

Pre-tokenizers (`tokenizer.ggml.pre`, byte-level BPE vocabularies only), as in the
`llm_tokenizer_bpe` constructor, with llama.cpp's own (rewritten) regexes over llama.cpp's code
point classes (`llama_unicode`, `llama_regex`):

    digits, then GPT-2   starcoder refact command-r smollm codeshell exaone minerva-7b mellum2
    GPT-2                gpt-2 phi-2 mpt olmo jais trillion granite-docling exaone4 mellum
                         a.x-4.0 gigachat
    legacy               `default`, or no name: punctuation, GPT-2, numbers, 3 digits at a time
    Llama 3              llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2: also
                         whole-word vocabulary hits skip the merges, and BOS by default
    Llama 3 regex only   dbrx smaug-bpe
    Qwen 2 (digits 1 by 1)  qwen2 deepseek-r1-qwen stablelm2 hunyuan megrez kormo
    GPT-4o               gpt-4o llama4 kanana2 (Phi-4-mini)
    Tekken               tekken (Mistral Nemo): whole-word hits skip the merges, BOS by default

Any other name gets no `tokenizers` build (TokenizerError); the app tokenizes with llama.cpp
itself anyway (`llamacpp.vocab`), which knows more names. ("gpt2" is not one:
llama.cpp refuses such a file.)

Token attributes and end of generation (llama.cpp's `load`, "auto-detect special tokens by
text"): without an id in the file, the end-of-turn, end-of-message and fill-in-the-middle tokens
are found by text (`EOT_TEXTS`, `FIM_TEXTS`) and become control tokens; every token whose text
is in `EOG_TEXTS` is a control token that ends generation, and so are the EOS, EOT and EOM ids and
the FIM pad / repo / file-separator tokens (SmolLM2's <reponame>). gpt-oss's <|channel|>,
<|message|>, <|start|>, <|constrain|> are printed text (user-defined). Two workarounds: with
<|return|> or <|flush|> and <|call|> / <|calls|>, <|end|> is printed text and no end; with
<|tool_response> or <|plamo:eos|>, </s> is a normal token. llama.cpp picks the first candidate
it meets in a hash map; here the first in the list: a file with two candidates of one kind
(rare) may differ: `GGUFTokenizer.adopt` takes llama.cpp's own answers.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 0, 1, 2, 3, 4, 5, 6  # gguf.TokenType

# The regexes are llama.cpp's (llm_tokenizer_bpe), not the models' originals: llama.cpp rewrote
# them for its own regex engine, and its rewrites split some text differently, which the model
# then sees: `(?i:'s|...)` is `'[sS]|...` ("'ſ" is no contraction), and GPT-4o's / Tekken's
# `\p{Lu}...\p{M}` classes are "a letter but not a-z" / "not A-Z" (so a combining mark is not
# part of a word, and any non-ASCII letter is both upper and lower case).
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_UPPER = r"((?=[\p{L}])([^a-z]))"
_LOWER = r"((?=[\p{L}])([^A-Z]))"
GPT4O_REGEX = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_REGEX = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT (`default`, or no name): punctuation runs first, then
# GPT-2, then numbers, then three digits at a time.
DEFAULT_REGEXES = (r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]")


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, str]:
    """Regex class bodies (`\\x{41}-\\x{5A}...`) of llama.cpp's code point classes."""
    from . import llama_unicode as u

    def body(table: str) -> str:
        parts = []
        for word in table.split():
            a, _, b = word.partition("-")
            parts.append(f"\\x{{{a}}}" + (f"-\\x{{{b}}}" if b else ""))
        return "".join(parts)

    return {"L": body(u.LETTER), "N": body(u.NUMBER), "P": body(u.PUNCTUATION),
            "s": body(u.WHITESPACE)}


_CLASS_ESCAPE = re.compile(r"\\p\{([LNP])\}|\\([sS])|\\.|\[|\]")


def llama_regex(pattern: str) -> str:
    """`pattern` with \\p{L}, \\p{N}, \\p{P}, \\s and \\S as llama.cpp's code point classes, so
    it splits by llama.cpp's Unicode tables (15.1 in 0.3.36), not by the regex engine's (newer:
    `tokenizers` calls U+13460 a letter, llama.cpp an unassigned code point)."""
    classes = _classes()
    depth = 0  # inside [...]: the class body goes in without brackets

    def swap(m: re.Match[str]) -> str:
        nonlocal depth
        token = m.group()
        if token == "[":
            depth += 1
        elif token == "]":
            depth = max(depth - 1, 0)
        elif m.group(1) or m.group(2) == "s":
            inner = classes[m.group(1) or "s"]
            return inner if depth else f"[{inner}]"
        elif m.group(2) == "S":
            if depth:
                raise ValueError(f"\\S inside a class: {pattern!r}")
            return f"[^{classes['s']}]"
        return token

    return _CLASS_ESCAPE.sub(swap, pattern)


@dataclasses.dataclass(frozen=True)
class PreTokenizer:
    """How one family of `tokenizer.ggml.pre` names splits text before BPE."""

    regexes: tuple[str, ...]  # applied in turn, each to the pieces the one before left
    ignore_merges: bool = False  # a piece that is a whole vocabulary token is taken as is
    add_bos: bool = False  # llama.cpp's BOS default for the family


_FAMILIES: dict[tuple[str, ...], PreTokenizer] = {
    ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"):
        PreTokenizer((r"\p{N}", GPT2_REGEX)),
    ("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "mellum",
     "a.x-4.0", "gigachat"): PreTokenizer((GPT2_REGEX,)),
    ("default",): PreTokenizer(DEFAULT_REGEXES),
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"):
        PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, add_bos=True),
    ("dbrx", "smaug-bpe"): PreTokenizer((LLAMA3_REGEX,)),
    ("qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "kormo"):
        PreTokenizer((QWEN2_REGEX,)),
    ("gpt-4o", "llama4", "kanana2"): PreTokenizer((GPT4O_REGEX,)),
    ("tekken",): PreTokenizer((TEKKEN_REGEX,), ignore_merges=True, add_bos=True),
}
PRE_TOKENIZERS: dict[str, PreTokenizer] = {name: p for names, p in _FAMILIES.items() for name in names}
SUPPORTED_PRE: tuple[str, ...] = tuple(PRE_TOKENIZERS)


def pre_tokenizer_rule(pre: str) -> PreTokenizer | None:
    """The rule for a `tokenizer.ggml.pre` name; an empty name is llama.cpp's `default`."""
    return PRE_TOKENIZERS.get(pre or "default")


def default_add_bos(model: str, pre: str) -> bool:
    """llama.cpp's BOS default when `tokenizer.ggml.add_bos_token` is absent: SentencePiece
    vocabularies add it; byte-level BPE only for the Llama 3 and Tekken pre-tokenizers."""
    if model == "llama":
        return True
    rule = pre_tokenizer_rule(pre)
    return rule is not None and rule.add_bos


def build_pre_tokenizer(rule: PreTokenizer, missing: str = "") -> Any:
    """The `tokenizers` pre-tokenizer for `rule` (byte-level output); `missing`: the byte-level
    characters the vocabulary has no token for."""
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    # "isolated": a match is a piece, and so is the text between matches (unicode_regex_split).
    steps = [pt.Split(Regex(llama_regex(r)), behavior="isolated", invert=False) for r in rule.regexes]
    steps.append(pt.ByteLevel(add_prefix_space=False, use_regex=False))
    if missing:
        # llama.cpp keeps a byte without a token as a symbol no merge crosses, then drops it;
        # `tokenizers`' BPE would drop it first and merge across the gap.
        steps.append(pt.Split(Regex(f"[{re.escape(missing)}]"), behavior="removed"))
    return pt.Sequence(steps)


# llama.cpp's end-of-turn candidates, in the order the first present one is picked here.
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
             "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
# Fill-in-the-middle tokens by kind (tokenizer.ggml.fim_<kind>_token_id when the file has it).
FIM_TEXTS: dict[str, tuple[str, ...]] = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
            "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
            "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
            "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
FIM_EOG_KINDS = ("pad", "rep", "sep")  # these end generation too
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
             "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
             "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[")
PRINTED_TEXTS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss
# Of the end-of-generation texts, these end the whole text rather than a turn (StopReason.EOS).
EOS_TEXTS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[EOS]", "<｜end▁of▁sentence｜>")
TOOL_CALL_TEXTS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "<|tool_call|>", "<tool_calls>")
_PHI3_KEEP = ("<unk>", "<s>", "<|endoftext|>")  # Phi-3's special tokens that keep what follows


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The end-of-generation ids of a vocabulary, and the token types after llama.cpp's
    promotion of control-looking tokens."""

    eot_id: int | None
    eog_ids: frozenset[int]
    eos_ids: frozenset[int]  # the EOG ids that end the text (StopReason.EOS)
    end_of_turn_ids: frozenset[int]  # every other EOG id (StopReason.END_OF_TURN)
    tool_call_ids: frozenset[int]
    token_types: list[int]
    rstrip_ids: frozenset[int] = frozenset()  # special tokens that drop the whitespace after them


def special_ids(tokens: Sequence[str], token_types: Sequence[int], *, eos_id: int | None,
                eot_id: int | None, eom_id: int | None, fim_ids: Mapping[str, int] | None = None,
                model_name: str | None = None) -> SpecialIds:
    """End-of-generation ids and token types found as llama.cpp finds them (module docstring);
    `fim_ids`: the file's tokenizer.ggml.fim_<kind>_token_id values by kind."""
    ids: dict[str, int] = {}
    for i, text in enumerate(tokens):
        ids.setdefault(text, i)
    known = (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE)
    types = [t if t in known else UNDEFINED for t in token_types]
    first = lambda texts: next((ids[t] for t in texts if t in ids), None)  # noqa: E731

    def promote(i: int | None) -> None:  # "control-looking token ... will be overridden"
        if i is not None and types[i] != CONTROL:
            types[i] = CONTROL

    if eot_id is None:
        eot_id = first(EOT_TEXTS)
        promote(eot_id)
    if eom_id is None:
        eom_id = first(EOM_TEXTS)
        promote(eom_id)
    fim = dict(fim_ids or {})
    for kind, texts in FIM_TEXTS.items():
        if kind not in fim and (found := first(texts)) is not None:
            fim[kind] = found
            promote(found)
    eog = {fim[k] for k in FIM_EOG_KINDS if k in fim}
    for text in EOG_TEXTS:
        if text in ids:
            eog.add(ids[text])
            promote(ids[text])
    for text in PRINTED_TEXTS:
        if text in ids:
            types[ids[text]] = USER_DEFINED
    eog |= {i for i in (eos_id, eot_id, eom_id) if i is not None}
    present = {tokens[i] for i in eog}
    calls = bool({"<|call|>", "<|calls|>"} & present)
    if "<|end|>" in present and calls and ("<|return|>" in present or "<|flush|>" in present):
        end = next(i for i in eog if tokens[i] == "<|end|>")
        eog.discard(end)  # gpt-oss / solar-open: <|end|> ends a message, not the generation
        types[end] = USER_DEFINED
    if "</s>" in present and present & {"<|tool_response>", "<|plamo:eos|>"}:
        s_id = next(i for i in eog if tokens[i] == "</s>")
        eog.discard(s_id)  # Gemma 4, PLaMo: </s> is a normal token there
        types[s_id] = NORMAL
    rstrip: set[int] = set()
    if strips_after_special(model_name):
        rstrip = {i for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED, UNKNOWN)}
        rstrip |= {ids["</s>"]} if "</s>" in ids else set()
        rstrip -= {ids[t] for t in _PHI3_KEEP if t in ids}
    return with_stop_reasons(tokens, types, eog, eos_id=eos_id, eot_id=eot_id, eom_id=eom_id,
                             rstrip_ids=rstrip)


def with_stop_reasons(tokens: Sequence[str], types: list[int], eog: Collection[int], *,
                      eos_id: int | None, eot_id: int | None, eom_id: int | None,
                      rstrip_ids: Collection[int] = ()) -> SpecialIds:
    """`SpecialIds` for an end-of-generation set (ours or llama.cpp's): each end sorted into
    ending the text (`eos_ids`) or the turn (`end_of_turn_ids`), and the tool-call tokens."""
    turn_texts = set(EOG_TEXTS) - set(EOS_TEXTS)
    # By text first: SmolLM2's eos_token_id IS <|im_end|>, and in a chat that ends a turn.
    eos = {i for i in eog if tokens[i] in EOS_TEXTS
           or (i == eos_id and i not in (eot_id, eom_id) and tokens[i] not in turn_texts)}
    wanted, found = set(TOOL_CALL_TEXTS), {}
    for i, text in enumerate(tokens):
        if text in wanted:
            found.setdefault(text, i)
    tools = {i for i in found.values() if types[i] in (CONTROL, USER_DEFINED)}
    return SpecialIds(eot_id=eot_id, eog_ids=frozenset(eog), eos_ids=frozenset(eos),
                      end_of_turn_ids=frozenset(set(eog) - eos), tool_call_ids=frozenset(tools),
                      token_types=types, rstrip_ids=frozenset(rstrip_ids))


def strips_after_special(model_name: str | None) -> bool:
    """llama.cpp gives Phi-3's special tokens `rstrip` (ASCII whitespace after them is dropped,
    as the model's tokenizer.json says) when the lower-cased general.name contains "phi-3" or
    "phi3" (so "Phi-3.5-mini" too, but not "Phi 3 Mini": llama.cpp does not strip there)."""
    name = (model_name or "").lower()
    return "phi-3" in name or "phi3" in name
