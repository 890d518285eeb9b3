"""llama.cpp's own tokenizer (`LlamaCppTokenizer`), the app's for every file llama.cpp loads
(`load_tokenizer`), with llama.cpp's end-of-generation ids split by stop reason; where the
`tokenizers` build (`GGUFTokenizer`) exists, the two agree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings

from llama_cpp_ref import (
    any_text,
    assert_agrees,
    corpus_with_specials,
    ll_encode,
    ll_eog,
    needs_llama_cpp,
    open_vocab,
)
from spm_vocab import CONTROLS, USER, write_spm
from test_tokenizer import gpt2_byte_chars
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.gguf.header import ModelFileError, read_header
from turbospark_app.model.llamacpp.vocab import LlamaCppTokenizer, llama_cpp_rules, load_tokenizer
from turbospark_app.model.text.tokenizer import GGUFTokenizer, TokenizerSpec

pytestmark = needs_llama_cpp

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


def fallback(path: Path) -> tuple[LlamaCppTokenizer, object]:
    model = open_vocab(path)
    return LlamaCppTokenizer(model, TokenizerSpec.from_reader(read_header(path), check=False)), model


# --- LlamaCppTokenizer --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_pair(default_model_path):
    tok, model = fallback(default_model_path)
    return tok, model, GGUFTokenizer.from_gguf(default_model_path, use_cache=False)


@pytest.mark.real_model
def test_fallback_on_the_default_model(smol_pair):
    tok, model, ours = smol_pair
    assert tok.kind == "llama.cpp" and ours.kind == "tokenizers"
    assert_agrees(tok, model, corpus_with_specials())  # token bytes of every id, decode, prompt
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.vocab_size) == (1, 2, False, 49152)
    assert tok.eog_ids == ll_eog(model) == {0, 2, 4}
    assert (tok.eos_ids, tok.end_of_turn_ids, tok.eot_id) == (ours.eos_ids, ours.end_of_turn_ids, 2)
    assert tok.encode("x\ud800y") == ours.encode("x\ud800y")  # a lone surrogate: one U+FFFD
    assert tok.encode_continuation(" the") == tok.encode(" the")  # byte-level: no space prefix
    assert tok.token_to_id("<|im_end|>") == 2 and tok.id_to_token(2) == "<|im_end|>"
    with pytest.raises(ValueError, match="out of range"):
        tok.token_bytes(49152)


@pytest.mark.real_model
@settings(max_examples=200, deadline=None)
@given(any_text())
def test_fallback_equals_the_tokenizers_build_where_that_is_exact(smol_pair, text):
    tok, _, ours = smol_pair
    ids = tok.encode(text)
    assert ids == ours.encode(text) and tok.encode(text, parse_special=False) == ours.encode(
        text, parse_special=False)
    assert tok.decode(ids) == ours.decode(ids)


@pytest.fixture(scope="module")
def spm_pair(tmp_path_factory):
    path = write_spm(tmp_path_factory.mktemp("spm") / "spm.gguf")
    tok, model = fallback(path)
    return tok, model, GGUFTokenizer.from_gguf(path, use_cache=False)


def test_fallback_on_sentencepiece(spm_pair):
    tok, model, ours = spm_pair
    assert_agrees(tok, model, corpus_with_specials())
    assert tok.add_bos and tok.encode_prompt("hello")[0] == tok.bos_id == 1  # SPM's default
    assert tok.decode(tok.encode("hello world")) == "hello world"  # the prefix space is dropped
    assert (tok.eos_ids, tok.end_of_turn_ids) == (ours.eos_ids, ours.end_of_turn_ids)
    assert tok.encode_continuation(" hello") != tok.encode(" hello")


@settings(max_examples=300, deadline=None)
@given(any_text(extra=CONTROLS + USER))
def test_fallback_continuation_has_no_space_prefix(spm_pair, text):
    """As GGUFTokenizer's (tested against llama.cpp without the prefix)."""
    tok, _, ours = spm_pair
    assert tok.encode_continuation(text) == ours.encode_continuation(text)


def test_sentencepiece_bytes_without_tokens_never_reach_llama_cpp(tmp_path):
    """llama.cpp's SentencePiece byte fallback throws on a byte without a token, and the
    process aborts; the tokenizer drops such characters (in a child: a failure must not take
    the test run down with it)."""
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(128)], "▁", "a", "▁a"]
    path = write_tokenizer_gguf(tmp_path / "ascii.gguf", model="llama", tokens=tokens,
                                types=[2, 3, 3, *[6] * 128, 1, 1, 1],
                                scores=[0.0] * 131 + [-1.0, -2.0, -0.5], ids={"bos": 1, "eos": 2})
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_tokenizer_llama_cpp_fallback import fallback
        tok, _ = fallback({str(path)!r})
        print(tok.encode("aéa🙂a"))
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = tokens.index
    assert done.stdout.strip() == str([ids("▁a"), ids("a"), ids("a")])


