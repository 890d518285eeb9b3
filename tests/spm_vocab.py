"""A synthetic but non-trivial SentencePiece (`llama`) vocabulary for the llama.cpp comparison
tests (not imported by the app): pieces trained here by BPE on the tests' corpus, scored as a
SentencePiece BPE model scores them (later merges lower), with the 256 byte tokens, control,
unknown, user-defined (converter style "  " and old style "▁▁") and unused tokens, and some
characters that only occur inside longer pieces (llama.cpp still merges through them)."""

from __future__ import annotations

import collections
import random
from pathlib import Path

from llama_cpp_ref import CORPUS
from tiny_gguf import write_tokenizer_gguf

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
CONTROLS = ["<s>", "</s>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>", "<|system|>"]
USER = ["<tool_call>", "</tool_call>", "  ", "▁▁", "\t\t", "ab c"]


def _train(text: str, n_merges: int) -> tuple[list[str], list[str]]:
    """Characters in order of appearance, and BPE merges (most frequent pair first)."""
    words = collections.Counter("▁" + w for w in text.replace("\n", " \n ").split(" ") if w)
    seqs = {w: list(w) for w in words}
    chars = list(dict.fromkeys(c for w in words for c in w))
    merged: list[str] = []
    for _ in range(n_merges):
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for w, seq in seqs.items():
            for pair in zip(seq, seq[1:]):
                pairs[pair] += words[w]
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged.append(a + b)
        for w, seq in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if seq[i:i + 2] == [a, b]:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
    return chars, merged


def spm_vocab(seed: int = 0) -> tuple[list[str], list[int], list[float]]:
    """(tokens, types, scores): <unk>, controls, bytes, pieces, user-defined, unused."""
    chars, merged = _train("\n".join(CORPUS), 700)
    rng = random.Random(seed)
    singles = [c for c in chars if c != "\n" and rng.random() > 0.15]  # others: inside pieces only
    tokens = ["<unk>", *CONTROLS, *[f"<0x{b:02X}>" for b in range(256)]]
    types = [UNKNOWN, *[CONTROL] * len(CONTROLS), *[BYTE] * 256]
    scores = [0.0] * len(tokens)
    # (llama.cpp reads a token's text up to a NUL: a piece with one would clash with another)
    pieces = list(dict.fromkeys(p for p in singles + merged
                                if p not in tokens and p not in USER and "\x00" not in p))
    for rank, piece in enumerate(pieces):
        tokens.append(piece)
        types.append(NORMAL)
        scores.append(-float(rank) if len(piece) > 1 else -1e6 - rank)
    for text in USER:
        tokens.append(text)
        types.append(USER_DEFINED)
        scores.append(-1000.0)
    tokens.append("<unused0>")
    types.append(UNUSED)
    scores.append(-1000.0)
    return tokens, types, scores


def write_spm(path: Path, **kw) -> Path:
    """The vocabulary as a GGUF; `kw`: write_tokenizer_gguf's (add_space_prefix, name, ...)."""
    tokens, types, scores = spm_vocab()
    return write_tokenizer_gguf(path, model="llama", tokens=tokens, types=types, scores=scores,
                                ids={"bos": 1, "eos": 2, "unknown": 0}, **kw)
