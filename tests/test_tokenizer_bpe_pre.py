"""Byte-level BPE pre-tokenizers by `tokenizer.ggml.pre`, cross-checked against a reference
written here: llama.cpp's own regexes (llama-vocab.cpp, llm_tokenizer_bpe, typed in again from
there) run with the `regex` module, then a textbook BPE over the merge ranks; BOS defaults per
name. (tests/test_tokenizer_llama_cpp.py compares with llama.cpp itself.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from test_tokenizer import gpt2_byte_chars
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text.tokenizer import GGUFTokenizer, TokenizerError

NORMAL, CONTROL = 1, 3
BYTES = gpt2_byte_chars()
MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "12 3", "4 5", "l l", "o r", "Ġ w", "Ġw or", "' s",
          "H e", "He ll", "Ġ 1", "a b", "ab c"]
WHOLE = ["Hello", "xyz"]  # vocabulary words without a merge path (ignore_merges takes them)
TOKENS = ["<|endoftext|>", "<|im_end|>", *BYTES, *["".join(m.split(" ")) for m in MERGES], *WHOLE]
TYPES = [CONTROL, CONTROL, *[NORMAL] * (len(TOKENS) - 2)]
ID = {t: i for i, t in reversed(list(enumerate(TOKENS)))}

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_C = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_UP, _LO = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+{_C}?|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*{_C}?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# name -> (regexes applied in turn, ignore_merges, llama.cpp's add_bos default)
REFERENCE = {
    "qwen2": ([_QWEN2], False, False),
    "llama3": ([_LLAMA3], True, True),
    "llama-bpe": ([_LLAMA3], True, True),
    "smaug-bpe": ([_LLAMA3], False, False),
    "dbrx": ([_LLAMA3], False, False),
    "refact": ([r"\p{N}", _GPT2], False, False),
    "smollm": ([r"\p{N}", _GPT2], False, False),
    "olmo": ([_GPT2], False, False),
    "gpt-2": ([_GPT2], False, False),
    # llama.cpp's legacy split for `default` / no name (it warns that output degrades)
    "default": ([r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"], False, False),
    "gpt-4o": ([_GPT4O], False, False),
    "tekken": ([_TEKKEN], True, True),
    "stablelm2": ([_QWEN2], False, False),
}


def split(text: str, patterns: list[str]) -> list[str]:
    """llama.cpp's unicode_regex_split: each regex splits the pieces the previous one left,
    keeping unmatched text as pieces of its own."""
    pieces = [text] if text else []
    for pattern in patterns:
        out = []
        for piece in pieces:
            at = 0
            for m in regex.finditer(pattern, piece):
                if m.start() > at:
                    out.append(piece[at : m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                at = m.end()
            if at < len(piece):
                out.append(piece[at:])
        pieces = out
    return pieces


RANKS = {tuple(m.split(" ")): r for r, m in enumerate(MERGES)}


def bpe(word: str) -> list[str]:
    parts = list(word)
    while len(parts) > 1:
        k = min(range(len(parts) - 1), key=lambda k: RANKS.get((parts[k], parts[k + 1]), 1 << 30))
        if (parts[k], parts[k + 1]) not in RANKS:
            break
        parts[k : k + 2] = [parts[k] + parts[k + 1]]
    return parts


def ref_encode(text: str, pre: str) -> list[int]:
    patterns, ignore_merges, _ = REFERENCE[pre]
    ids: list[int] = []
    for piece in split(text, patterns):
        word = "".join(BYTES[b] for b in piece.encode("utf-8"))
        ids += [ID[word]] if ignore_merges and word in ID else [ID[t] for t in bpe(word)]
    return ids


def bpe_tok(tmp_path: Path, pre: str | None, **kw) -> GGUFTokenizer:
    path = write_tokenizer_gguf(tmp_path / f"bpe-{pre}.gguf", model="gpt2", pre=pre, tokens=TOKENS,
                                types=TYPES, merges=MERGES, ids={"bos": 0, "eos": 0}, **kw)
    return GGUFTokenizer.from_gguf(path, use_cache=False)


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    base = tmp_path_factory.mktemp("bpe")
    return {pre: bpe_tok(base, pre) for pre in REFERENCE}


def texts(tok: GGUFTokenizer, s: str) -> list[str]:
    return [tok.id_to_token(i) for i in tok.encode(s)]


@pytest.mark.parametrize(("pre", "digits", "hello"), [
    ("qwen2", ["1", "2", "3", "4", "5"], ["Hell", "o"]),
    ("stablelm2", ["1", "2", "3", "4", "5"], ["Hell", "o"]),
    ("llama3", ["123", "45"], ["Hello"]),
    ("llama-bpe", ["123", "45"], ["Hello"]),
    ("smaug-bpe", ["123", "45"], ["Hell", "o"]),  # Llama 3 regex, merges kept
    ("refact", ["1", "2", "3", "4", "5"], ["Hell", "o"]),
    ("olmo", ["123", "45"], ["Hell", "o"]),
    ("gpt-4o", ["123", "45"], ["Hell", "o"]),
    ("tekken", ["1", "2", "3", "4", "5"], ["Hello"]),
])
def test_each_pre_tokenizer_splits_digits_and_words_its_way(toks, pre, digits, hello):
    assert texts(toks[pre], "12345") == digits
    assert texts(toks[pre], "Hello") == hello


def test_gpt4o_splits_camel_case_and_keeps_contractions_on_the_word(toks):
    # o200k: an upper-case run starts a new piece; "'s" stays on its word.
    assert split("HelloWorld it's", REFERENCE["gpt-4o"][0]) == ["Hello", "World", " it's"]
    assert texts(toks["gpt-4o"], "HelloWorld") == ["Hell", "o", "W", "or", "l", "d"]
    assert texts(toks["gpt-4o"], "it's")[-2:] == ["t", "'s"]


_ALPHABET = st.sampled_from(list("Hello wor1234 5'sSTabcxyz\n\t!?./-日本é🙂") + ["  ", " 12", "'S", "\r\n"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHABET, max_size=18).map("".join), st.sampled_from(sorted(REFERENCE)))
def test_matches_the_llama_cpp_reference(toks, text, pre):
    tok = toks[pre]
    ids = tok.encode(text)
    assert ids == ref_encode(text, pre)
    assert tok.decode(ids) == text


def test_special_tokens_are_split_out_before_the_regex(toks):
    tok = toks["qwen2"]
    assert tok.encode("12<|im_end|>Hello") == [ID["1"], ID["2"], ID["<|im_end|>"], ID["Hell"], ID["o"]]
    literal = tok.encode("<|im_end|>", parse_special=False)
    assert ID["<|im_end|>"] not in literal and tok.decode(literal) == "<|im_end|>"


@pytest.mark.parametrize("pre", sorted(REFERENCE))
def test_bos_default_follows_llama_cpp(tmp_path, pre):
    tok = bpe_tok(tmp_path, pre)
    assert tok.add_bos is REFERENCE[pre][2]
    assert tok.encode_prompt("xyz")[:1] == ([0] if REFERENCE[pre][2] else [ID["x"]])


def test_add_bos_token_key_overrides_the_default(tmp_path):
    assert bpe_tok(tmp_path, "llama3", add_bos=False).add_bos is False
    assert bpe_tok(tmp_path, "qwen2", add_bos=True).add_bos is True


def test_missing_pre_name_is_the_default_fallback_and_unknown_names_are_refused(tmp_path):
    text = "1234, ok 12.5!"
    assert bpe_tok(tmp_path, None).encode(text) == bpe_tok(tmp_path, "default").encode(text)
    with pytest.raises(TokenizerError, match=r"unsupported pre-tokenizer 'deepseek-llm'.*supported: .*gpt-4o"):
        bpe_tok(tmp_path, "deepseek-llm")
    # llama.cpp refuses a file named "gpt2" (it knows "gpt-2"), so no tokenizer is built for one
    with pytest.raises(TokenizerError, match=r"unsupported pre-tokenizer 'gpt2'"):
        bpe_tok(tmp_path, "gpt2")


def test_bos_id_defaults_to_11_as_llama_cpp_and_none_is_a_clear_error(tmp_path):
    path = write_tokenizer_gguf(tmp_path / "nobos.gguf", model="gpt2", pre="llama3", tokens=TOKENS,
                                types=TYPES, merges=MERGES, ids={"eos": 0})
    tok = GGUFTokenizer.from_gguf(path, use_cache=False)
    assert tok.bos_id == 11 and tok.encode_prompt("xyz")[0] == 11  # llama.cpp's BPE default
    few = write_tokenizer_gguf(tmp_path / "few.gguf", model="gpt2", pre="llama3", tokens=TOKENS[:11],
                               types=TYPES[:11], merges=[], ids={"eos": 0})
    with pytest.raises(TokenizerError, match=r"adds a BOS token .*bos_token_id is not set"):
        GGUFTokenizer.from_gguf(few, use_cache=False)
