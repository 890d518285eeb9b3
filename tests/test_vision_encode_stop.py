"""Stop during an image's encode: the projector's graph callback (`cb_eval`,
model/llamacpp/encode_stop.py) polls the cancel predicate between graph nodes; a stopped encode's
rows are thrown away, the next encode of the same image gives the rows an unstopped one gives,
and a turn stopped inside the encode is CANCELLED with none of the image kept and says so in its
figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine import GenerationConfig, StopReason, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.media.images import decode_image

from vision_assets import png, synthetic_mmproj

needs_mtmd = pytest.mark.real_model


# -- the callback's rules, called as ggml calls it ----------------------------------------------

def test_the_gate_asks_for_nothing_unless_watching_then_every_nth_node() -> None:
    from turbospark_app.model.llamacpp.encode_stop import EncodeGate

    gate = EncodeGate(every=3)
    assert not gate.active
    # Not watching: no node is wanted (the graph computes in one range), nothing stops it.
    assert [gate._eval(None, True, None) for _ in range(6)] == [False] * 6
    assert gate._eval(None, False, None) is True
    polls = []

    def cancel() -> bool:
        polls.append(1)
        return len(polls) >= 2

    with gate.watching(cancel):
        assert gate.active
        asked = [gate._eval(None, True, None) for _ in range(6)]
        assert asked == [False, False, True, False, False, True]
        assert gate._eval(None, False, None) is True  # first look: go on
        assert gate._eval(None, False, None) is False  # second: stop (breaks the split)
        assert gate.stopped and gate.looks == 2
        # Stopped: every node of a later split is asked for, and refused after one.
        assert gate._eval(None, True, None) is True
        assert gate._eval(None, False, None) is False
        assert len(polls) == 2  # the predicate is not asked again once it said stop
    assert not gate.active and gate.stopped


def test_a_failing_predicate_stops_the_encode_instead_of_raising() -> None:
    from turbospark_app.model.llamacpp.encode_stop import EncodeGate

    gate = EncodeGate(every=1)

    def broken() -> bool:
        raise RuntimeError("boom")

    with gate.watching(broken):
        assert gate._eval(None, True, None) is True
        assert gate._eval(None, False, None) is False
    assert gate.stopped


# -- a real projector: a 512 px synthetic one (1,024 image tokens) over the default model ---------

@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path):
    from turbospark_app.model.llamacpp.model import LlamaCppModel
    from turbospark_app.model.llamacpp.vision import Projector

    folder = tmp_path_factory.mktemp("encode-stop")
    mmproj = synthetic_mmproj.write_mmproj(folder / "mmproj-512.gguf", 576, "mlp", image_size=512)
    model = LlamaCppModel.open(default_model_path)
    projector = Projector.open(model, mmproj, threads=2, n_batch=512)
    image = decode_image(png(512, 512, seed=3), name="big.png")
    ids = projector.image_ids(image)
    seg = projector.segment(next(i for i in ids if i < 0))
    yield projector, seg
    projector.close()
    model.close()


@needs_mtmd
def test_a_stopped_encode_gives_no_rows_and_the_next_encode_is_whole(big) -> None:
    projector, seg = big
    assert seg.n_tokens == 1024
    projector._embd.clear()
    full = projector.encode(seg, lambda: False)  # watched all the way: the same rows as unwatched
    looks_full = projector.last_encode.looks
    assert full is not None and looks_full >= 3
    projector._embd.clear()
    unwatched = projector.encode(seg)
    np.testing.assert_array_equal(full, unwatched)

    projector._embd.clear()
    calls = []
    stopped = projector.encode(seg, lambda: calls.append(1) or len(calls) >= 2)
    figures = projector.last_encode
    assert stopped is None and figures.stopped and not figures.cached
    assert figures.looks == 2 < looks_full  # it stopped at the second look, not at the end
    assert seg.key not in projector._embd  # half-computed rows are never kept
    again = projector.encode(seg)
    np.testing.assert_array_equal(again, unwatched)
    assert not projector.last_encode.stopped


# -- a whole turn: the default model and its 4-token synthetic projector --------------------------

@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path):
    from turbospark_app.chat.backend import load_backend

    folder = tmp_path_factory.mktemp("vlm-stop")
    model = folder / default_model_path.name
    model.symlink_to(default_model_path)
    synthetic_mmproj.write_mmproj(folder / "mmproj-synthetic.gguf", 576, "mlp", image_size=256)
    b = load_backend(model, session_slots=1, max_context=1024)
    yield b
    b.close()


@needs_mtmd
def test_stop_inside_the_encode_cancels_the_turn_and_keeps_none_of_the_image(backend) -> None:
    gate = backend.projector.gate
    image = decode_image(png(64, 48, seed=11), name="stop.png")
    messages = [ChatMessage("user", "What is this?", images=(image,))]
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=6))
    turn = backend.prepare_turn("enc-stop", messages, settings)
    start = next(i for i, t in enumerate(turn.prompt_ids) if t < 0)

    def cancel() -> bool:  # Stop pressed once the encode is under way
        return gate.active

    result = drive_raw_completion(backend.stream_turn(turn, cancel), settings.generation.rate,
                                  cancel, lambda e: None)
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 0
    assert result.image_encode_stopped and result.image_tokens == 0
    assert result.kv_position <= start
    assert backend.system_info()["last_turn"]["image_encode_stopped"] is True

    ids: list[int] = []
    turn = backend.prepare_turn("enc-stop", messages, settings)
    again = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                 lambda: False,
                                 lambda e: ids.append(e.id) if isinstance(e, TokenProgress) else None)
    assert again.reason is not StopReason.CANCELLED and not again.image_encode_stopped
    assert again.image_tokens == 256 and len(ids) > 0
    fresh: list[int] = []
    turn = backend.prepare_turn("enc-fresh", messages, settings)
    drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate, lambda: False,
                         lambda e: fresh.append(e.id) if isinstance(e, TokenProgress) else None)
    assert ids == fresh  # the stopped encode left nothing behind


def test_the_cli_figures_say_when_an_encode_was_stopped() -> None:
    from turbospark_app.cli.chat_command import summary_line
    from turbospark_app.engine.progress import RawDecodeResult

    result = RawDecodeResult(prompt_tokens=40, new_tokens=0, prefill_seconds=0.5, decode_seconds=0.0,
                             reason=StopReason.CANCELLED, kv_position=20)
    result.image_encode_seconds, result.image_encode_stopped = 1.25, True
    assert "image: encode stopped after 1.25 s" in summary_line(result, None)
    result.image_encode_stopped, result.image_tokens = False, 4
    assert "image: 4 tok, encoded in 1.25 s" in summary_line(result, None)
