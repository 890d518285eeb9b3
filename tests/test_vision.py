"""Images in, through llama.cpp's libmtmd: the synthetic projector beside the default model,
pairing and refusals, the image's pseudo-ids in the token mirror (prefix reuse, a different
image invalidating, RAM parking), the non-causal path (a gemma3 projector), hostile images, the
CLI flag. The API's side is tests/test_vision_api.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turbospark_app.chat.api import ChatMessage, TurnSettings, reply_token_ids
from turbospark_app.engine import GenerationConfig, TokenProgress
from turbospark_app.engine.kv_prefix import media_span_end
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.media.images import ImageError, decode_data_url, decode_image
from turbospark_app.model.llamacpp.vision import VisionUnavailable, pseudo_ids

from vision_assets import animated_gif, huge_declared_png, mmproj_for, png, synthetic_mmproj

# `make test` builds llama-cpp-python with libmtmd (the Makefile checks it loads): no skip here.
needs_mtmd = pytest.mark.real_model


# -- no model -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "words"), [
    (png()[:200], "damaged or cut short"),
    (huge_declared_png(), "30,000 x 30,000"),
    (b"%PDF-1.4 this is not a picture at all", "not an image"),
    (animated_gif(), "animation (2 frames)"),
    (b"", "empty"),
    (b"\x00" * (21 << 20), "over 20 MiB"),
])
def test_hostile_images_are_clear_errors(data: bytes, words: str) -> None:
    with pytest.raises(ImageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        decode_image(data, name="x.png")


def test_a_png_decodes_to_its_rgb_and_its_sha256() -> None:
    import hashlib

    data = png(48, 40)
    img = decode_image(data)
    assert (img.width, img.height, len(img.rgb)) == (48, 40, 48 * 40 * 3)
    assert img.sha256 == hashlib.sha256(data).hexdigest()
    assert img.rgb[3:6] == bytes((5, 0, 0))  # pixel (1, 0) of the gradient
    big = decode_image(png(300, 100), max_side=150)
    assert (big.width, big.height) == (150, 50)


def test_data_urls_are_checked() -> None:
    import base64

    ok = decode_data_url("data:image/png;base64," + base64.b64encode(png()).decode())
    assert ok.width == 48
    with pytest.raises(ImageError, match="not valid base64"):
        decode_data_url("data:image/png;base64,@@@@")
    with pytest.raises(ImageError, match="data: URL"):
        decode_data_url("https://example.com/cat.png")
    with pytest.raises(ImageError, match="not an image"):  # 20 MB of base64 that is no picture
        decode_data_url("data:image/png;base64," + "A" * (20 << 20))


def test_a_span_never_cuts_an_image() -> None:
    ids = [5, 6, -9, -8, -7, 3]
    assert [media_span_end(ids, e) for e in range(7)] == [0, 1, 2, 5, 5, 5, 6]


def test_pseudo_ids_are_negative_and_depend_on_the_image() -> None:
    a, b = pseudo_ids("aa:0", 4), pseudo_ids("bb:0", 4)
    assert all(t < 0 for t in a + b) and a != b and a == pseudo_ids("aa:0", 4)


def test_prompt_lookup_never_drafts_an_image() -> None:
    from turbospark_app.engine.speculation import LookupSpeculation

    history = [1, 2, -5, -6, 3, 1, 2]
    drafter = LookupSpeculation().start(history)
    assert drafter.propose(history, 4) == ()


class _Template:
    def render(self, messages, add_generation_prompt=True, **extra):
        return "".join(f"<{m['role']}>{m['content']}|" for m in messages) + ("<assistant>" if add_generation_prompt else "")


class _Chars:
    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


class _Vision:
    marker = "<__media_test__>"

    def image_ids(self, image) -> list[int]:
        return [7, -1, -2, -3, 8] if image == "A" else [-9]


def test_images_take_the_place_of_their_markers_in_the_prompt() -> None:
    from turbospark_app.chat.prompt import build_prompt_ids
    from turbospark_app.engine.errors import EngineError

    messages = [ChatMessage("user", "hi", images=("A", "B")), ChatMessage("assistant", "ok", (111,)),
                ChatMessage("user", "x")]
    ids = build_prompt_ids(_Template(), _Chars(), messages, vision=_Vision())
    text = [ord(c) for c in "<user>"] + [7, -1, -2, -3, 8, -9] + [ord(c) for c in "hi|<assistant>"]
    assert ids[: len(text)] == text and 111 in ids
    with pytest.raises(EngineError, match="takes no images"):
        build_prompt_ids(_Template(), _Chars(), messages)
    with pytest.raises(EngineError, match="media marker"):
        build_prompt_ids(_Template(), _Chars(), [ChatMessage("user", "<__media_test__>", images=("A",))],
                         vision=_Vision())


def test_the_synthetic_projector_is_the_same_bytes_every_time(tmp_path: Path, default_model_path: Path) -> None:
    a = mmproj_for(default_model_path, tmp_path / "a.gguf")
    b = mmproj_for(default_model_path, tmp_path / "b.gguf")
    assert a.read_bytes() == b.read_bytes()
    from turbospark_app.model.llamacpp.vision import projector_width

    assert projector_width(a) == 576


# -- the default model + the synthetic mlp projector ----------------------------------------------

@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Path:
    """A folder holding the default model (a link) and its synthetic mmproj; the model's path."""
    folder = tmp_path_factory.mktemp("vlm")
    model = folder / default_model_path.name
    model.symlink_to(default_model_path)
    mmproj_for(default_model_path, folder / "mmproj-SmolLM2-135M-synthetic.gguf")
    return model


