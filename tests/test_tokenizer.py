"""GGUFTokenizer: synthetic GGUF vocabularies (fast) and the real SmolLM2 vocabulary."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import gguf
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tiny_gguf import write_tokenizer_gguf
from turbospark_app.engine.tokenizer import EngineTokenizer
from turbospark_app.model.gguf import header as gguf_header
from turbospark_app.model.gguf.header import ModelFileError
from turbospark_app.model.text.tokenizer import GGUFTokenizer, TokenizerError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


def gpt2_byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode, written out independently: index = byte value."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_gguf(path: Path, *, model: str, tokens: list[str], types: list[int], pre: str | None = None,
               merges: list[str] | None = None, scores: list[float] | None = None,
               bos: int | None = None, eos: int | None = None, eot: int | None = None,
               add_bos: bool | None = None) -> Path:
    """A GGUF holding only tokenizer metadata."""
    ids = {k: v for k, v in (("bos", bos), ("eos", eos), ("eot", eot)) if v is not None}
    return write_tokenizer_gguf(path, model=model, tokens=tokens, types=types, pre=pre, merges=merges,
                                scores=scores, ids=ids, add_bos=add_bos)


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BASE = gpt2_byte_chars()
MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "l l"]
EXTRA = ["Ġt", "he", "Ġthe", "12", "ll", "abc", "<tool_call>"]  # "abc" has no merge path
GPT2_TOKENS = SPECIALS + BASE + EXTRA
GPT2_TYPES = [CONTROL] * 3 + [NORMAL] * (256 + 6) + [USER_DEFINED]


def tid(text: str) -> int:
    return GPT2_TOKENS.index(text)


def gpt2_tok(tmp_path: Path, pre: str = "smollm", **kw) -> GGUFTokenizer:
    path = write_gguf(tmp_path / f"{pre}.gguf", model="gpt2", pre=pre, tokens=GPT2_TOKENS,
                      types=GPT2_TYPES, merges=MERGES, bos=1, eos=0, **kw)
    return GGUFTokenizer.from_gguf(path, use_cache=False)


def texts(tok: GGUFTokenizer, s: str) -> list[str]:
    return [tok.id_to_token(i) for i in tok.encode(s)]


# --- synthetic byte-level BPE ----------------------------------------------------------------------


def test_merges_special_and_added_tokens(tmp_path):
    tok = gpt2_tok(tmp_path)
    assert isinstance(tok, EngineTokenizer)
    assert texts(tok, " the") == ["Ġthe"]
    assert texts(tok, "the") == ["t", "he"]
    assert texts(tok, "hell") == ["he", "ll"]
    assert texts(tok, "tthe") == ["t", "t", "he"]  # no "t t" merge; "Ġt" needs a space
    assert tok.encode("<|im_start|>user<|im_end|>") == [1, *[tid(c) for c in "user"], 2]
    assert tok.encode("<tool_call>") == [tid("<tool_call>")]
    assert tok.token_bytes(tid("Ġthe")) == b" the"
    assert tok.token_bytes(tid("<tool_call>")) == b"<tool_call>"
    assert tok.token_bytes(1) == b"" and tok.decode([1, tid("Ġthe"), 2]) == " the"
    assert tok.bos_id == 1 and tok.vocab_size == len(GPT2_TOKENS)
    assert tok.end_of_turn_ids == {2} and tok.eos_ids == {0}
    assert tok.tool_call_ids == {tid("<tool_call>")}
    assert tok.token_to_id("Ġthe") == tid("Ġthe") and tok.token_to_id("nope") is None


@pytest.mark.parametrize(("pre", "digits", "abc"), [
    ("smollm", ["1", "2", "3", "4", "5"], ["a", "b", "c"]),
    ("gpt-2", ["12", "3", "4", "5"], ["a", "b", "c"]),
    ("default", ["12", "3", "4", "5"], ["a", "b", "c"]),  # llama.cpp's legacy: 3 digits at a time
    ("llama-bpe", ["12", "3", "4", "5"], ["abc"]),  # \p{N}{1,3}: "123" "45"; whole-word vocab hit
    ("qwen2", ["1", "2", "3", "4", "5"], ["a", "b", "c"]),
])
def test_pre_tokenizer_follows_tokenizer_ggml_pre(tmp_path, pre, digits, abc):
    tok = gpt2_tok(tmp_path, pre=pre)
    assert texts(tok, "12345") == digits
    assert texts(tok, "abc") == abc


def test_eot_metadata_and_bytes_of_every_byte_token(tmp_path):
    tok = gpt2_tok(tmp_path, eot=tid("<tool_call>") - 1)
    assert tid("<tool_call>") - 1 in tok.end_of_turn_ids
    assert [tok.token_bytes(3 + b) for b in range(256)] == [bytes([b]) for b in range(256)]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_synthetic_round_trip(tmp_path_factory, text):
    # Special tokens (control text) are parsed, and decode to nothing: plain text only here.
    assume(not any(s in text for s in SPECIALS))
    tok = _cached_synthetic(tmp_path_factory)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")


_SYNTH: list[GGUFTokenizer] = []


def _cached_synthetic(factory) -> GGUFTokenizer:
    if not _SYNTH:
        _SYNTH.append(gpt2_tok(factory.mktemp("synth")))
    return _SYNTH[0]


@pytest.mark.parametrize(("change", "message"), [
    (dict(pre="klingon"), "unsupported pre-tokenizer 'klingon'"),
    (dict(model="bert"), "unsupported tokenizer model 'bert'"),
    (dict(merges=["Ġ zz"]), "merge #0 'Ġ zz' refers to 'zz', which is not a token"),
    (dict(merges=["nospace"]), "merge #0 'nospace' is not two tokens"),
])
def test_unsupported_or_broken_metadata_is_a_clear_error(tmp_path, change, message):
    args = dict(model="gpt2", pre="smollm", tokens=GPT2_TOKENS, types=GPT2_TYPES, merges=MERGES) | change
    path = write_gguf(tmp_path / "bad.gguf", **args)
    with pytest.raises(TokenizerError, match=message):
        GGUFTokenizer.from_gguf(path, use_cache=False)


def test_not_a_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope" * 64)
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        GGUFTokenizer.from_gguf(bad, use_cache=False)


# --- the cache -----------------------------------------------------------------------------------


def test_cache_skips_the_reader_and_follows_file_changes(tmp_path, isolated_dirs, monkeypatch):
    path = write_gguf(tmp_path / "m.gguf", model="gpt2", pre="smollm", tokens=GPT2_TOKENS,
                      types=GPT2_TYPES, merges=MERGES, bos=1, eos=0)
    first = GGUFTokenizer.from_gguf(path)
    entries = list((isolated_dirs["cache"] / "tokenizers").glob("*.json"))
    assert len(entries) == 1

    def no_reader(*args, **kwargs):
        raise AssertionError("the cache should have answered")

    with monkeypatch.context() as m:
        m.setattr(gguf_header, "read_header", no_reader)
        again = GGUFTokenizer.from_gguf(path)
    assert again.encode(" the 12<|im_end|>") == first.encode(" the 12<|im_end|>")
    assert again.end_of_turn_ids == first.end_of_turn_ids and again.eos_ids == first.eos_ids
    # A different file at the same path: rebuilt (pre "gpt-2" now keeps "12"), old entry pruned.
    write_gguf(path, model="gpt2", pre="gpt-2", tokens=GPT2_TOKENS, types=GPT2_TYPES, merges=MERGES)
    assert texts(GGUFTokenizer.from_gguf(path), "12") == ["12"]
    assert len(list((isolated_dirs["cache"] / "tokenizers").glob("*.json"))) == 1
    # A corrupt entry is rebuilt.
    entry = next((isolated_dirs["cache"] / "tokenizers").glob("*.json"))
    entry.write_text("{ not json")
    assert texts(GGUFTokenizer.from_gguf(path), "12") == ["12"]


# --- SentencePiece (`llama`) vocabularies ----------------------------------------------------------

SPM_PIECES = ["▁", "h", "e", "l", "o", "▁h", "el", "lo", "▁hel", "▁hello", "w"]
SPM_TOKENS = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], *SPM_PIECES]
SPM_TYPES = [UNKNOWN, CONTROL, CONTROL, *[BYTE] * 256, *[NORMAL] * len(SPM_PIECES)]
# Scores decide the merge order: "▁h" first ... "▁hello" last; single characters never merge.
SPM_SCORES = [0.0] * 259 + [-100.0, -100.0, -100.0, -100.0, -100.0, -1.0, -2.0, -3.0, -4.0, -5.0, -100.0]


def spm_tok(tmp_path: Path) -> GGUFTokenizer:
    path = write_gguf(tmp_path / "spm.gguf", model="llama", tokens=SPM_TOKENS, types=SPM_TYPES,
                      scores=SPM_SCORES, bos=1, eos=2)
    return GGUFTokenizer.from_gguf(path, use_cache=False)


def test_sentencepiece_merges_byte_fallback_and_bos(tmp_path):
    tok = spm_tok(tmp_path)
    sid = SPM_TOKENS.index
    assert tok.encode("hello") == [sid("▁hello")]  # the space prefix is added
    assert tok.encode("hello wel") == [sid("▁hello"), sid("▁"), sid("w"), sid("el")]
    assert tok.encode("é") == [sid("▁"), sid("<0xC3>"), sid("<0xA9>")]
    assert tok.token_bytes(sid("<0xC3>")) == b"\xc3" and tok.token_bytes(sid("▁hello")) == b" hello"
    assert tok.decode(tok.encode("hello é")) == "hello é"  # the prefix space is dropped again
    assert tok.encode("<s>hello") == [1, sid("▁hello")]
    assert tok.add_bos and tok.encode_prompt("hello") == [1, sid("▁hello")]
    assert tok.encode_prompt("<s>hello") == [1, sid("▁hello")]  # no second BOS
    assert tok.eos_ids == {2} and tok.token_bytes(0) == b"" and tok.token_bytes(1) == b""


def test_sentencepiece_without_scores_is_a_clear_error(tmp_path):
    path = write_gguf(tmp_path / "s.gguf", model="llama", tokens=SPM_TOKENS, types=SPM_TYPES)
    with pytest.raises(TokenizerError, match="needs tokenizer.ggml.scores"):
        GGUFTokenizer.from_gguf(path, use_cache=False)


def test_add_bos_false_means_no_bos_in_prompts(tmp_path):
    tok = gpt2_tok(tmp_path, add_bos=False)
    assert not tok.add_bos and tok.encode_prompt(" the") == [tid("Ġthe")]
    assert tok.encode(" the", add_bos=True) == [1, tid("Ġthe")]


def test_token_bytes_rejects_ids_outside_the_vocabulary(tmp_path):
    tok = gpt2_tok(tmp_path)
    with pytest.raises(ValueError, match="out of range"):
        tok.token_bytes(tok.vocab_size)
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([-1])


# --- the real SmolLM2 vocabulary -------------------------------------------------------------------
# Expected tokens are derived independently: a hand-written GPT-2 pre-tokenizer (digits split off
# first, as llama.cpp does for `smollm`) and a textbook BPE over the GGUF's merges, then looked up
# by their byte-level text in the GGUF's token list.

_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def _klass(c: str) -> str:
    cat = unicodedata.category(c)[0]
    return cat if cat in "LN" else "O"


def _gpt2_pieces(text: str) -> list[str]:
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ by hand."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        contraction = next((c for c in _CONTRACTIONS if text.startswith(c, i)), None)
        if contraction:
            pieces.append(contraction)
            i += len(contraction)
            continue
        j = i + 1 if text[i] == " " and i + 1 < n and not text[i + 1].isspace() else i
        k = j + 1
        if not text[j].isspace():
            while k < n and not text[k].isspace() and _klass(text[k]) == _klass(text[j]):
                k += 1
        else:
            while k < n and text[k].isspace():
                k += 1
            if k < n and k - i > 1:
                k -= 1  # \s+(?!\S): the last space goes with the next word
        pieces.append(text[i:k])
        i = k
    return pieces


def _smollm_pieces(text: str) -> list[str]:
    out, chunk = [], ""
    for c in text:
        if unicodedata.category(c)[0] == "N":
            out += _gpt2_pieces(chunk) if chunk else []
            out.append(c)
            chunk = ""
        else:
            chunk += c
    return out + (_gpt2_pieces(chunk) if chunk else [])


class _Reference:
    def __init__(self, tokens: list[str], merges: list[str]) -> None:
        self.ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.chars = gpt2_byte_chars()

    def bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            k = min(range(len(parts) - 1), key=lambda k: self.ranks.get((parts[k], parts[k + 1]), 1e18))
            if (parts[k], parts[k + 1]) not in self.ranks:
                break
            parts[k : k + 2] = [parts[k] + parts[k + 1]]
        return parts

    def encode(self, text: str) -> list[int]:
        words = ("".join(self.chars[b] for b in p.encode("utf-8")) for p in _smollm_pieces(text))
        return [self.ids[t] for w in words for t in self.bpe(w)]


@pytest.fixture(scope="module")
def smol(default_model_path):
    # gguf's own reader as the reference for what our bounded header walk reads
    reader = gguf.GGUFReader(str(default_model_path), "r")
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    header = gguf_header.read_header(default_model_path)
    assert header.value("tokenizer.ggml.tokens") == tokens
    assert header.value("tokenizer.ggml.merges") == merges
    assert header.value("tokenizer.ggml.token_type") == list(
        reader.fields["tokenizer.ggml.token_type"].contents())
    return GGUFTokenizer.from_reader(header), tokens, _Reference(tokens, merges)


KNOWN = {
    "Hello world": ["Hello", "Ġworld"],
    "café": ["c", "af", "Ã©"],
    "日本語": ["æĹ", "¥", "æľ¬", "è", "ª", "ŀ"],
    "🙂": ["ðŁ", "ĻĤ"],
    "The year 2024!": ["The", "Ġyear", "Ġ", "2", "0", "2", "4", "!"],
    "I'm here\n\n  ok": ["I", "'m", "Ġhere", "ĊĊĠ", "Ġok"],
}


@pytest.mark.real_model
@pytest.mark.parametrize("text", list(KNOWN))
def test_smollm2_known_ids(smol, text):
    tok, tokens, ref = smol
    expected = [tokens.index(t) for t in KNOWN[text]]
    assert tok.encode(text) == expected == ref.encode(text)
    assert tok.decode(expected) == text


@pytest.mark.real_model
def test_smollm2_special_ids(smol):
    tok, tokens, _ = smol
    assert (tokens[0], tokens[1], tokens[2]) == ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    assert [tok.encode(t) for t in tokens[:3]] == [[0], [1], [2]]
    assert tok.encode("<|im_start|>user\nHi<|im_end|>\n") == [1, 4093, 198, 26843, 2, 198]
    assert tok.bos_id == 1 and not tok.add_bos and tok.vocab_size == 49152
    # <reponame> (4) is llama.cpp's fill-in-the-middle repo token, which ends generation there.
    assert tok.end_of_turn_ids == {2, 4} and tok.eos_ids == {0} and tok.tool_call_ids == frozenset()
    assert tok.token_bytes(1) == b"" and tok.token_bytes(tokens.index("Ġthe")) == b" the"


_ALPHABET = st.sampled_from(list("aZ é日本🙂'sdl9\n\t.,!?-ü") + ["  ", "'ll", "ß", "Ω", "١"])


@pytest.mark.real_model
@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHABET, max_size=20).map("".join))
def test_smollm2_matches_the_reference_bpe(smol, text):
    tok, _, ref = smol
    assert tok.encode(text) == ref.encode(text)


# SmolLM2's vocabulary has no token for 21 byte values: six C0 controls, bytes never in UTF-8,
# and the lead bytes 0xF1/0xF2 (planes 4-11, unassigned). llama.cpp drops such a byte (no merge
# crosses it) and keeps the rest of the character; so does the tokenizer. Every other text
# round-trips.
_UNENCODABLE = "\x04\x06\x13\x14\x16\x1d"
_ENCODABLE = st.characters(exclude_characters=_UNENCODABLE, exclude_categories=["Cs"]).filter(
    lambda c: not 0x40000 <= ord(c) < 0xC0000
)


@pytest.mark.real_model
def test_smollm2_drops_bytes_without_tokens_as_llama_cpp(smol):
    tok, tokens, _ = smol
    # llama.cpp's ids (llama_tokenize): "a", "b", the three continuation bytes of U+40000, "c"
    assert tok.encode("a\x04b\U00040000c") == [81, 82, 218, 218, 218, 83]
    assert tok.decode(tok.encode("x\x14\ud800y")) == "x\ufffdy"  # a lone surrogate is U+FFFD


@pytest.mark.real_model
@settings(max_examples=300, deadline=None)
@given(st.text(_ENCODABLE, max_size=60))
def test_smollm2_round_trip_and_token_bytes(smol, text):
    tok, _, _ = smol
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")


@pytest.mark.real_model
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 49151), max_size=12))
def test_smollm2_decode_is_joined_token_bytes(smol, ids):
    tok, _, _ = smol
    joined = b"".join(tok.token_bytes(i) for i in ids)
    assert tok.decode(ids) == joined.decode("utf-8", errors="replace")


def test_sentencepiece_continuation_has_no_space_prefix(tmp_path):
    """Raw completion's later messages go on from the text before them: no "▁" put in front."""
    from turbospark_app.chat.api import ChatMessage
    from turbospark_app.chat.prompt import PromptBuilder

    tok = spm_tok(tmp_path)
    sid = SPM_TOKENS.index
    assert tok.encode(" hello") == [sid("▁"), sid("▁hello")]  # a whole text: the prefix is added
    assert tok.encode_continuation(" hello") == [sid("▁hello")]
    assert tok.encode_continuation("hello") == [sid("h"), sid("el"), sid("lo")]
    assert tok.encode("hello") == [sid("▁hello")]  # the prefix-free copy left `encode` alone
    messages = [ChatMessage("user", "hello"), ChatMessage("assistant", "w", (sid("w"),)),
                ChatMessage("user", " hello")]
    ids = PromptBuilder(None, tok, 100).raw_conversation_ids(messages)
    assert ids == [1, sid("▁hello"), sid("w"), sid("▁hello")]
    assert tok.decode(ids) == "hellow hello"  # what the user typed, concatenated


def test_byte_level_continuation_is_plain_encode(tmp_path):
    tok = gpt2_tok(tmp_path)
    assert tok.encode_continuation(" the") == tok.encode(" the") == [tid("Ġthe")]
