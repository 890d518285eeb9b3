"""A prompt chunk and other streams' decode rows in ONE llama_decode (`produce_mixed`, continuous
batching), on the real default model: the same logits as feeding them apart, a Stop inside the
pass commits nothing for anyone, and bad parts are refused before llama.cpp sees them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from turbospark_app.chat.backend import load_backend
from turbospark_app.model.llamacpp.producer import LlamaCppProducer, produce_mixed

pytestmark = pytest.mark.real_model

STORY = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps "
         "out loud so the silence would not feel so heavy. ")
PROMPT = ("Item one costs seven coins, item two costs fourteen coins, item three costs twenty-one "
          "coins, and the merchant wrote every price on a slate beside the door. ")


@pytest.fixture(scope="module")
def backend(default_model_path: Path):
    b = load_backend(default_model_path, session_slots=3, max_context=2048, threads=2)
    yield b
    b.close()


def _ids(backend, text: str, n: int) -> list[int]:
    ids = backend.tokenizer.encode(text * 12)
    assert len(ids) >= n
    return ids[:n]


def _apart(backend, stream: list[int], prompt: list[int], chunks: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
    """The stream decodes token by token, the prompt goes in its own chunks: the reference."""
    a, b = LlamaCppProducer(backend.context, 0), LlamaCppProducer(backend.context, 1)
    out_a, out_b = np.empty(backend.vocab_size, np.float32), np.empty(backend.vocab_size, np.float32)
    a.produce_chunk(stream[:8], 0, None)
    rows, at = [], 0
    for i, size in enumerate(chunks):
        a.produce(stream[8 + i], 8 + i, out_a)
        rows.append(out_a.copy())
        b.produce_chunk(prompt[at: at + size], at, out_b if at + size == len(prompt) else None)
        at += size
    last = out_b.copy()
    a.reset(), b.reset()
    return rows, last


def _mixed(backend, stream: list[int], prompt: list[int], chunks: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
    """The same, the chunks going in the stream's passes (a third sequence decoding beside)."""
    a, b, c = (LlamaCppProducer(backend.context, s) for s in range(3))
    outs = [np.empty(backend.vocab_size, np.float32) for _ in range(3)]
    a.produce_chunk(stream[:8], 0, None)
    c.produce_chunk(stream[:8][::-1], 0, None)
    rows, at = [], 0
    for i, size in enumerate(chunks):
        span = prompt[at: at + size]
        out = outs[1] if at + size == len(prompt) else None
        assert produce_mixed([(a, stream[8 + i], 8 + i, outs[0]), (c, stream[i], 8 + i, outs[2])],
                             [(b, span, at, out)])
        rows.append(outs[0].copy())
        at += size
    assert b.mirror == tuple(prompt) and b.kv_position == len(prompt) == backend.context.seq_pos_max(1) + 1
    assert a.kv_position == 8 + len(chunks) and c.kv_position == 8 + len(chunks)
    assert a.mirror == tuple(stream[:8 + len(chunks)])
    for p in (a, b, c):
        p.reset()
    return rows, outs[1].copy()


def test_narrow_passes_give_exactly_what_each_gives_apart(backend) -> None:
    stream, prompt = _ids(backend, STORY, 40), _ids(backend, PROMPT, 90)
    chunks = [30, 40, 20]  # < 64 rows a pass: llama.cpp's row-by-row attention, as a lone decode row's
    rows_apart, last_apart = _apart(backend, stream, prompt, chunks)
    rows_mixed, last_mixed = _mixed(backend, stream, prompt, chunks)
    for x, y in zip(rows_apart, rows_mixed):
        assert np.array_equal(x, y)
    assert np.array_equal(last_apart, last_mixed)


def test_a_wide_pass_agrees_with_its_chunk_apart(backend) -> None:
    """From 64 rows llama.cpp's CPU attention is a tiled kernel (f32, the row-by-row one rounds
    the query to f16) whose sums run in tiles of 64 rows and 64 cells: the rows beside a wide
    chunk, and the chunk's own (its rows and cells fall in other tiles), move by up to ~1 logit
    of ~18 (measured 1.05 here), as in llama-server's own batches; every row keeps its top
    token. A row at a wrong place or sequence would be nowhere near."""
    stream, prompt = _ids(backend, STORY, 40), _ids(backend, PROMPT, 110)
    chunks = [30, 80]
    rows_apart, last_apart = _apart(backend, stream, prompt, chunks)
    rows_mixed, last_mixed = _mixed(backend, stream, prompt, chunks)
    assert np.array_equal(rows_apart[0], rows_mixed[0])
    assert rows_apart[1].argmax() == rows_mixed[1].argmax()
    assert last_apart.argmax() == last_mixed.argmax() and np.abs(last_apart - last_mixed).max() < 1.5
    assert np.abs(rows_apart[1] - rows_mixed[1]).max() < 1.5
    assert np.abs(rows_apart[1] - last_apart).max() > 5  # (what "nowhere near" looks like)


def test_stop_inside_a_mixed_pass_commits_nothing_for_anyone(backend) -> None:
    stream, prompt = _ids(backend, STORY, 20), _ids(backend, PROMPT, 120)
    a, b = LlamaCppProducer(backend.context, 0), LlamaCppProducer(backend.context, 1)
    out_a = np.empty(backend.vocab_size, np.float32)
    a.produce(stream[0], 0, out_a)
    before = out_a.copy()
    b.produce_chunk(prompt[:10], 0, None)
    polls = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) > 3  # a few graph nodes in

    assert not produce_mixed([(a, stream[1], 1, out_a)], [(b, prompt[10:110], 10, None)], lend=True, cancel=stop)
    assert len(polls) > 3
    assert a.kv_position == 1 and backend.context.seq_pos_max(0) == 0
    assert b.kv_position == 10 and backend.context.seq_pos_max(1) == 9
    assert np.array_equal(out_a, before)  # the stream's buffer still holds its last logits
    # both go on from where they were
    assert produce_mixed([(a, stream[1], 1, out_a)], [(b, prompt[10:30], 10, None)])
    assert a.kv_position == 2 and b.kv_position == 30
    a.reset(), b.reset()


def test_bad_parts_are_refused_and_nothing_is_fed(backend) -> None:
    a, b = LlamaCppProducer(backend.context, 0), LlamaCppProducer(backend.context, 1)
    out = np.empty(backend.vocab_size, np.float32)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        produce_mixed([(a, 1, 0, out)], [(b, [5, -7, 9], 0, None)])  # an image's pseudo-id
    with pytest.raises(ValueError, match="same sequence"):
        produce_mixed([(a, 1, 0, out)], [(a, [5, 6], 1, None)])
    with pytest.raises(ValueError, match="do not fit"):
        produce_mixed([(a, 1, 0, out)], [(b, [5] * backend.context.n_batch, 0, None)])
    with pytest.raises(ValueError, match="logits buffer"):
        produce_mixed([(a, 1, 0, np.empty(3, np.float32))], [(b, [5, 6], 0, None)])
    assert a.kv_position == b.kv_position == 0
    assert backend.context.seq_pos_max(0) == backend.context.seq_pos_max(1) == -1