@pytest.fixture(scope="module")
def backend(pair: Path):
    from turbospark_app.chat.backend import load_backend

    b = load_backend(pair, session_slots=1, max_context=1024)
    yield b
    b.close()


def run(backend, session: str, messages: list[ChatMessage], max_new: int = 12):
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=max_new))
    turn = backend.prepare_turn(session, messages, settings)
    ids: list[int] = []

    def on(event) -> None:
        if isinstance(event, TokenProgress):
            ids.append(event.id)

    result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                  lambda: False, on)
    text = backend.tokenizer.decode(ids) if hasattr(backend.tokenizer, "decode") else ""
    return result, ids, text, turn


IMG_A = decode_image(png(48, 40, seed=0), name="a.png")
IMG_B = decode_image(png(48, 40, seed=7), name="b.png")
ASK = "Describe this image."


@needs_mtmd
def test_the_projector_beside_the_model_is_found(backend) -> None:
    info = backend.model_info()
    assert backend.has_vision and info["vision"] is True
    assert info["vision_label"].startswith("yes (mmproj-SmolLM2-135M-synthetic.gguf, mlp")


@needs_mtmd
def test_an_image_is_four_cells_and_the_reply_is_deterministic(backend) -> None:
    with_image = [ChatMessage("user", ASK, images=(IMG_A,))]
    r1, ids1, _, turn = run(backend, "det-1", with_image)
    r2, ids2, _, _ = run(backend, "det-2", with_image)  # another session: the slot starts over
    text_only = backend.prepare_turn("x", [ChatMessage("user", ASK)], TurnSettings())
    assert len(turn.prompt_ids) == len(text_only.prompt_ids) + 4
    assert sum(1 for t in turn.prompt_ids if t < 0) == 4
    assert ids1 == ids2 and len(ids1) > 0
    r3, ids3, _, _ = run(backend, "det-3", [ChatMessage("user", ASK, images=(IMG_B,))])
    assert ids3 != ids1, "a different picture should change the random projector's reply"


@needs_mtmd
def test_the_second_turn_rereads_only_the_new_text(backend) -> None:
    def two_turns(session: str, images: tuple) -> tuple[int, int]:
        first = [ChatMessage("user", ASK, images=images)]
        r1, ids1, _, _ = run(backend, session, first)
        text = backend.tokenizer.decode(ids1)
        follow = [*first, ChatMessage("assistant", text, reply_token_ids(r1.reason, ids1)),
                  ChatMessage("user", "And the colours?")]
        r2, _, _, _ = run(backend, session, follow)
        return r2.prompt_tokens - r2.reused_prefix_tokens, r2.reused_prefix_tokens

    reread_image, reused_image = two_turns("reuse-img", (IMG_A,))
    reread_text, _ = two_turns("reuse-txt", ())
    assert reread_image <= reread_text + 2
    assert reused_image > 4  # the image's cells were kept


@needs_mtmd
def test_a_different_image_at_the_same_place_invalidates_from_there(backend) -> None:
    r1, _, _, turn_a = run(backend, "swap", [ChatMessage("user", ASK, images=(IMG_A,))])
    start = next(i for i, t in enumerate(turn_a.prompt_ids) if t < 0)
    r2, _, _, _ = run(backend, "swap", [ChatMessage("user", ASK, images=(IMG_B,))])
    assert r2.reused_prefix_tokens == start


