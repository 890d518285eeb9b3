"""End of generation per family: which ids end a reply (llama.cpp's rules by token text),
and that the engine's TokenSink stops on every one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ByteTokenizer

from tiny_gguf import write_tokenizer_gguf
from turbospark_app.engine import GenerationConfig, StopReason, TokenSink
from turbospark_app.model.text.tokenizer import GGUFTokenizer

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
SPM_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def spm_family(tmp_path: Path, specials: list[tuple[str, int]], ids: dict[str, str],
               **kw) -> tuple[GGUFTokenizer, dict[str, int]]:
    """A SentencePiece vocabulary: `specials` (text, type) first, then bytes and a few pieces;
    `ids` names the metadata ids by token text."""
    pieces = ["▁", "a", "b", "▁a"]
    tokens = [t for t, _ in specials] + SPM_BYTES + pieces
    types = [k for _, k in specials] + [BYTE] * 256 + [NORMAL] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-10.0, -11.0, -12.0, -1.0]
    at = {t: i for i, t in enumerate(tokens)}
    path = write_tokenizer_gguf(tmp_path / "f.gguf", model="llama", tokens=tokens, types=types,
                                scores=scores, ids={k: at[v] for k, v in ids.items()}, **kw)
    return GGUFTokenizer.from_gguf(path, use_cache=False), at


def bpe_family(tmp_path: Path, specials: list[tuple[str, int]], ids: dict[str, str],
               pre: str = "qwen2", **kw) -> tuple[GGUFTokenizer, dict[str, int]]:
    from test_tokenizer import gpt2_byte_chars

    tokens = [t for t, _ in specials] + gpt2_byte_chars()
    types = [k for _, k in specials] + [NORMAL] * 256
    at = {t: i for i, t in enumerate(tokens)}
    path = write_tokenizer_gguf(tmp_path / "b.gguf", model="gpt2", pre=pre, tokens=tokens, types=types,
                                merges=[], ids={k: at[v] for k, v in ids.items()}, **kw)
    return GGUFTokenizer.from_gguf(path, use_cache=False), at


def test_gemma_ends_on_eos_and_end_of_turn_and_needs_bos(tmp_path):
    tok, at = spm_family(tmp_path, [("<pad>", CONTROL), ("<eos>", CONTROL), ("<bos>", CONTROL),
                                    ("<unk>", UNKNOWN), ("<start_of_turn>", USER_DEFINED),
                                    ("<end_of_turn>", USER_DEFINED)],
                         {"bos": "<bos>", "eos": "<eos>", "unknown": "<unk>"},
                         add_bos=True, add_space_prefix=False)
    assert tok.eog_ids == {at["<eos>"], at["<end_of_turn>"]}
    assert tok.eos_ids == {at["<eos>"]} and tok.end_of_turn_ids == {at["<end_of_turn>"]}
    assert tok.eot_id == at["<end_of_turn>"]
    # <end_of_turn> is user-defined in the file, control by llama.cpp's rule: it prints nothing.
    assert tok.token_bytes(at["<end_of_turn>"]) == b""
    assert tok.encode_prompt("<start_of_turn>a")[:2] == [at["<bos>"], at["<start_of_turn>"]]


def test_phi3_ends_on_end_endoftext_and_eos(tmp_path):
    tok, at = spm_family(tmp_path, [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL),
                                    ("<|endoftext|>", CONTROL), ("<|assistant|>", CONTROL),
                                    ("<|end|>", CONTROL), ("<|user|>", CONTROL)],
                         {"bos": "<s>", "eos": "<|endoftext|>"})
    assert tok.eog_ids == {at["</s>"], at["<|endoftext|>"], at["<|end|>"]}
    assert tok.end_of_turn_ids == {at["<|end|>"]} and tok.eot_id == at["<|end|>"]
    assert tok.add_bos  # no add_bos_token key: SentencePiece's default


@pytest.mark.parametrize(("specials", "ids", "eos", "turn", "eot"), [
    # Qwen3: eos_token_id is <|im_end|>; <|endoftext|> ends too.
    (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"], {"eos": "<|im_end|>"},
     ["<|endoftext|>"], ["<|im_end|>"], "<|im_end|>"),
    # Granite 3: one token ends the text and the turn.
    (["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"],
     {"eos": "<|end_of_text|>", "bos": "<|end_of_text|>"}, ["<|end_of_text|>"], [], "<|end_of_text|>"),
    # Llama 3: the file's eot_token_id wins over the text pick; <|eom_id|> ends too.
    (["<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
     {"eos": "<|end_of_text|>", "eot": "<|eom_id|>"}, ["<|end_of_text|>"],
     ["<|eom_id|>", "<|eot_id|>"], "<|eom_id|>"),
    # SmolLM3 / OLMo 2 style ChatML + <|endoftext|>
    (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], {"eos": "<|endoftext|>"},
     ["<|endoftext|>"], ["<|im_end|>"], "<|im_end|>"),
    # gpt-oss: with <|return|> and <|call|>, <|end|> only ends a message.
    (["<|endoftext|>", "<|return|>", "<|call|>", "<|end|>", "<|start|>"], {"eos": "<|return|>"},
     ["<|endoftext|>"], ["<|return|>", "<|call|>"], "<|end|>"),
])
def test_bpe_families_end_of_generation(tmp_path, specials, ids, eos, turn, eot):
    tok, at = bpe_family(tmp_path, [(t, CONTROL) for t in specials], ids)
    assert tok.eos_ids == {at[t] for t in eos}
    assert tok.end_of_turn_ids == {at[t] for t in turn}
    assert tok.eog_ids == tok.eos_ids | tok.end_of_turn_ids
    assert tok.eot_id == at[eot]


def test_gpt_oss_end_is_printed_text_and_not_a_stop(tmp_path):
    tok, at = bpe_family(tmp_path, [("<|return|>", CONTROL), ("<|call|>", CONTROL),
                                    ("<|end|>", CONTROL)], {"eos": "<|return|>"})
    assert at["<|end|>"] not in tok.eog_ids
    assert tok.token_bytes(at["<|end|>"]) == b"<|end|>"  # llama.cpp makes it user-defined


def test_control_looking_normal_token_is_promoted(tmp_path):
    tok, at = bpe_family(tmp_path, [("<|endoftext|>", CONTROL), ("<|im_end|>", NORMAL)],
                         {"eos": "<|endoftext|>"})
    assert at["<|im_end|>"] in tok.end_of_turn_ids
    assert tok.token_bytes(at["<|im_end|>"]) == b""
    assert tok.encode("a<|im_end|>") == [at["a"], at["<|im_end|>"]]


def sink(tok: object) -> TokenSink:
    return TokenSink(tok, GenerationConfig(max_new_tokens=50), [])  # type: ignore[arg-type]


def test_token_sink_stops_on_every_eog_id_of_a_real_tokenizer(tmp_path):
    tok, at = spm_family(tmp_path, [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL),
                                    ("<|endoftext|>", CONTROL), ("<|end|>", CONTROL)],
                         {"bos": "<s>", "eos": "<|endoftext|>"})
    reasons = {}
    for stop in sorted(tok.eog_ids):
        s = sink(tok)
        assert s.commit(at["a"]).stop is None
        reasons[tok.id_to_token(stop)] = s.commit(stop).stop
    assert reasons == {"</s>": StopReason.EOS, "<|endoftext|>": StopReason.EOS,
                       "<|end|>": StopReason.END_OF_TURN}


class _ExtraEog(ByteTokenizer):
    """A tokenizer whose end-of-generation set has an id in neither eos_ids nor end_of_turn_ids."""

    EXTRA = 65  # "A"

    @property
    def eog_ids(self) -> frozenset[int]:
        return frozenset({self.END_OF_TURN, self.EOS, self.EXTRA})


def test_token_sink_stops_on_an_eog_id_outside_the_stop_reason_sets():
    s = sink(_ExtraEog())
    assert s.commit(ord("x")).stop is None
    step = s.commit(_ExtraEog.EXTRA)
    assert step.stop is StopReason.END_OF_TURN and not step.events
