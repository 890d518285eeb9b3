"""llama.cpp as the reference for the tokenizer tests (not imported by the app): a vocabulary
loaded by llama.cpp alone, its ids and pieces, a corpus, and the comparisons every tokenizer
must pass (`assert_agrees`).

llama.cpp is reached only through `turbospark_app.model.llamacpp` (the app's one ctypes
package): `LlamaCppModel.open(vocab_only=True)`, `vocab.tokenize`, `vocab.token_piece`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

try:
    from turbospark_app.model.llamacpp import library
    from turbospark_app.model.llamacpp.model import LlamaCppModel
    from turbospark_app.model.llamacpp.vocab import bos_rule, eog_ids, token_piece, tokenize

    library.binding()
except Exception as exc:  # llama-cpp-python missing: every test of these files skips
    LLAMA_CPP_MISSING: str | None = f"llama.cpp not available: {exc}"
else:
    LLAMA_CPP_MISSING = None

needs_llama_cpp = pytest.mark.skipif(LLAMA_CPP_MISSING is not None, reason=LLAMA_CPP_MISSING or "")

# One text per kind the tokenizers must agree on; `SPECIAL_TEXTS` are spliced into some.
CORPUS: list[str] = [
    # multilingual: accents, CJK, Arabic, Cyrillic, Devanagari (combining marks), Greek, Thai
    "Café naïve résumé façade — Straße über Größe. ÀÉÎÕÜ àéîõü ÉCOLE École aÉ",
    "日本語のテキストです。中文字符测试，全角！한국어 텍스트입니다.",
    "مرحبا بالعالم، هذا اختبار. Привет, мир! Это ТЕСТ. नमस्ते दुनिया, हिन्दी परीक्षण।",
    "Ελληνικά ΑΒΓ αβγ ภาษาไทย e\u0301 a\u0308 o\u0302\u0323 \u05e9\u05dc\u05d5\u05dd",
    # code: Python, JSON, whitespace runs, tabs, newlines, CRLF
    'def hello(name: str) -> str:\n    return f"Hello, {name}!"  # greet\n\n\n',
    '{"key": [1, 2.5e-3, null], "nested": {"a": true, "b": "x\\ny"}}\r\n',
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i ** 2)\r\n\r\n    \n\t \n",
    "a  b   c    d     e\t\tf\r\ng\r\n\r\nh\n\n\n\n   end   ",
    "x=1;y=2\nz = x+y   // comment\n<div class=\"a\">&nbsp;</div>\n#include <stdio.h>",
    # numbers
    "12345 3.14159 1,000,000 2024-01-01 0x1F ٣٤٥ ١٢٣٤ ½ ¾ ² ³ Ⅻ 一二三 १२३",
    "I'm he's they'RE we'Ve you'LL it'D don't 'ſ O'Neil's",
    # emoji: ZWJ sequences, flags, skin tones, keycaps, variation selectors
    "👨‍👩‍👧‍👦 🇫🇷🇯🇵🏴󠁧󠁢󠁳󠁣󠁴󠁿 👍🏽👋🏿 🙂❤️ 1️⃣ 🧑‍💻 🫠",
    # whitespace and control oddities
    " \u00a0 nbsp\u3000ideographic\u2009thin\u200bzwsp\u200d x\u0085y\u2028z\u000bv\u000cf",
    "\x00\x01\x1f\x7f trailing", "   leading", "", " ", "\n", "\t",
    # bytes SmolLM2 has no token for; letters of Unicode 16, unassigned in llama.cpp's tables
    "a\x04b\x13c\U00040000d\U000f0000 ..\x04.. --\x13-- !!\x1d!! \U00040000\U00040000",
    "a\U00013460 b\U0001e5d0c \U00016d40a \U00016d69\u093f",
]
SPECIAL_TEXTS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>",
                 "<|user|>", "<|end|>", "<tool_call>", "<reponame>", "<fim_prefix>"]


def corpus_with_specials(seed: int = 0) -> list[str]:
    """The corpus, and the corpus with special-token texts inside the text."""
    rng = random.Random(seed)
    mixed = []
    for text in CORPUS:
        words = text.split(" ")
        for _ in range(2):
            words.insert(rng.randrange(len(words) + 1), rng.choice(SPECIAL_TEXTS))
        mixed.append(" ".join(words))
    mixed += ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
              "<s>[INST] hello [/INST]</s>", "<|user|>\n  hi<|end|>\n<|assistant|>\n",
              "x<|endoftext|>y <reponame> ok<tool_call>{}</tool_call>"]
    return CORPUS + mixed


def any_text(extra: list[str] | None = None) -> st.SearchStrategy[str]:
    """Arbitrary text, with corpus words and special-token texts mixed in."""
    words = sorted({w for text in CORPUS for w in text.split(" ") if w})
    parts = st.characters(codec="utf-8") | st.sampled_from(words) | st.sampled_from(
        [" ", "  ", "\n", "\t", "\r\n", *SPECIAL_TEXTS, *(extra or [])])
    return st.lists(parts, max_size=24).map("".join)


def open_vocab(path: Path, header: Any = None) -> Any:
    """The file's vocabulary as llama.cpp loads it (a `LlamaCppModel`, no tensors); `header`
    saves our reader's walk of a 49k vocabulary (~0.3 s) when the test has it already."""
    return LlamaCppModel.open(path, vocab_only=True, header=header)