@needs_mtmd
def test_a_parked_conversation_comes_back_with_its_image(backend) -> None:
    """RAM parking (engine.state_cache): the conversation's KV goes to RAM when another takes
    the only slot; back, its second turn re-reads at most 2 tokens more than the same
    conversation without the image."""

    def parked_second_turn(session: str, images: tuple):
        first = [ChatMessage("user", ASK, images=images)]
        r1, ids1, _, _ = run(backend, session, first)
        run(backend, session + "-other", [ChatMessage("user", "Hello there")])  # takes the only slot
        follow = [*first, ChatMessage("assistant", backend.tokenizer.decode(ids1), reply_token_ids(r1.reason, ids1)),
                  ChatMessage("user", "More?")]
        r2, _, _, _ = run(backend, session, follow)
        return r2

    with_image = parked_second_turn("park-a", (IMG_A,))
    text_only = parked_second_turn("park-t", ())
    assert with_image.restored_tokens > 4 and with_image.reused_prefix_tokens >= with_image.restored_tokens
    assert text_only.restored_tokens > 0
    reread_image = with_image.prompt_tokens - with_image.reused_prefix_tokens
    reread_text = text_only.prompt_tokens - text_only.reused_prefix_tokens
    assert reread_image <= reread_text + 2


@needs_mtmd
def test_stop_during_an_image_commits_none_of_it(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    from turbospark_app.engine import StopReason
    from turbospark_app.model.llamacpp.vision import Projector

    stop = {"now": False}
    encode = Projector.encode

    def encode_then_stop(self, seg, cancel=None):  # Stop pressed as the encode ends
        out = encode(self, seg, cancel)
        stop["now"] = True
        return out

    monkeypatch.setattr(Projector, "encode", encode_then_stop)
    messages = [ChatMessage("user", ASK, images=(IMG_B,))]
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=8))
    turn = backend.prepare_turn("stop-img", messages, settings)
    result = drive_raw_completion(backend.stream_turn(turn, lambda: stop["now"]), settings.generation.rate,
                                  lambda: stop["now"], lambda e: None)
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 0
    start = next(i for i, t in enumerate(turn.prompt_ids) if t < 0)
    assert result.kv_position <= start  # nothing of the image (nor what followed) was kept
    monkeypatch.setattr(Projector, "encode", encode)
    again, ids, _, _ = run(backend, "stop-img", messages)
    assert again.reused_prefix_tokens <= start and len(ids) > 0


@needs_mtmd
def test_token_by_token_prefill_feeds_the_image_whole(backend) -> None:
    messages = [ChatMessage("user", ASK, images=(IMG_A,))]
    chunked = run(backend, "tbt-1", messages)[1]
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=12), chunked_prefill=False)
    turn = backend.prepare_turn("tbt-2", messages, settings)
    ids: list[int] = []
    drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate, lambda: False,
                         lambda e: ids.append(e.id) if isinstance(e, TokenProgress) else None)
    assert ids == chunked


@needs_mtmd
def test_a_text_only_model_names_itself_when_sent_an_image(pair: Path) -> None:
    from turbospark_app.chat.backend import load_backend

    b = load_backend(pair, session_slots=1, max_context=512, mmproj="off")
    try:
        assert not b.has_vision
        with pytest.raises(VisionUnavailable, match=pair.name):
            b.prepare_turn("s", [ChatMessage("user", ASK, images=(IMG_A,))], TurnSettings())
    finally:
        b.close()


@needs_mtmd
def test_a_mismatched_projector_is_a_reason_and_the_model_still_runs(pair: Path, tmp_path: Path) -> None:
    from turbospark_app.chat.backend import load_backend

    wrong = synthetic_mmproj.write_mmproj(tmp_path / "mmproj-640.gguf", 640, "mlp")
    b = load_backend(pair, session_slots=1, max_context=512, mmproj=wrong)
    try:
        assert not b.has_vision
        assert "does not fit" in b.vision_reason and "mmproj-640.gguf" in b.vision_reason
        assert b.model_info()["vision_label"].startswith("no (")
        r, ids, _, _ = run(b, "t", [ChatMessage("user", "Hi")], max_new=4)
        assert len(ids) > 0
    finally:
        b.close()
    # beside the model, a projector of another width is passed over, with the reason
    from turbospark_app.model.llamacpp.vision import find_projector

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.gguf").symlink_to(pair.resolve())
    shutil.copy(wrong, folder / "mmproj-other.gguf")
    choice = find_projector(folder / "model.gguf", 576)
    assert choice.path is None and "projects to 640, the model's width is 576" in choice.reason


# -- the non-causal path: a gemma3 projector over a (synthetic) gemma3 model ------------------------

