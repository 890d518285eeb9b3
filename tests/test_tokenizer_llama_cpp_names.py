"""Every pre-tokenizer name in `vocab_rules.SUPPORTED_PRE` (and no name) against llama.cpp, on a
split-revealing byte-level vocabulary: a merge for every pair of adjacent bytes in the corpus,
so any difference in where the pre-tokenizer cuts shows in the ids, plus whole words without a
merge path (Llama 3 / Tekken take them whole) and overlapping special tokens. `encode` (special
tokens parsed or not), `encode_prompt` (llama.cpp's BOS default per name), `encode_continuation`,
`token_bytes` of every id, `decode`, token types and end of generation agree with llama.cpp.
(The real SmolLM2 vocabulary per family: tests/test_tokenizer_llama_cpp.py.)
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from llama_cpp_ref import (
    assert_agrees,
    assert_same_rules,
    byte_level,
    corpus_with_specials,
    ll_encode,
    needs_llama_cpp,
    open_vocab,
)
from test_tokenizer_llama_cpp import FAMILIES
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text.token_pieces import byte_chars
from turbospark_app.model.text.tokenizer import GGUFTokenizer
from turbospark_app.model.text.vocab_rules import SUPPORTED_PRE

pytestmark = needs_llama_cpp

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
OVERLAPS = ["xyqzw", "axyqzwb", "a  b   c", "é!é!", "<|im_end|><|im_end|>\n", "<|end|>x<unused0>y"]


# --- the split-revealing vocabulary, under every name --------------------------------------------

SPECIALS = [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
            ("<reponame>", CONTROL), ("<fim_prefix>", CONTROL), ("<tool_call>", USER_DEFINED),
            ("</tool_call>", USER_DEFINED), ("xyq", USER_DEFINED), ("yqzw", CONTROL),
            ("é!", USER_DEFINED), ("  ", USER_DEFINED), ("<|end|>", NORMAL), ("<unused0>", UNUSED)]
WHOLE = ["12345", "ÉCOLE", " École", " hello", " 123", "日本語", "Straße", "HelloWorld"]


def split_vocab() -> tuple[list[str], list[int], list[str]]:
    chars = byte_chars()
    pairs: dict[tuple[str, str], None] = {}
    for text in corpus_with_specials() + OVERLAPS:
        seq = byte_level(text)
        pairs.update(dict.fromkeys(zip(seq, seq[1:])))
    probe = [chars[b] for b in b"aZ1 '.\n\t"] + [chars[0xC3], chars[0xE0], chars[0xF0]]
    pairs.update(dict.fromkeys((a, b) for a in probe for b in probe))
    order = list(pairs)
    random.Random(7).shuffle(order)  # merge ranks in no particular order
    tokens = [t for t, _ in SPECIALS] + list(chars) + [a + b for a, b in order]
    types = [k for _, k in SPECIALS] + [NORMAL] * (256 + len(order))
    for word in WHOLE:
        if byte_level(word) not in tokens:
            tokens.append(byte_level(word))
            types.append(NORMAL)
    return tokens, types, [f"{a} {b}" for a, b in order]


@pytest.fixture(scope="module")
def split_files(tmp_path_factory):
    """pre name -> (GGUFTokenizer, llama.cpp vocabulary) of the split-revealing vocabulary."""
    tokens, types, merges = split_vocab()
    base = tmp_path_factory.mktemp("split")
    made: dict[str | None, tuple[GGUFTokenizer, Any]] = {}

    def get(pre: str | None) -> tuple[GGUFTokenizer, Any]:
        if pre not in made:
            path = write_tokenizer_gguf(base / f"{pre}.gguf", model="gpt2", pre=pre, tokens=tokens,
                                        types=types, merges=merges, ids={"eos": 0})
            made[pre] = (GGUFTokenizer.from_gguf(path, use_cache=False), open_vocab(path))
        return made[pre]
    return get


@pytest.mark.parametrize("pre", [*SUPPORTED_PRE, None])
def test_every_pre_name_splits_as_llama_cpp(split_files, pre):
    tok, model = split_files(pre)
    texts = corpus_with_specials() + OVERLAPS + [" ".join(WHOLE), "".join(WHOLE)]
    assert_agrees(tok, model, texts)  # add_bos defaults per name are in encode_prompt
    assert_same_rules(tok, model)
    assert all(tok.encode_continuation(t) == tok.encode(t) for t in texts)  # no space prefix here


def test_the_split_vocabulary_tells_the_families_apart(split_files):
    """The ids differ between families on the corpus: the test above could not pass by a
    vocabulary too poor to show a wrong split."""
    seen: dict[tuple, str] = {}
    for name in FAMILIES:
        _, model = split_files(name)
        ids = tuple(tuple(ll_encode(model, t, False)) for t in corpus_with_specials())
        assert ids not in seen, f"{name} splits as {seen.get(ids)}"
        seen[ids] = name
