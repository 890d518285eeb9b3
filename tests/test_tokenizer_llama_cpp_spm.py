"""GGUFTokenizer against llama.cpp itself: SentencePiece vocabularies (with and without
`add_space_prefix`, byte fallback, user-defined and control tokens, Phi-3's rstrip; built by
tests/spm_vocab.py), and the end-of-generation rules per family (`vocab_rules.special_ids`
against `llama_vocab_is_eog` and llama.cpp's token attributes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_cpp_ref import (
    any_text,
    assert_agrees,
    assert_encodes_alike,
    assert_same_rules,
    corpus_with_specials,
    ll_encode,
    ll_eog,
    needs_llama_cpp,
    open_vocab,
)
from spm_vocab import CONTROLS, USER, write_spm
from test_tokenizer import gpt2_byte_chars
from tiny_gguf import write_tokenizer_gguf
from turbospark_app.model.text.tokenizer import GGUFTokenizer

pytestmark = needs_llama_cpp

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
VARIANTS = {  # name -> write_spm keywords
    "prefix": {},  # no add_space_prefix key: llama.cpp's SentencePiece default, true
    "no-prefix": {"add_space_prefix": False},  # Gemma's converter
    "phi-3": {"name": "Phi-3-mini-4k-instruct"},  # rstrip after special tokens
}
SPM_TEXTS = ["hello  world", "  two", "a\tb\t\tc", "<tool_call>{}</tool_call>", "ab c ab  c",
             "<|user|>\n hi <|end|>\n\n<|assistant|>", "▁▁x▁", "<unused0> <0x41> <unk>"]


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    base = tmp_path_factory.mktemp("spm")
    made = {}
    for name, kw in VARIANTS.items():
        path = write_spm(base / f"{name}.gguf", **kw)
        made[name] = (GGUFTokenizer.from_gguf(path, use_cache=False), open_vocab(path))
    return made


@pytest.mark.parametrize("variant", VARIANTS)
def test_sentencepiece_agrees_on_the_corpus(spm, variant):
    tok, model = spm[variant]
    assert_agrees(tok, model, corpus_with_specials() + SPM_TEXTS)
    assert_same_rules(tok, model)


def test_the_vocabulary_is_not_trivial(spm):
    """Merges through characters that are no token themselves, byte fallback and space prefix
    all happen on the corpus: the comparison above exercises them."""
    tok, model = spm["prefix"]
    tokens = tok.spec.tokens
    ids = [i for text in corpus_with_specials() for i in ll_encode(model, text, True)]
    assert any(tokens[i].startswith("<0x") for i in ids)  # byte fallback
    inside_only = {c for t in tokens if len(t) > 1 for c in t} - set(tokens)
    assert any(set(tokens[i]) & inside_only for i in ids if len(tokens[i]) > 1)
    assert tok.spec.add_space_prefix and ll_encode(model, "x", False)[0] != ll_encode(
        spm["no-prefix"][1], "x", False)[0]
    phi3 = spm["phi-3"][0]
    assert phi3.rstrip_ids and phi3.token_to_id("<|endoftext|>") not in phi3.rstrip_ids


@settings(max_examples=400, deadline=None)
@given(any_text(extra=CONTROLS + USER + ["▁", "<0x0A>"]), st.sampled_from(sorted(VARIANTS)))
def test_sentencepiece_agrees_on_any_text(spm, text, variant):
    tok, model = spm[variant]
    assert_encodes_alike(tok, model, text)


def _first_special(tok: GGUFTokenizer, text: str) -> int:
    cuts = [text.find(t) for t in (*CONTROLS, "<unk>", *USER) if t in text]
    return min(cuts, default=len(text))


@settings(max_examples=200, deadline=None)
@given(any_text(extra=CONTROLS + USER))
def test_continuation_has_no_space_prefix_on_its_first_fragment(spm, text):
    """llama.cpp without the prefix (the same vocabulary, add_space_prefix false) on the text up
    to the first special token; from there llama.cpp as usual (a prefix after each special)."""
    tok, model = spm["prefix"]
    _, bare = spm["no-prefix"]
    cut = _first_special(tok, text)
    assert tok.encode_continuation(text) == ll_encode(bare, text[:cut], True) + ll_encode(
        model, text[cut:], True)


# --- end of generation and token types per family ------------------------------------------------


def _vocab(model: str, specials: list[tuple[str, int]]) -> tuple[list[str], list[int], dict]:
    if model == "llama":
        pieces = ["▁", "a", "b", "▁a"]
        tokens = [t for t, _ in specials] + [f"<0x{b:02X}>" for b in range(256)] + pieces
        types = [k for _, k in specials] + [BYTE] * 256 + [NORMAL] * len(pieces)
        scores = [0.0] * (len(tokens) - 4) + [-10.0, -11.0, -12.0, -1.0]
        return tokens, types, {"scores": scores}
    tokens = [t for t, _ in specials] + gpt2_byte_chars() + ["Ġa"]  # (llama.cpp needs a merge)
    return tokens, [k for _, k in specials] + [NORMAL] * 257, {"merges": ["Ġ a"]}


C, U = CONTROL, USER_DEFINED
FAMILIES = {  # name -> (model, specials, ids by text, write_tokenizer_gguf keywords)
    "gemma": ("llama", [("<pad>", C), ("<eos>", C), ("<bos>", C), ("<unk>", UNKNOWN),
                        ("<start_of_turn>", U), ("<end_of_turn>", U)],
              {"bos": "<bos>", "eos": "<eos>", "unknown": "<unk>"}, {"add_space_prefix": False}),
    "phi-3": ("llama", [("<unk>", UNKNOWN), ("<s>", C), ("</s>", C), ("<|endoftext|>", C),
                        ("<|assistant|>", C), ("<|end|>", C), ("<|user|>", C)],
              {"bos": "<s>", "eos": "<|endoftext|>"}, {"name": "Phi-3.5-mini-instruct"}),
    "qwen3": ("gpt2", [(t, C) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                                        "<|fim_prefix|>", "<|fim_pad|>", "<|repo_name|>",
                                        "<|file_sep|>")], {"eos": "<|im_end|>"}, {"pre": "qwen2"}),
    "granite": ("gpt2", [(t, C) for t in ("<|end_of_text|>", "<|start_of_role|>", "<|tool_call|>",
                                          "<fim_prefix>", "<fim_pad>")],
                {"eos": "<|end_of_text|>", "bos": "<|end_of_text|>"}, {"pre": "refact"}),
    "llama3": ("gpt2", [(t, C) for t in ("<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>",
                                         "<|eot_id|>", "<|python_tag|>")],
               {"eos": "<|end_of_text|>", "eot": "<|eom_id|>", "bos": "<|begin_of_text|>"},
               {"pre": "llama-bpe"}),
    "gpt-oss": ("gpt2", [(t, C) for t in ("<|endoftext|>", "<|return|>", "<|call|>", "<|end|>",
                                          "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>")],
                {"eos": "<|return|>"}, {"pre": "gpt-4o"}),
    "solar-open": ("gpt2", [(t, C) for t in ("<|endoftext|>", "<|calls|>", "<|flush|>", "<|end|>")],
                   {"eos": "<|endoftext|>"}, {"pre": "qwen2"}),
    "tool-response": ("gpt2", [(t, C) for t in ("<eos>", "<turn|>", "<|tool_response>", "</s>")],
                      {"eos": "<eos>"}, {"pre": "gpt-2"}),
    "plamo": ("gpt2", [("<|plamo:eos|>", C), ("</s>", C)], {"eos": "<|plamo:eos|>"}, {"pre": "gpt-2"}),
    "fim-ids": ("gpt2", [("<|endoftext|>", C), ("<fim-pad>", C), ("<my_pad>", C), ("<my_sep>", NORMAL)],
                {"eos": "<|endoftext|>"},
                {"pre": "gpt-2", "extra_ids": {"fim_pad_token_id": 2, "fim_sep_token_id": 3}}),
    "control-looking": ("gpt2", [("<|endoftext|>", C), ("<|im_end|>", NORMAL), ("<|eot_id|>", U),
                                 ("<EOT>", NORMAL), ("<reponame>", NORMAL)],
                        {"eos": "<|endoftext|>"}, {"pre": "smollm"}),
    "no-eos-key": ("gpt2", [(f"<s{i}>", C) for i in range(12)] + [("<unused0>", C), ("<odd>", 7),
                                                                    ("<gone>", UNUSED)], {}, {"pre": "gpt-2"}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_end_of_generation_and_token_types_as_llama_cpp(tmp_path, family):
    model_type, specials, ids, kw = FAMILIES[family]
    tokens, types, extra = _vocab(model_type, specials)
    at = {t: i for i, t in enumerate(tokens)}
    path = write_tokenizer_gguf(tmp_path / f"{family}.gguf", model=model_type, tokens=tokens,
                                types=types, ids={k: at[v] for k, v in ids.items()}, **extra, **kw)
    tok, model = GGUFTokenizer.from_gguf(path, use_cache=False), open_vocab(path)
    assert tok.eog_ids == ll_eog(model) and tok.eog_ids
    assert_same_rules(tok, model)
    text = " a".join(t for t, _ in specials) + " ab\n"
    assert_agrees(tok, model, [text, text.replace(" ", "")])
