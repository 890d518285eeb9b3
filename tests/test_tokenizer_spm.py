"""SentencePiece (`llama`) vocabularies: space prefix on / off, byte fallback, special fragments,
user-defined vs control tokens, Phi-3's rstrip. Cross-checked against a plain implementation of
llama.cpp's SPM tokenizer (llm_tokenizer_spm_session + tokenizer_st_partition) written here."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text.tokenizer import GGUFTokenizer

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6

# Pieces with unique scores (SentencePiece BPE: earlier pieces merge first).
PIECES = ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "b", "1", "2", "!", "日",
          "▁h", "he", "el", "ll", "lo", "▁w", "or", "ld", "▁he", "hel", "llo", "▁hel", "▁hello",
          "wor", "▁wor", "▁world", "ab", "12", "▁1", "!!"]
CONTROLS = ["<s>", "</s>", "<|end|>", "<|user|>", "<|assistant|>", "<end_of_turn>", "<|endoftext|>"]
# "▁▁": a user-defined piece SPM merges into. (Converters now write user-defined spaces as " ";
# llama.cpp prints the stored text, so this one prints as "▁▁".)
USER = ["▁▁", "<ud>"]
TOKENS = ["<unk>", *CONTROLS, *[f"<0x{b:02X}>" for b in range(256)], *PIECES, *USER]
TYPES = [UNKNOWN, *[CONTROL] * len(CONTROLS), *[BYTE] * 256, *[NORMAL] * len(PIECES),
         *[USER_DEFINED] * len(USER)]
SCORES = [0.0] * (1 + len(CONTROLS) + 256) + [-1000.0 - i for i in range(len(PIECES))] + [0.0] * len(USER)
ID = {t: i for i, t in enumerate(TOKENS)}
SPECIAL_TYPES = (CONTROL, UNKNOWN, USER_DEFINED)


def spm(tmp_path: Path, *, prefix: bool | None = None, name: str | None = None) -> GGUFTokenizer:
    path = write_tokenizer_gguf(tmp_path / f"spm-{prefix}-{name}.gguf", model="llama", tokens=TOKENS,
                                types=TYPES, scores=SCORES, ids={"bos": ID["<s>"], "eos": ID["</s>"]},
                                add_space_prefix=prefix, name=name)
    return GGUFTokenizer.from_gguf(path, use_cache=False)


# --- the reference: llama.cpp's SPM path, written plainly -----------------------------------------


def ref_partition(text: str, parse_special: bool) -> list[str | int]:
    """Text fragments and special-token ids, longest special first (tokenizer_st_partition)."""
    specials = sorted((i for i, k in enumerate(TYPES) if k in SPECIAL_TYPES
                       and (parse_special or k == USER_DEFINED)), key=lambda i: -len(TOKENS[i]))
    parts: list[str | int] = [text] if text else []
    for sid in specials:
        out: list[str | int] = []
        for part in parts:
            if not isinstance(part, str):
                out.append(part)
                continue
            pieces = part.split(TOKENS[sid])
            for k, piece in enumerate(pieces):
                if k:
                    out.append(sid)
                if piece:
                    out.append(piece)
        parts = out
    return parts


def ref_spm(text: str) -> list[int]:
    """Merge the best-scoring adjacent pair (ties: leftmost) while one forms a token; symbols
    that are not tokens become their UTF-8 bytes."""
    syms = list(text)
    while True:
        best = None
        for k in range(len(syms) - 1):
            tid = ID.get(syms[k] + syms[k + 1])
            if tid is not None and (best is None or SCORES[tid] > best[0]):
                best = (SCORES[tid], k)
        if best is None:
            break
        k = best[1]
        syms[k : k + 2] = [syms[k] + syms[k + 1]]
    out: list[int] = []
    for s in syms:
        out += [ID[s]] if s in ID else [ID[f"<0x{b:02X}>"] for b in s.encode("utf-8")]
    return out


def ref_encode(text: str, *, prefix: bool, parse_special: bool) -> list[int]:
    ids: list[int] = []
    prev_special = True  # the first fragment is prefixed too
    for part in ref_partition(text, parse_special):
        if isinstance(part, int):
            ids.append(part)
            prev_special = True
            continue
        piece = (" " if prefix and prev_special else "") + part
        ids += ref_spm(piece.replace(" ", "▁"))
        prev_special = False
    return ids


# --- tests ------------------------------------------------------------------------------------------


def test_space_prefix_before_the_first_fragment_and_after_every_special_token(tmp_path):
    tok = spm(tmp_path)  # no add_space_prefix key: llama.cpp's default for SPM is true
    assert tok.spec.add_space_prefix
    assert tok.encode("hello world") == [ID["▁hello"], ID["▁world"]]
    assert tok.encode("<|user|>hello<|end|>world") == [
        ID["<|user|>"], ID["▁hello"], ID["<|end|>"], ID["▁world"]]
    assert tok.encode("hello<ud>world") == [ID["▁hello"], ID["<ud>"], ID["▁world"]]
    assert tok.decode(tok.encode("hello world")) == "hello world"  # the first prefix is dropped


def test_gemma_style_vocabulary_without_the_space_prefix(tmp_path):
    tok = spm(tmp_path, prefix=False)
    assert tok.encode("hello world") == [ID["he"], ID["llo"], ID["▁world"]]
    assert tok.encode("<end_of_turn>hello") == [ID["<end_of_turn>"], ID["he"], ID["llo"]]
    assert tok.decode(tok.encode(" hello")) == " hello"  # nothing added, nothing dropped


def test_byte_fallback_for_characters_outside_the_vocabulary(tmp_path):
    tok = spm(tmp_path, prefix=False)
    emoji = [ID[f"<0x{b:02X}>"] for b in "🙂".encode("utf-8")]
    assert tok.encode("🙂日é") == [*emoji, ID["日"], ID["<0xC3>"], ID["<0xA9>"]]
    assert tok.decode(tok.encode("a🙂日é!")) == "a🙂日é!"


def test_user_defined_pieces_are_merged_into_and_always_split_out(tmp_path):
    tok = spm(tmp_path, prefix=False)
    assert tok.encode("a  b") == [ID["a"], ID["▁▁"], ID["b"]]  # "▁▁" beats every normal piece
    # llama_token_to_piece gives a user-defined token's stored text, "▁" and all
    assert tok.decode([ID["a"], ID["▁▁"], ID["b"]]) == "a▁▁b"
    # Control tokens are text unless special tokens are parsed; user-defined ones never are.
    literal = tok.encode("<|end|><ud>", parse_special=False)
    assert ID["<|end|>"] not in literal and literal[-1] == ID["<ud>"]
    assert tok.decode(literal) == "<|end|><ud>"
    assert tok.encode("<|end|><ud>") == [ID["<|end|>"], ID["<ud>"]]


def test_phi3_special_tokens_drop_the_whitespace_after_them(tmp_path):
    prompt = "<|user|>\nhello<|end|>\n<|assistant|>\n"
    phi3 = spm(tmp_path, name="Phi-3 Mini 4k Instruct")
    assert phi3.encode(prompt) == [ID["<|user|>"], ID["▁hello"], ID["<|end|>"], ID["<|assistant|>"]]
    # <|endoftext|>, <s> and <unk> keep what follows them, as in llama.cpp
    assert phi3.encode("<|endoftext|>\n")[1:] == [ID["▁"], ID["<0x0A>"]]
    newline = [ID["▁"], ID["<0x0A>"]]
    # llama.cpp matches "phi-3" / "phi3" in general.name: "Phi 3" does not strip
    for name in ("Some Llama", "Phi 3 Mini 4k Instruct"):
        other = spm(tmp_path, name=name)
        assert other.encode(prompt) == [ID["<|user|>"], *newline, ID["he"], ID["llo"], ID["<|end|>"],
                                        *newline, ID["<|assistant|>"], *newline]


def test_bos_defaults_and_metadata(tmp_path):
    tok = spm(tmp_path)
    assert tok.add_bos and tok.bos_id == ID["<s>"]  # SPM adds BOS unless the file says no
    assert tok.encode_prompt("hello") == [ID["<s>"], ID["▁hello"]]
    no_keys = write_tokenizer_gguf(tmp_path / "nokeys.gguf", model="llama", tokens=TOKENS,
                                   types=TYPES, scores=SCORES, add_bos=False)
    bare = GGUFTokenizer.from_gguf(no_keys, use_cache=False)
    assert (bare.bos_id, bare.eos_id, bare.spec.unk_id) == (1, 2, 0)  # llama.cpp's SPM defaults
    assert not bare.add_bos and bare.encode_prompt("hello") == [ID["▁hello"]]


_ALPHABET = st.sampled_from(list("helowrdab12! 日é🙂\n") + ["  ", "hello", " world", "<|end|>",
                                                          "<s>", "<ud>", "<end_of_turn>", "<unk>"])


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("spm")
    return {True: spm(base, prefix=True), False: spm(base, prefix=False)}


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=16).map("".join), st.booleans(), st.booleans())
def test_matches_llama_cpp_spm_reference(both, text, prefix, parse_special):
    tok = both[prefix]
    assert tok.encode(text, parse_special=parse_special) == ref_encode(
        text, prefix=prefix, parse_special=parse_special)


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(list("helowrdab12! 日é🙂\n\tß")), max_size=30), st.booleans())
def test_plain_text_round_trips(both, text, prefix):
    # two spaces (the prefix counts) make the user-defined "▁▁", which prints as itself
    assume("  " not in (" " + text if prefix else text))
    tok = both[prefix]
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    joined = b"".join(tok.token_bytes(i) for i in ids)
    assert joined == ((" " if prefix and text else "") + text).encode("utf-8")
