"""What llama.cpp (src/llama-vocab.cpp) decides from a GGUF's tokenizer names and token texts.

Pre-tokenizers (`tokenizer.ggml.pre`, byte-level BPE vocabularies only), as in the
`llm_tokenizer_bpe` constructor; the regexes are the originals from the models' tokenizer.json
(llama.cpp rewrites `(?i:...)` and `\\p{Lu}` classes only because its own regex engine lacks them;
`tokenizers` has them):

    digits, then GPT-2   starcoder refact command-r smollm codeshell exaone minerva-7b mellum2
    GPT-2                gpt2 gpt-2 phi-2 mpt olmo jais trillion granite-docling exaone4 mellum
                         a.x-4.0 gigachat, and `default` / a missing name (see below)
    Llama 3              llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2: also
                         whole-word vocabulary hits skip the merges, and BOS by default
    Llama 3 regex only   dbrx smaug-bpe
    Qwen 2 (digits 1 by 1)  qwen2 deepseek-r1-qwen stablelm2 hunyuan megrez kormo
    GPT-4o               gpt-4o llama4 kanana2 (Phi-4-mini)
    Tekken               tekken (Mistral Nemo): whole-word hits skip the merges, BOS by default

`default` (or no name) is llama.cpp's legacy fallback, which it warns degrades output; the GPT-2
regex is what such byte-level vocabularies were trained with, so that is used instead. Any other
name is refused with a clear error: a wrong split would silently give the model token sequences
it never saw in training, and wrong answers look like a weak model rather than a bug.

End of generation (llama.cpp's `load`, "auto-detect special tokens by text"): without
`tokenizer.ggml.eot_token_id` the end-of-turn token is the first of `EOT_TEXTS` in the
vocabulary; the end-of-generation set holds every token whose text is in `EOG_TEXTS` and the
EOS, EOT and EOM ids. (llama.cpp also ends on fill-in-the-middle pad / repo / file-separator
tokens; they are left out here: SmolLM2, the default model, has <reponame>, and a chat never
needs them to stop.) A token found by its text is
treated as a control token whatever its stored type. Two of llama.cpp's workarounds are kept:
with <|return|> and <|call|> (gpt-oss) <|end|> is not an end; with <|tool_response> </s> is not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # gguf.TokenType

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
LLAMA3_REGEX = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
GPT4O_REGEX = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_REGEX = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclasses.dataclass(frozen=True)
class PreTokenizer:
    """How one family of `tokenizer.ggml.pre` names splits text before BPE."""

    regex: str | None  # None: the GPT-2 regex built into `tokenizers`' ByteLevel
    digits_first: bool = False  # every digit split off on its own before the regex
    ignore_merges: bool = False  # a piece that is a whole vocabulary token is taken as is
    add_bos: bool = False  # llama.cpp's BOS default for the family


_GPT2 = PreTokenizer(None)
_FAMILIES: dict[tuple[str, ...], PreTokenizer] = {
    ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"):
        PreTokenizer(None, digits_first=True),
    ("default", "gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling",
     "exaone4", "mellum", "a.x-4.0", "gigachat"): _GPT2,
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"):
        PreTokenizer(LLAMA3_REGEX, ignore_merges=True, add_bos=True),
    ("dbrx", "smaug-bpe"): PreTokenizer(LLAMA3_REGEX),
    ("qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "kormo"): PreTokenizer(QWEN2_REGEX),
    ("gpt-4o", "llama4", "kanana2"): PreTokenizer(GPT4O_REGEX),
    ("tekken",): PreTokenizer(TEKKEN_REGEX, ignore_merges=True, add_bos=True),
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


def build_pre_tokenizer(rule: PreTokenizer) -> Any:
    """The `tokenizers` pre-tokenizer for `rule` (byte-level output)."""
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    if rule.regex is None:
        steps = [pt.ByteLevel(add_prefix_space=False)]
    else:
        steps = [pt.Split(Regex(rule.regex), behavior="isolated", invert=False),
                 pt.ByteLevel(add_prefix_space=False, use_regex=False)]
    if rule.digits_first:
        steps.insert(0, pt.Digits(individual_digits=True))
    return steps[0] if len(steps) == 1 else pt.Sequence(steps)


# llama.cpp's end-of-turn candidates, in the order the first present one is picked.
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
             "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
             "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
             "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[")
# Of the end-of-generation texts, these end the whole text rather than a turn (StopReason.EOS).
EOS_TEXTS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[EOS]", "<｜end▁of▁sentence｜>")
TOOL_CALL_TEXTS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "<|tool_call|>", "<tool_calls>")


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


def special_ids(tokens: Sequence[str], token_types: Sequence[int], *, eos_id: int | None,
                eot_id: int | None, eom_id: int | None) -> SpecialIds:
    """End-of-generation ids found as llama.cpp finds them (module docstring)."""
    ids: dict[str, int] = {}
    for i, text in enumerate(tokens):
        ids.setdefault(text, i)
    types = list(token_types)
    found = lambda texts: [ids[t] for t in texts if t in ids]  # noqa: E731
    if eot_id is None:
        eot_id = next(iter(found(EOT_TEXTS)), None)
    if eom_id is None:
        eom_id = next(iter(found(EOM_TEXTS)), None)
    by_text = set(found(EOG_TEXTS))
    for i in by_text:
        types[i] = CONTROL  # llama.cpp: "control-looking token ... its type will be overridden"
    eog = by_text | {i for i in (eos_id, eot_id, eom_id) if i is not None}
    present = {tokens[i] for i in eog}
    if {"<|return|>", "<|call|>", "<|end|>"} <= present:
        eog.discard(ids["<|end|>"])  # gpt-oss: <|end|> ends a message, not the generation
        types[ids["<|end|>"]] = USER_DEFINED
    if {"<|tool_response>", "</s>"} <= present:
        eog.discard(ids["</s>"])
        types[ids["</s>"]] = NORMAL
    turn_texts = set(EOG_TEXTS) - set(EOS_TEXTS)
    # By text first: SmolLM2's eos_token_id IS <|im_end|>, and in a chat that ends a turn.
    eos = {i for i in eog if tokens[i] in EOS_TEXTS
           or (i == eos_id and i not in (eot_id, eom_id) and tokens[i] not in turn_texts)}
    special = {CONTROL, USER_DEFINED}
    tools = {i for i in found(TOOL_CALL_TEXTS) if types[i] in special}
    return SpecialIds(eot_id=eot_id, eog_ids=frozenset(eog), eos_ids=frozenset(eos),
                      end_of_turn_ids=frozenset(eog - eos), tool_call_ids=frozenset(tools),
                      token_types=types)


_PHI3_NAME = re.compile(r"\bphi[- _]?3", re.IGNORECASE)


def strips_after_special(model_name: str | None) -> bool:
    """llama.cpp gives Phi-3's special tokens `rstrip` (whitespace after them is dropped, as the
    model's tokenizer.json says) by the model's general.name, which is all a GGUF keeps of it.
    llama.cpp looks for "phi-3" / "phi3"; newer converters write "Phi 3 Mini ...", so a space or
    underscore counts too (Phi-3.5 has the same tokenizer)."""
    return bool(_PHI3_NAME.search(model_name or ""))
