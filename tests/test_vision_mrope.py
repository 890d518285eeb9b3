"""M-RoPE (Qwen-VL): an image advances the position by fewer than its cells. The arithmetic
(model/llamacpp/image_positions.py) against llama.cpp's rules, and the producer against
llama.cpp itself: the default model relabelled Qwen2-VL (the same weights, M-RoPE positions:
synthetic_mmproj.as_mrope_model) with a synthetic `qwen2vl_merger` projector; the reference is
libmtmd's own helper (`mtmd_helper_eval_chunks`) decoding the same prompt into another sequence:
the same next position and the same logits, then through trim, prefix reuse and a saved state."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from turbospark_app.media.images import decode_image
from turbospark_app.model.llamacpp.image_positions import mrope_positions, shift_of

from vision_assets import png, synthetic_mmproj

needs_mtmd = pytest.mark.real_model


# -- the arithmetic, by llama.cpp's rules (mtmd.cpp: decoder pos, n_pos) --------------------------

def test_mrope_rows_are_t_y_x_z_over_the_merged_grid() -> None:
    pos = mrope_positions(10, 4, 12)  # a 4 x 3 grid from position 10
    assert pos.shape == (4, 12) and pos.dtype == np.int32
    assert (pos[0] == 10).all()  # t: the image's first position, every row
    assert pos[1].tolist() == [10] * 4 + [11] * 4 + [12] * 4  # y: pos_0 + row
    assert pos[2].tolist() == [10, 11, 12, 13] * 3  # x: pos_0 + column
    assert (pos[3] == 0).all()
    with pytest.raises(ValueError):
        mrope_positions(0, 5, 12)


def test_the_shift_sums_positions_minus_cells_over_known_images() -> None:
    spans = {-5: SimpleNamespace(n_tokens=12, n_pos=4, nx=4), -9: SimpleNamespace(n_tokens=6, n_pos=3, nx=3)}
    ids = [1, 2, *[-5] + [-6] * 11, 7, *[-9] + [-8] * 5, 3]
    assert shift_of(ids, spans.get) == (4 - 12) + (3 - 6)
    assert shift_of(ids[:2], spans.get) == 0  # before the image
    assert shift_of(ids[:5], spans.get) is None  # cut inside it
    assert shift_of([1, -77, 2], spans.get) is None  # an image nobody knows


# -- the producer against libmtmd's helper -------------------------------------------------------

@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path):
    from turbospark_app.model.llamacpp.context import LlamaCppContext
    from turbospark_app.model.llamacpp.model import LlamaCppModel
    from turbospark_app.model.llamacpp.vision import Projector

    folder = tmp_path_factory.mktemp("mrope")
    path = synthetic_mmproj.as_mrope_model(default_model_path, folder / "qwen2vl-synthetic.gguf")
    mmproj = synthetic_mmproj.write_mmproj(folder / "mmproj-qwen2vl.gguf", 576, "qwen2vl_merger")
    model = LlamaCppModel.open(path)
    ctx = LlamaCppContext(model, n_ctx=512, n_seq_max=3, n_batch=256, threads=2)
    projector = Projector.open(model, mmproj, threads=2, n_batch=256)
    yield SimpleNamespace(model=model, ctx=ctx, projector=projector, path=path, mmproj=mmproj)
    projector.close()
    ctx.close()
    model.close()


def _prompt(q, image) -> tuple[list[int], object]:
    """The ids of "text <image> text" as libmtmd tokenizes it (its chunks, kept for the helper),
    each image chunk as our pseudo-ids."""
    from turbospark_app.model.llamacpp.vision import mtmd

    M = mtmd()
    marker = q.projector.marker.encode()
    text = b"Look: " + marker + b" What is it?"
    data = (ctypes.c_uint8 * len(image.rgb)).from_buffer_copy(image.rgb)
    bitmap = M.mtmd_bitmap_init(image.width, image.height, data)
    M.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
    chunks = M.mtmd_input_chunks_init()
    inp = M.mtmd_input_text(text, len(text), False, True)
    assert M.mtmd_tokenize(q.projector.handle, chunks, ctypes.byref(inp), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
    M.mtmd_bitmap_free(bitmap)
    pseudo = [t for t in q.projector.image_ids(image) if t < 0]
    ids: list[int] = []
    for k in range(M.mtmd_input_chunks_size(chunks)):
        chunk = M.mtmd_input_chunks_get(chunks, k)
        if M.mtmd_input_chunk_get_type(chunk) == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            ptr = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids.extend(int(ptr[i]) for i in range(n.value))
        else:
            ids.extend(pseudo)
    return ids, chunks


def _reference(q, chunks, seq: int) -> tuple[int, np.ndarray]:
    """libmtmd's helper decodes the chunks into `seq`: its next position and last logits
    (`seq` is left as the helper filled it)."""
    from turbospark_app.model.llamacpp.vision import mtmd

    M = mtmd()
    q.ctx.clear_seq(seq)
    new_n_past = ctypes.c_int32(0)
    assert M.mtmd_helper_eval_chunks(q.projector.handle, q.ctx.handle, chunks, 0, seq, q.ctx.n_batch, True,
                                     ctypes.byref(new_n_past)) == 0
    logits = q.ctx.logits(-1).copy()
    M.mtmd_input_chunks_free(chunks)
    return new_n_past.value, logits


def _close(a: np.ndarray, b: np.ndarray) -> None:
    assert int(np.argmax(a)) == int(np.argmax(b))
    np.testing.assert_allclose(a, b, atol=2e-3, rtol=1e-3)


@needs_mtmd
def test_an_mrope_image_advances_fewer_positions_than_cells_as_llama_cpp_does(qwen) -> None:
    from turbospark_app.model.llamacpp.producer import LlamaCppProducer
    from turbospark_app.model.llamacpp.vision import mtmd

    q = qwen
    assert q.projector.mrope and q.model.facts.description.startswith("qwen2vl")
    image = decode_image(png(48, 40, seed=2), name="grid.png")
    ids, chunks = _prompt(q, image)
    seg = q.projector.segment(next(t for t in ids if t < 0))
    assert (seg.n_tokens, seg.n_pos, seg.nx) == (12, 4, 4)  # 4 x 3 merged patches, max(4, 3) positions
    # Our rows' positions are libmtmd's own decoder positions for that chunk.
    M = mtmd()
    out = (M.mtmd_decoder_pos * seg.n_tokens)()
    M.mtmd_helper_image_get_decoder_pos(M.mtmd_input_chunk_get_tokens_image(seg.chunk), 7, out)
    ours = mrope_positions(7, seg.nx, seg.n_tokens)
    assert [[p.t for p in out], [p.y for p in out], [p.x for p in out]] == ours[:3].tolist()
    np.testing.assert_array_equal(q.projector.positions(seg, 7), ours)  # what the producer feeds
    assert seg.last_offset == 0  # every cell keeps section t = the first position

    p = LlamaCppProducer(q.ctx, 0, projector=q.projector)
    mine = np.zeros(q.ctx.n_vocab, np.float32)
    p.produce_chunk(ids, 0, mine)
    n_past, theirs = _reference(q, chunks, 1)
    assert p.kv_position == len(ids)  # cells
    assert n_past == len(ids) - (12 - 4)  # positions: the image took 4, not 12
    assert q.ctx.seq_pos_max(0) == q.ctx.seq_pos_max(1) == n_past - 1
    _close(mine, theirs)

    # The next tokens go at positions, one by one, as llama.cpp's sequence continues.
    after = np.zeros_like(mine)
    p.produce(42, len(ids), after)
    q.ctx.batch.fill_span([42], n_past, 1, "last")
    q.ctx.decode(q.ctx.batch)
    _close(after, q.ctx.logits(-1))
    p.reset()


@needs_mtmd
def test_trim_reuse_and_a_saved_state_keep_the_positions(qwen) -> None:
    from turbospark_app.model.llamacpp.producer import LlamaCppProducer

    q = qwen
    image = decode_image(png(64, 48, seed=5), name="other.png")
    ids, chunks = _prompt(q, image)
    n_past, reference = _reference(q, chunks, 2)
    # (Emptied again: with another sequence's cells among them, the re-fed tokens land in other
    # KV cells and llama.cpp's sums come out up to ~0.5 apart, images or not: not a position matter.)
    q.ctx.clear_seq(2)
    start = next(i for i, t in enumerate(ids) if t < 0)
    end = start + q.projector.segment(ids[start]).n_tokens
    p = LlamaCppProducer(q.ctx, 0, projector=q.projector)
    out = np.zeros(q.ctx.n_vocab, np.float32)
    p.produce_chunk(ids + [11, 12], 0, out)
    # Trim back to just after the image, then the same text again: the same logits as the helper.
    p.trim(end)
    assert q.ctx.seq_pos_max(0) == start  # section t of every image cell: its first position
    with pytest.raises(ValueError, match="inside an image"):
        p.trim(end - 3)
    p.produce_chunk(ids[end:], end, out)
    _close(out, reference)
    # Prefix reuse: a prompt that shares the image and then differs keeps the image, not after.
    assert p.try_reuse_prefix(ids[:end] + [99, 98, 97]) == end
    p.produce_chunk(ids[end:], end, out)
    _close(out, reference)
    # A saved state comes back into another sequence with its positions.
    blob = p.save_state()
    other = LlamaCppProducer(q.ctx, 1, projector=q.projector)
    assert other.restore_state(blob, p.mirror)
    a, b = np.zeros_like(out), np.zeros_like(out)
    p.produce(5, len(ids), a)
    other.produce(5, len(ids), b)
    _close(a, b)
    p.reset()
    other.reset()


@needs_mtmd
def test_a_qwen_vl_conversation_reuses_its_image_on_the_second_turn(qwen) -> None:
    from turbospark_app.chat.api import ChatMessage, TurnSettings, reply_token_ids
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.engine import GenerationConfig, TokenProgress
    from turbospark_app.engine.raw_completion import drive_raw_completion

    b = load_backend(qwen.path, session_slots=1, max_context=1024, mmproj=qwen.mmproj)
    try:
        assert b.has_vision and b.model_info()["vision_label"].startswith("yes (mmproj-qwen2vl.gguf, qwen2vl_merger")

        def run(session: str, messages: list[ChatMessage]):
            settings = TurnSettings(generation=GenerationConfig(max_new_tokens=8))
            ids: list[int] = []
            r = drive_raw_completion(b.stream_turn(b.prepare_turn(session, messages, settings), lambda: False),
                                     settings.generation.rate, lambda: False,
                                     lambda e: ids.append(e.id) if isinstance(e, TokenProgress) else None)
            return r, ids

        def two_turns(session: str, images: tuple) -> tuple[int, int]:
            first = [ChatMessage("user", "Describe this image.", images=images)]
            r1, ids1 = run(session, first)
            follow = [*first, ChatMessage("assistant", b.tokenizer.decode(ids1), reply_token_ids(r1.reason, ids1)),
                      ChatMessage("user", "And the colours?")]
            r2, _ = run(session, follow)
            return r2.prompt_tokens - r2.reused_prefix_tokens, r1.image_tokens

        image = decode_image(png(48, 40, seed=0), name="a.png")
        reread_image, image_tokens = two_turns("img", (image,))
        reread_text, _ = two_turns("txt", ())
        assert image_tokens == 12 and reread_image <= reread_text + 2
        again = run("img2", [ChatMessage("user", "Describe this image.", images=(image,))])[1]
        assert again == run("img3", [ChatMessage("user", "Describe this image.", images=(image,))])[1]
    finally:
        b.close()