# --- load_tokenizer -----------------------------------------------------------------------------


def bpe_file(path: Path, pre: str, specials: list[tuple[str, int]] | None = None,
             merges: list[str] | None = None) -> Path:
    specials = specials or [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL),
                            ("<|im_end|>", CONTROL)]
    tokens = [t for t, _ in specials] + gpt2_byte_chars() + ["Ġt", "he", "Ġthe"]
    types = [k for _, k in specials] + [NORMAL] * 259
    return write_tokenizer_gguf(path, model="gpt2", pre=pre, tokens=tokens, types=types,
                                merges=merges or ["Ġ t", "h e", "Ġt he"], ids={"eos": 0})


@pytest.mark.real_model
def test_load_tokenizer_is_llama_cpps_and_agrees_with_the_tokenizers_build(default_model_path, isolated_dirs):
    header = read_header(default_model_path)
    model = open_vocab(default_model_path, header)
    tok = load_tokenizer(header, model)
    assert isinstance(tok, LlamaCppTokenizer) and tok.kind == "llama.cpp"
    assert tok.spec.merges == [] and tok.spec.scores == []  # llama.cpp has them: not read
    assert tok.eog_ids == ll_eog(model) and tok.end_of_turn_ids == {2, 4} and tok.eos_ids == {0}
    ours = GGUFTokenizer.from_gguf(default_model_path, use_cache=False)
    ours.adopt(llama_cpp_rules(model, ours.spec))
    assert tok.token_types == ours.token_types and tok.rstrip_ids == ours.rstrip_ids
    for text in corpus_with_specials():
        assert tok.encode(text) == ours.encode(text)
    assert not list((isolated_dirs["cache"] / "tokenizers").glob("*.json"))  # nothing on disk


@pytest.mark.parametrize("pre", ["deepseek-llm", "qwen35", "falcon"])
def test_a_pre_name_only_llama_cpp_knows_loads_with_its_tokenizer(tmp_path, isolated_dirs, pre):
    path = bpe_file(tmp_path / f"{pre}.gguf", pre)
    header = read_header(path)
    tok = load_tokenizer(header, open_vocab(path, header))
    assert isinstance(tok, LlamaCppTokenizer) and tok.kind == "llama.cpp"
    model = tok._model
    for text in corpus_with_specials():
        assert tok.encode(text) == ll_encode(model, text, True)
    assert tok.eog_ids == ll_eog(model) == {0, 2}
    assert (tok.eos_ids, tok.end_of_turn_ids) == ({0}, {2})


def test_an_unknown_pre_name_is_refused_by_llama_cpp_itself(tmp_path):
    """"some-new-pre" never reaches a tokenizer: llama.cpp does not load such a file, and
    says why."""
    path = bpe_file(tmp_path / "new.gguf", "some-new-pre")
    with pytest.raises(ModelFileError, match="unknown pre-tokenizer type: 'some-new-pre'"):
        open_vocab(path)


def test_metadata_the_tokenizers_build_refuses_loads_with_llama_cpp(tmp_path, isolated_dirs):
    path = bpe_file(tmp_path / "odd.gguf", "gpt-2", merges=["Ġ t", "h e", "Ġt he", "x yz"])
    with pytest.raises(Exception, match="refers to 'yz'"):
        GGUFTokenizer.from_gguf(path, use_cache=False)
    header = read_header(path)
    tok = load_tokenizer(header, open_vocab(path, header))
    assert tok.kind == "llama.cpp" and tok.decode(tok.encode(" the x")) == " the x"


def test_llama_cpp_answers_are_the_tokenizers(tmp_path, isolated_dirs):
    """Two fill-in-the-middle prefix candidates: llama.cpp makes the first it meets in a hash
    map a control token, the rules here (`vocab_rules`) the first of their list. The app's
    tokenizer is llama.cpp's; the `tokenizers` build follows it once it adopts its answers."""
    specials = [("<|endoftext|>", CONTROL), ("<fim_prefix>", NORMAL), ("<|fim_prefix|>", NORMAL),
                ("<PRE>", NORMAL)]
    path = bpe_file(tmp_path / "fim.gguf", "gpt-2", specials)
    header = read_header(path)
    model = open_vocab(path, header)
    tok = load_tokenizer(header, model)
    assert tok.token_types == llama_cpp_rules(model, tok.spec).token_types
    assert sum(tok.token_types[i] == CONTROL for i in (1, 2, 3)) == 1
    text = "a<fim_prefix>b<|fim_prefix|>c<PRE>d"
    assert tok.encode(text) == ll_encode(model, text, True)
    assert [tok.token_bytes(i) for i in (1, 2, 3)].count(b"") == 1
    ours = GGUFTokenizer.from_gguf(path, use_cache=False)
    ours.adopt(llama_cpp_rules(model, ours.spec))
    assert ours.token_types == tok.token_types and ours.encode(text) == tok.encode(text)
