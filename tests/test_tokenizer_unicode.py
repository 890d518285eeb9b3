"""The code point classes the pre-tokenizer regexes use (turbospark_app/model/text/llama_unicode.py,
generated from llama.cpp's tables) are the installed llama.cpp's: letter, number, punctuation
and "other" for every code point of planes 0-3 and 14, each asked of llama.cpp itself.

One text per class, one `llama_tokenize` call each: every probe is a known character P and the
code point X, and a vocabulary with a merge of P and every byte says whether llama.cpp kept
them in one piece:

    "a" X    GPT-2 split (` ?\\p{L}+`): together iff X is a letter
    "1" X    GPT-2 split (` ?\\p{N}+`): together iff X is a number
    X "!"    GPT-2 split (` ?[^\\s\\p{L}\\p{N}]+`): together iff X is none of letter, number, space
    "!" X    llama.cpp's `default` split (`[\\p{P}$+<=>^~|]+` first): together iff X is punctuation

When llama-cpp-python is upgraded and this fails: python tools/gen_llama_unicode.py <its
vendored llama.cpp/src/unicode-data.cpp>.
"""

from __future__ import annotations

import pytest

from llama_cpp_ref import needs_llama_cpp, open_vocab
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text import llama_unicode
from turbospark_app.model.text.token_pieces import byte_chars

pytestmark = needs_llama_cpp

POINTS = [c for c in (*range(0x40000), *range(0xE0000, 0xE1000)) if not 0xD800 <= c < 0xE000
          and c not in (0x0A, 0x20)]  # "\n" separates the probes; " " is the GPT-2 space
CHARS = byte_chars()


def table(text: str) -> set[int]:
    out: set[int] = set()
    for word in text.split():
        a, _, b = word.partition("-")
        out.update(range(int(a, 16), int(b or a, 16) + 1))
    return out


LETTERS, NUMBERS = table(llama_unicode.LETTER), table(llama_unicode.NUMBER)
PUNCTUATION, SPACES = table(llama_unicode.PUNCTUATION), table(llama_unicode.WHITESPACE)


def probe_vocab(tmp_path, pre: str, glue: str, before: bool):
    """A byte-level vocabulary whose only merges join `glue` and any byte (on the given side)."""
    g = CHARS[ord(glue)]
    pairs = [(g, c) if before else (c, g) for c in CHARS]
    tokens = [*CHARS, *(a + b for a, b in pairs)]
    path = write_tokenizer_gguf(tmp_path / f"{pre}-{ord(glue)}.gguf", model="gpt2", pre=pre,
                                tokens=tokens, types=[1] * len(tokens),
                                merges=[f"{a} {b}" for a, b in pairs], ids={"eos": 0})
    return open_vocab(path), {t: i for i, t in enumerate(tokens)}


def probe_ids(ids: dict[str, int], glue: str, before: bool, joined: set[int]) -> list[int]:
    """The ids llama.cpp should give the probe text if exactly `joined` stay with `glue`."""
    g, newline, out = CHARS[ord(glue)], ids[CHARS[10]], []
    for c in POINTS:
        b = [CHARS[x] for x in chr(c).encode("utf-8")]
        if c in joined:
            pieces = [g + b[0], *b[1:]] if before else [*b[:-1], b[-1] + g]
        else:
            pieces = [g, *b] if before else [*b, g]
        out += [ids[p] for p in pieces]
        out.append(newline)
    return out


def first_difference(theirs: list[int], ours: list[int], glue: str, before: bool,
                     ids: dict[str, int], joined: set[int]) -> str:
    """Which code point llama.cpp classes otherwise (the probes are walked one by one)."""
    at = 0
    for c in POINTS:
        n = len(probe_ids(ids, glue, before, {c} & joined))
        if theirs[at:at + n] != ours[at:at + n]:
            return f"U+{c:04X} ({'in' if c in joined else 'not in'} the table here)"
        at += n
    return "no code point (lengths differ)"


@pytest.mark.parametrize(("name", "pre", "glue", "before"), [
    ("letters", "gpt-2", "a", True),
    ("numbers", "gpt-2", "1", True),
    ("others", "gpt-2", "!", False),
    ("punctuation", "default", "!", True),
])
def test_code_point_classes_are_llama_cpps(tmp_path, name, pre, glue, before):
    from turbospark_app.model.llamacpp.vocab import tokenize

    points = set(POINTS)
    ours = {
        "letters": LETTERS,
        "numbers": NUMBERS,
        "others": points - LETTERS - NUMBERS - SPACES,
        "punctuation": PUNCTUATION | {ord(c) for c in "$+<=>^~|"},
    }[name] & points
    model, ids = probe_vocab(tmp_path, pre, glue, before)
    text = "".join((glue + chr(c) if before else chr(c) + glue) + "\n" for c in POINTS)
    theirs = tokenize(model.vocab, text.encode("utf-8"), False)
    expected = probe_ids(ids, glue, before, ours)
    if theirs != expected:
        where = first_difference(theirs, expected, glue, before, ids, ours)
        pytest.fail(f"{name}: llama.cpp classes {where} otherwise than llama_unicode.py; "
                    "regenerate it (tools/gen_llama_unicode.py)")
