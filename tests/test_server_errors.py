"""Every error class before headers, with the OpenAI body and the exact status, and the safe
defaults (Host guard, key, CORS, JSON-only POST)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from api_harness import api, http, openai_client, run_fresh  # noqa: F401 (fixture)

from turbospark_app.server import ApiServer, ServerConfig
from turbospark_app.server.security import host_allowed, key_matches

HELLO = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}


def _error(body: bytes) -> dict[str, Any]:
    err = json.loads(body)["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    return err


# -- without the model --------------------------------------------------------------------------


def test_off_loopback_needs_a_key() -> None:
    with pytest.raises(ValueError, match="API key"):
        ServerConfig(host="0.0.0.0").check()
    ServerConfig(host="0.0.0.0", api_key="k").check()
    ServerConfig(host="localhost").check()


def test_host_guard_and_key_compare() -> None:
    for ok in ("127.0.0.1:8080", "localhost", "localhost:1", "[::1]:8080", "app.localhost:3"):
        assert host_allowed(ok), ok
    for bad in ("evil.example", "evil.example:8080", "127.0.0.1.nip.io", "", None, "10.0.0.1:80"):
        assert not host_allowed(bad), bad
    assert key_matches("abc", "abc") and not key_matches("abd", "abc") and not key_matches(None, "abc")


class LoadingEngine:
    """An engine still loading its model."""

    state = "loading"
    facts = None

    def submit(self, request, listener=None):  # pragma: no cover - never reached
        raise AssertionError("nothing may be queued while loading")

    def cancel(self, request_id):  # pragma: no cover
        return False


def test_503_with_retry_after_while_the_model_loads() -> None:
    async def run() -> None:
        server = ApiServer(LoadingEngine(), ServerConfig(port=0))
        await server.start()
        try:
            client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.InternalServerError) as e:
                await client.chat.completions.create(model="m", messages=HELLO)
            assert e.value.status_code == 503
            assert e.value.response.headers["retry-after"] == "1"
            assert e.value.body["type"] == "unavailable_error"
            await client.close()
        finally:
            await server.stop()

    run_fresh(run)


# -- with the model ------------------------------------------------------------------------------



@pytest.mark.real_model
def test_400s(api) -> None:  # noqa: F811
    server = api.servers[0]
    client = openai_client(server)
    code, _, body = http(server, "POST", "/v1/chat/completions", b"{not json", JSON)
    assert code == 400 and _error(body)["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=HELLO, n=2)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=[])
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=HELLO,
                                       temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=HELLO,
                                       stream_options={"include_usage": True})
    assert e.value.body["param"] == "stream_options"


@pytest.mark.real_model
def test_context_overflow_is_a_400_never_a_5xx(api) -> None:  # noqa: F811
    client = openai_client(api.servers[0])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=HELLO,
                                       max_tokens=9000, stream=True)
    body = e.value.body
    assert e.value.status_code == 400 and body["code"] == "context_length_exceeded"
    assert body["n_ctx"] == 4096 and 0 < body["n_prompt_tokens"] < 100
    big = "word " * 9000  # the prompt alone is over the window
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt=big)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"


@pytest.mark.real_model
def test_unknown_model_is_404(api) -> None:  # noqa: F811
    with pytest.raises(openai.NotFoundError) as e:
        openai_client(api.servers[0]).chat.completions.create(model="gpt-4o", messages=HELLO)
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"


@pytest.mark.real_model
def test_body_over_the_limit_is_413(api) -> None:  # noqa: F811
    from turbospark_app.server.config import ServerConfig

    limit = ServerConfig().max_body_bytes  # room for one image in base64, no more
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * limit}]}).encode()
    code, _, body = http(api.servers[0], "POST", "/v1/chat/completions", payload, JSON)
    assert code == 413 and _error(body)["code"] == "request_too_large"


@pytest.mark.real_model
def test_full_queue_is_503_with_retry_after(api) -> None:  # noqa: F811
    server = api.start(max_queue=0)
    with pytest.raises(openai.InternalServerError) as e:
        openai_client(server).chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                      messages=HELLO, max_tokens=2)
    assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "1"
    assert e.value.body["type"] == "unavailable_error"


@pytest.mark.real_model
def test_api_key(api) -> None:  # noqa: F811
    server = api.start(api_key="s3cret")
    with pytest.raises(openai.AuthenticationError) as e:
        openai_client(server, api_key="wrong").models.list()
    assert e.value.body["type"] == "authentication_error"
    code, _, body = http(server, "GET", "/v1/models")
    assert code == 401 and _error(body)["code"] == "invalid_api_key"
    assert openai_client(server, api_key="s3cret").models.list().data
    assert http(server, "GET", "/v1/models", headers={"X-Api-Key": "s3cret"})[0] == 200
    assert http(server, "GET", "/health")[0] == 200  # public, as llama-server's
    assert http(server, "GET", "/status")[0] == 401


@pytest.mark.real_model
def test_dns_rebinding_cors_and_content_type(api) -> None:  # noqa: F811
    server = api.servers[0]
    code, _, body = http(server, "GET", "/v1/models", headers={"Host": "evil.example"})
    assert code == 403 and _error(body)["code"] == "host_not_allowed"
    code, headers, body = http(server, "GET", "/v1/models", headers={"Origin": "http://evil.example"})
    assert code == 403 and "access-control-allow-origin" not in headers
    code, _, body = http(server, "POST", "/v1/chat/completions", json.dumps({"messages": HELLO}).encode(),
                         {"Content-Type": "text/plain"})
    assert code == 415
    cors = api.start(allowed_origins=("http://localhost:3000",))
    code, headers, _ = http(cors, "OPTIONS", "/v1/chat/completions",
                            headers={"Origin": "http://localhost:3000",
                                     "Access-Control-Request-Method": "POST"})
    assert code == 204 and headers["access-control-allow-origin"] == "http://localhost:3000"
    code, headers, _ = http(cors, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert code == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    code, _, body = http(server, "GET", "/nope")
    assert code == 404 and _error(body)["type"] == "not_found_error"