@needs_mtmd
def test_a_non_causal_gemma3_image_decodes_in_one_batch(tmp_path: Path) -> None:
    import importlib.util

    from turbospark_app.chat.backend import load_backend

    spec = importlib.util.spec_from_file_location(
        "synthetic_gguf", Path(__file__).parent.parent / "benchmarks" / "synthetic_gguf.py")
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    model = synth.write_family_synthetic(tmp_path / "gemma3-tiny.gguf", "gemma3", "Q4_0", layers=2)
    mmproj_for(model, tmp_path / "mmproj-gemma3.gguf")  # gemma3: the model's arch
    b = load_backend(model, session_slots=1, max_context=512)
    try:
        assert b.has_vision, b.vision_reason
        ids = b.prompts.vision.image_ids(IMG_A)
        seg = b.prompts.vision.segment(next(t for t in ids if t < 0))
        assert seg.non_causal and seg.n_tokens == 4
        r1, out1, _, _ = run(b, "g1", [ChatMessage("user", ASK, images=(IMG_A,))], max_new=6)
        r2, out2, _, _ = run(b, "g2", [ChatMessage("user", ASK, images=(IMG_A,))], max_new=6)
        assert out1 == out2 and len(out1) > 0
        assert r1.image_tokens == 4
    finally:
        b.close()
    # 768 px / 8 px patches pooled by 4: 576 tokens that attend to each other, more than one
    # batch of 512 holds (llama.cpp would assert and kill the process): refused before it.
    (tmp_path / "big").mkdir()
    big = synthetic_mmproj.write_mmproj(tmp_path / "big" / "mmproj-big.gguf", synthetic_mmproj.text_n_embd(model),
                                        "gemma3", image_size=768)
    b = load_backend(model, session_slots=1, max_context=1024, mmproj=big)
    try:
        assert b.has_vision, b.vision_reason
        with pytest.raises(VisionUnavailable, match="576 tokens .* must fit one batch of 512"):
            b.prepare_turn("g3", [ChatMessage("user", ASK, images=(IMG_A,))], TurnSettings())
        r, out, _, _ = run(b, "g4", [ChatMessage("user", "Hi")], max_new=2)  # and it goes on
        assert len(out) > 0
    finally:
        b.close()


# -- the command line ------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "turbospark_app", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@needs_mtmd
def test_cli_chat_image_flag(pair: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(png(48, 40, seed=0))
    b.write_bytes(png(48, 40, seed=7))
    one = _cli("chat", "--model", str(pair), "--image", str(a), "--prompt", ASK, "--max-new", "8")
    assert one.returncode == 0, one.stderr
    assert "image: 4 tok, encoded in " in one.stderr
    again = _cli("chat", "--model", str(pair), "--image", str(a), "--prompt", ASK, "--max-new", "8")
    assert again.stdout == one.stdout and one.stdout.strip()
    two = _cli("chat", "--model", str(pair), "--image", str(a), "--image", str(b), "--prompt", ASK,
               "--max-new", "8")
    assert two.returncode == 0, two.stderr
    assert "image: 8 tok, encoded in " in two.stderr
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a picture")
    refused = _cli("chat", "--model", str(pair), "--image", str(bad), "--prompt", ASK)
    assert refused.returncode == 2 and "bad.png is not an image" in refused.stderr
    off = _cli("chat", "--model", str(pair), "--mmproj", "off", "--image", str(a), "--prompt", ASK)
    assert off.returncode == 2 and "takes no images" in off.stderr


@needs_mtmd
def test_cli_model_info_says_vision(pair: Path, tmp_path: Path) -> None:
    yes = _cli("model", "info", str(pair))
    line = next(ln for ln in yes.stdout.splitlines() if ln.startswith("vision: "))
    assert line.startswith("vision: yes (mmproj ") and "mmproj-SmolLM2-135M-synthetic.gguf, mlp" in line
    wrong = synthetic_mmproj.write_mmproj(tmp_path / "mmproj-640.gguf", 640, "mlp")
    no = _cli("model", "info", str(pair), "--mmproj", str(wrong))
    line = next(ln for ln in no.stdout.splitlines() if ln.startswith("vision: "))
    assert line == "vision: no (mmproj-640.gguf projects to 640, the model's width is 576)"


def test_a_remote_engine_gets_the_images_as_content_parts() -> None:
    from turbospark_app.remote.runner import chat_body
    from turbospark_app.service.events import TurnRequest

    request = TurnRequest("c", (ChatMessage("user", ASK, images=(IMG_A,)),))
    content = chat_body(request, "m")["messages"][-1]["content"]
    assert [p["type"] for p in content] == ["image_url", "text"] and content[1]["text"] == ASK
    back = decode_data_url(content[0]["image_url"]["url"])
    assert (back.width, back.height, back.rgb) == (IMG_A.width, IMG_A.height, IMG_A.rgb)
