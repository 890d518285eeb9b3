"""Special tokens out of a text before the tokenizer model sees it: llama.cpp's
`tokenizer_st_partition` (src/llama-vocab.cpp), done the same way.

Each special token (control, unknown and user-defined ones; control and unknown ones only when
special tokens are parsed) is taken out of every text fragment in turn, the longest text first
(in bytes; ties in id order). This is not `tokenizers`' leftmost-longest match: with "xyq" and
"yqzw" as tokens, "xyqzw" is "x" + "yqzw" here, as in llama.cpp. A token with `rstrip` (Phi-3)
drops the ASCII whitespace (C `isspace`) after it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .vocab_rules import CONTROL, UNKNOWN, USER_DEFINED

__all__ = ["Fragment", "SpecialSplitter"]

Fragment = str | int  # a text fragment, or a special token's id
_ASCII_SPACE = " \t\n\v\f\r"
_FEW = 64  # up to this many special tokens, each is searched for in the whole text


class SpecialSplitter:
    """Splits text into text fragments and special-token ids."""

    def __init__(self, tokens: Sequence[str], types: Sequence[int], rstrip_ids: Collection[int]) -> None:
        specials = [(text, i) for i, (text, kind) in enumerate(zip(tokens, types, strict=True))
                    if kind in (CONTROL, UNKNOWN, USER_DEFINED) and text]
        specials.sort(key=lambda item: -len(item[0].encode("utf-8")))
        self._order = [(text, i, types[i] == USER_DEFINED, i in rstrip_ids) for text, i in specials]
        # Candidates by their first two characters: a long vocabulary's thousands of specials
        # ("<unused42>") need not each be searched for in every text.
        self._by_start: dict[str, list[int]] = {}
        for k, (text, *_rest) in enumerate(self._order):
            self._by_start.setdefault(text[:2], []).append(k)

    def _candidates(self, text: str, parse_special: bool) -> list[int]:
        if len(self._order) <= _FEW:
            found = list(range(len(self._order)))
        else:
            starts = {text[k:k + 2] for k in range(len(text))} | set(text)
            found = sorted(k for start in starts for k in self._by_start.get(start, ()))
        return [k for k in found if (parse_special or self._order[k][2]) and self._order[k][0] in text]

    def split(self, text: str, *, parse_special: bool) -> list[Fragment]:
        """`text` as fragments and special-token ids, in order (empty fragments left out)."""
        fragments: list[Fragment] = [text] if text else []
        if not self._order or not text:
            return fragments
        for k in self._candidates(text, parse_special):
            needle, token, _user, rstrip = self._order[k]
            out: list[Fragment] = []
            for fragment in fragments:
                if isinstance(fragment, int) or needle not in fragment:
                    out.append(fragment)
                    continue
                start = 0
                while (at := fragment.find(needle, start)) >= 0:
                    if at > start:
                        out.append(fragment[start:at])
                    out.append(token)
                    start = at + len(needle)
                    if rstrip:
                        while start < len(fragment) and fragment[start] in _ASCII_SPACE:
                            start += 1
                if start < len(fragment):
                    out.append(fragment[start:])
            fragments = out
        return fragments
