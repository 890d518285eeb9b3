"""GGUFTokenizer against llama.cpp itself, byte-level BPE (`gpt2` vocabularies): for every
pre-tokenizer name in `vocab_rules.SUPPORTED_PRE`, `encode` (special tokens parsed or not),
`encode_prompt`, `encode_continuation`, `token_bytes` of every id and `decode` give what
llama.cpp gives (`llama_tokenize(add_special=False)`, `llama_token_to_piece(special=False)`),
and so do the token types and the end-of-generation set (`llama_vocab_is_eog`).

Here the default model's real vocabulary (SmolLM2, 49,152 tokens and merges) re-written into a
vocabulary-only GGUF under one name of each family (the names of a family share one rule
object; every name against llama.cpp: tests/test_tokenizer_llama_cpp_names.py): real merges for
every regex. The SentencePiece side is tests/test_tokenizer_llama_cpp_spm.py; llama.cpp's own
tokenizer (the fallback) and `load_tokenizer` tests/test_tokenizer_llama_cpp_fallback.py.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_cpp_ref import (
    assert_agrees,
    assert_encodes_alike,
    assert_same_rules,
    any_text,
    corpus_with_specials,
    ll_pieces,
    needs_llama_cpp,
    open_vocab,
)
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.gguf.header import read_header
from turbospark_app.model.text.tokenizer import GGUFTokenizer, TokenizerSpec, build_hf_tokenizer
from turbospark_app.model.text.vocab_rules import PRE_TOKENIZERS, SUPPORTED_PRE, default_add_bos

pytestmark = needs_llama_cpp

# One name per family (the names of a family share one rule object).
FAMILIES = list({id(PRE_TOKENIZERS[name]): name for name in reversed(SUPPORTED_PRE)}.values())


_NAME_SLOT = "#" * 24  # a pre name written once, then swapped per family in the file's bytes


def renamed(template: bytes, pre: str) -> bytes:
    """The vocabulary-only GGUF `template` with `_NAME_SLOT` as tokenizer.ggml.pre, under `pre`
    (a GGUF string is its uint64 length and bytes; nothing after it is addressed by offset)."""
    slot = struct.pack("<Q", len(_NAME_SLOT)) + _NAME_SLOT.encode()
    assert template.count(slot) == 1
    return template.replace(slot, struct.pack("<Q", len(pre)) + pre.encode())


@pytest.fixture(scope="module")
def smol(default_model_path, tmp_path_factory):
    """pre name -> (GGUFTokenizer, llama.cpp vocabulary, llama.cpp's pieces) of SmolLM2's real
    vocabulary re-written under that name ("smollm": the shipped GGUF itself)."""
    header = read_header(default_model_path)
    spec = TokenizerSpec.from_reader(header)
    base = tmp_path_factory.mktemp("smol")
    template = write_tokenizer_gguf(base / "template.gguf", model="gpt2", pre=_NAME_SLOT,
                                    tokens=spec.tokens, types=spec.token_types,
                                    merges=spec.merges, ids={"bos": 1, "eos": 2}).read_bytes()
    made: dict[str, tuple[GGUFTokenizer, Any, list[bytes]]] = {}

    def get(pre: str) -> tuple[GGUFTokenizer, Any, list[bytes]]:
        if pre not in made:
            path = default_model_path
            if pre != spec.pre:
                path = base / f"{pre}.gguf"
                path.write_bytes(renamed(template, pre))
            # The file's spec under the family's name, without walking its header again
            named = dataclasses.replace(spec, pre=pre, add_bos=default_add_bos("gpt2", pre))
            model = open_vocab(path, header)
            assert model.meta("tokenizer.ggml.pre") == pre
            pieces = made[spec.pre][2] if spec.pre in made else ll_pieces(model)
            made[pre] = (GGUFTokenizer(build_hf_tokenizer(named), named), model, pieces)
        return made[pre]
    get(spec.pre)
    return get


@pytest.mark.real_model
@pytest.mark.parametrize("pre", FAMILIES)
def test_real_vocabulary_agrees_on_the_corpus(smol, pre):
    tok, model, pieces = smol(pre)
    assert_agrees(tok, model, corpus_with_specials(), pieces)
    assert_same_rules(tok, model)
    assert tok.eog_ids == {0, 2, 4}  # <|endoftext|>, <|im_end|> and the FIM repo token <reponame>


@pytest.mark.real_model
@settings(max_examples=300, deadline=None)
@given(any_text(), st.sampled_from(FAMILIES))
def test_real_vocabulary_agrees_on_any_text(smol, text, pre):
    tok, model, _ = smol(pre)
    assert_encodes_alike(tok, model, text)
    assert tok.encode_continuation(text) == tok.encode(text)


@pytest.mark.real_model
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 49151), max_size=16))
def test_real_vocabulary_decodes_any_ids_as_llama_cpp_pieces(smol, ids):
    tok, _, pieces = smol("smollm")
    joined = b"".join(pieces[i] for i in ids)
    assert tok.decode(ids) == joined.decode("utf-8", errors="replace")


@pytest.mark.real_model
def test_the_shipped_file_reads_as_the_rewritten_ones(smol, default_model_path):
    """GGUFTokenizer.from_gguf on the default model's own file: the spec the fixture reuses."""
    tok = GGUFTokenizer.from_gguf(default_model_path, use_cache=False)
    ours, model, _ = smol("smollm")
    assert tok.spec == ours.spec
    assert_encodes_alike(tok, model, corpus_with_specials(seed=2)[-5])