def ll_encode(model: Any, text: str, parse_special: bool) -> list[int]:
    """llama_tokenize(add_special=False) of `text`."""
    return tokenize(model.vocab, text.encode("utf-8"), parse_special)


def ll_pieces(model: Any) -> list[bytes]:
    """llama_token_to_piece(special=False) of every id."""
    return [token_piece(model.vocab, i) for i in range(model.vocab_size)]


def ll_eog(model: Any) -> frozenset[int]:
    return eog_ids(model.vocab, model.vocab_size)


def ll_prompt(model: Any, text: str) -> list[int]:
    """What a chat prompt should be: llama.cpp's ids, BOS first when llama.cpp adds one and
    the text does not already start with it."""
    ids = ll_encode(model, text, True)
    bos, add_bos = bos_rule(model.vocab)
    if add_bos and bos is not None and ids[:1] != [bos]:
        ids.insert(0, bos)
    return ids


def show(tok: Any, ids: list[int]) -> list[str]:
    return [tok.id_to_token(i) for i in ids]


def assert_encodes_alike(tok: Any, model: Any, text: str) -> None:
    """`encode` (both ways of special tokens) and `encode_prompt` give llama.cpp's ids."""
    for parse_special in (True, False):
        ours, theirs = tok.encode(text, parse_special=parse_special), ll_encode(model, text, parse_special)
        assert ours == theirs, (f"parse_special={parse_special} {text!r}\n ours {show(tok, ours)}"
                                f"\n llama.cpp {show(tok, theirs)}")
    assert tok.encode_prompt(text) == ll_prompt(model, text), text


def assert_agrees(tok: Any, model: Any, texts: list[str], pieces: list[bytes] | None = None) -> None:
    """Ids, prompts, token bytes of every id and decoding agree with llama.cpp."""
    pieces = pieces if pieces is not None else ll_pieces(model)
    assert tok.vocab_size == model.vocab_size
    ours = [tok.token_bytes(i) for i in range(tok.vocab_size)]
    wrong = [(i, tok.id_to_token(i), ours[i], pieces[i]) for i in range(len(ours)) if ours[i] != pieces[i]]
    assert not wrong, f"{len(wrong)} token pieces differ, e.g. {wrong[:5]}"
    spm_prefix = tok.spec.model == "llama" and tok.spec.add_space_prefix
    for text in texts:
        assert_encodes_alike(tok, model, text)
        ids = ll_encode(model, text, True)
        joined = b"".join(pieces[i] for i in ids)
        if spm_prefix and joined.startswith(b" "):
            joined = joined[1:]
        assert tok.decode(ids) == joined.decode("utf-8", errors="replace")


def byte_level(text: str) -> str:
    """`text` in GPT-2's byte-level alphabet (as byte-level BPE tokens spell it)."""
    from turbospark_app.model.text.token_pieces import byte_chars

    chars = byte_chars()
    return "".join(chars[b] for b in text.encode("utf-8"))


def assert_same_rules(tok: Any, model: Any) -> None:
    """Token types, Phi-3 rstrip and end of generation as llama.cpp has them."""
    from turbospark_app.model.llamacpp.vocab import llama_cpp_rules

    theirs = llama_cpp_rules(model, tok.spec)
    assert tok.eog_ids == ll_eog(model)
    assert tok.token_types == theirs.token_types
    assert tok.rstrip_ids == theirs.rstrip_ids
    assert (tok.eos_ids, tok.end_of_turn_ids) == (theirs.eos_ids, theirs.end_of_turn_ids)

