"""An image attached in the window, on the real default model with its synthetic projector
(benchmarks/synthetic_mmproj.py): the reply streams, its figures say the image's tokens and
encode time, the parts are stored; after a restart (a new window, the model loaded again: the
KV is gone) the image is read back from its content-addressed file and encoded again with the
same id, and the turn after that re-reads at most 2 tokens more than the same conversation
without the image: the message is rendered from its stored parts the same way every time."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_fakes import send, wait_idle
from vision_assets import png, vision_pair

from turbospark_app.conversations.parts import IMAGE

pytestmark = [pytest.mark.real_model]
ASK = "Describe this image."


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Path:
    return vision_pair(tmp_path_factory.mktemp("vlm"), default_model_path)


def loader(model: Path):
    from turbospark_app.chat.backend import load_backend

    return lambda: load_backend(model, session_slots=2, max_context=1024)


def one_turn(qtbot, pane, text: str):
    send(qtbot, pane, text)
    wait_idle(qtbot, pane, timeout=120000)
    return pane.tree.path[-1]


def test_an_image_turn_in_the_window_and_its_reuse_after_a_restart(ui, qtbot, tmp_path: Path, pair: Path) -> None:
    w = ui.window(factory=loader(pair), slots=2)
    assert w.bridge.model_info["vision"] is True
    with_image = w.area.current_pane()
    assert with_image.image_button.isEnabled()
    with_image.apply_settings({"max_new_tokens": 8, "temperature": 0.0}, None)
    (tmp_path / "a.png").write_bytes(png(48, 40))
    with_image.add_files([tmp_path / "a.png"])
    qtbot.waitUntil(lambda: with_image.attach_tray.items()[0].state == "ready", timeout=10000)
    reply = one_turn(qtbot, with_image, ASK)
    assert reply.stop_reason in ("max_tokens", "end_of_turn") and reply.content
    assert reply.stats["image_tokens"] == 4 and reply.stats["image_encode_seconds"] > 0
    assert "image: 4 tok, encoded in" in with_image.transcript.entries[-1].footer
    user = with_image.tree.path[0]
    assert [p.kind for p in user.parts] == [IMAGE]
    text_only = w.new_conversation()
    text_only.apply_settings({"max_new_tokens": 8, "temperature": 0.0}, None)
    plain = one_turn(qtbot, text_only, ASK)
    # The image's 4 cells are in the first prompt.
    assert reply.stats["prompt_tokens"] == plain.stats["prompt_tokens"] + 4
    ids = with_image.conversation_id, text_only.conversation_id
    ui.close(w)

    w2 = ui.window(factory=loader(pair), slots=2)
    rereads = []
    for cid in ids:
        pane = w2.area.open(cid)
        second = one_turn(qtbot, pane, "And the colours?")
        assert second.role == "assistant" and second.stats["reused_prefix_tokens"] == 0  # a fresh KV
        third = one_turn(qtbot, pane, "Anything else?")
        assert len(pane.tree.path) == 6
        rereads.append(third.stats["prompt_tokens"] - third.stats["reused_prefix_tokens"])
        if cid == ids[0]:  # the image came back from its file, with the same id
            assert second.stats["image_tokens"] == 4 and third.stats["image_tokens"] == 0
    assert rereads[0] <= rereads[1] + 2, rereads
    assert w2.area.open(ids[0]).transcript.entries[0].media[0].kind == "image"
