"""prefill_chunk_spans: half-open spans covering [0, n) once, in order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turbospark_app.engine import prefill_chunk_spans


@pytest.mark.parametrize(
    ("n", "size", "spans"),
    [
        (0, 4, []),
        (1, 4, [(0, 1)]),
        (8, 4, [(0, 4), (4, 8)]),
        (10, 4, [(0, 4), (4, 8), (8, 10)]),
        (3, 1, [(0, 1), (1, 2), (2, 3)]),
        (5, 128, [(0, 5)]),
    ],
)
def test_examples(n: int, size: int, spans: list[tuple[int, int]]) -> None:
    assert prefill_chunk_spans(n, size) == spans


@pytest.mark.parametrize("size", [0, -1])
def test_chunk_size_below_one_is_rejected(size: int) -> None:
    with pytest.raises(ValueError, match="chunk size"):
        prefill_chunk_spans(10, size)


def test_negative_token_count_is_rejected() -> None:
    with pytest.raises(ValueError):
        prefill_chunk_spans(-1, 4)


@given(st.integers(0, 2000), st.integers(1, 300))
def test_spans_cover_every_index_once_in_order(n: int, size: int) -> None:
    spans = prefill_chunk_spans(n, size)
    covered = [i for start, end in spans for i in range(start, end)]
    assert covered == list(range(n))
    assert all(0 < end - start <= size for start, end in spans)
    # Only the last span may be short.
    assert all(end - start == size for start, end in spans[:-1])
