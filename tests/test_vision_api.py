"""Images through the OpenAI API: `image_url` content parts with data: URLs, through the official
`openai` client, on the default model with its synthetic projector beside it; http(s) URLs and
hostile images are 400s and the server goes on; a text-only model names itself."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from pathlib import Path

import pytest

from turbospark_app.cli.serve_command import backend_factory
from turbospark_app.service.engine_thread import EngineThread

from api_harness import ApiHarness, openai_client
from vision_assets import animated_gif, huge_declared_png, mmproj_for, png

pytestmark = [pytest.mark.real_model]


def _harness(model: Path, mmproj: str = "auto"):
    engine = EngineThread(backend_factory(str(model), 2, None, mmproj=mmproj), lambda e: None, max_active=2)
    engine.start()
    deadline = time.monotonic() + 120
    while engine.state != "ready":
        assert engine.state != "failed" and time.monotonic() < deadline, "model did not load"
        time.sleep(0.05)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="vision-api-loop", daemon=True)
    thread.start()
    harness = ApiHarness(engine, loop)
    harness.start(stall_timeout=5.0)
    return harness, engine, loop, thread


def _close(harness, engine, loop, thread) -> None:
    for server in harness.servers:
        harness.stop(server)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert engine.shutdown(10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Path:
    folder = tmp_path_factory.mktemp("vlm-api")
    model = folder / default_model_path.name
    model.symlink_to(default_model_path)
    mmproj_for(default_model_path, folder / "mmproj-synthetic.gguf")
    return model


@pytest.fixture(scope="module")
def api(pair: Path):
    parts = _harness(pair)
    yield parts[0]
    _close(*parts)


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def image_message(url: str, text: str = "Describe this image.") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


def test_models_lists_vision(api) -> None:
    client = openai_client(api.servers[0])
    model = client.models.list().data[0]
    assert "vision" in model.capabilities and model.meta["vision"] is True


def test_an_image_request_streams_what_it_answers(api) -> None:
    client = openai_client(api.servers[0])
    messages = image_message(data_url(png()))
    whole = client.chat.completions.create(model=client.models.list().data[0].id,
                                           messages=messages, temperature=0, max_tokens=12)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=whole.model, messages=messages, temperature=0, max_tokens=12, stream=True) if c.choices)
    assert whole.choices[0].message.content and streamed == whole.choices[0].message.content
    text_only = client.chat.completions.create(
        model=whole.model, messages=[{"role": "user", "content": "Describe this image."}],
        temperature=0, max_tokens=1)
    assert whole.usage.prompt_tokens == text_only.usage.prompt_tokens + 4  # the image's cells
    other = client.chat.completions.create(model=whole.model, messages=image_message(data_url(png(seed=7))),
                                           temperature=0, max_tokens=12)
    assert other.choices[0].message.content != whole.choices[0].message.content


def test_the_second_turn_reuses_the_image(api) -> None:
    client = openai_client(api.servers[0])
    model = client.models.list().data[0].id
    first = image_message(data_url(png(seed=3)))
    r1 = client.chat.completions.create(model=model, messages=first, temperature=0, max_tokens=8)
    follow = [*first, {"role": "assistant", "content": r1.choices[0].message.content},
              {"role": "user", "content": "And the colours?"}]
    r2 = client.chat.completions.create(model=model, messages=follow, temperature=0, max_tokens=4)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r1.usage.prompt_tokens - 1  # the whole first prompt, image included


@pytest.mark.parametrize(("url", "code"), [
    ("https://example.com/cat.png", "image_url_refused"),
    (data_url(png()[:300]), "invalid_image"),
    (data_url(huge_declared_png()), "invalid_image"),
    (data_url(b"just some text, named a png"), "invalid_image"),
    (data_url(animated_gif(), "image/gif"), "invalid_image"),
    (data_url(b""), "invalid_image"),
    ("data:image/png;base64," + "A" * (20 << 20), "invalid_image"),
])
def test_refused_images_are_400s_and_the_server_goes_on(api, url: str, code: str) -> None:
    import openai

    client = openai_client(api.servers[0])
    model = client.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=image_message(url), max_tokens=4)
    assert e.value.body["code"] == code, e.value.body
    ok = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert ok.choices[0].finish_reason in ("length", "stop")


def test_a_text_only_model_is_a_400_naming_it(pair: Path) -> None:
    import openai

    parts = _harness(pair, mmproj="off")
    try:
        client = openai_client(parts[0].servers[0])
        model = client.models.list().data[0]
        assert "vision" not in model.capabilities
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model.id, messages=image_message(data_url(png())), max_tokens=4)
        assert e.value.body["code"] == "model_has_no_vision" and model.id in e.value.body["message"]
    finally:
        _close(*parts)
