"""The API through the official `openai` package (max_retries=0) over the real default model."""

from __future__ import annotations

import json

import openai
import pytest
from api_harness import api, http, openai_client, sse_events  # noqa: F401 (fixture)

pytestmark = pytest.mark.real_model

HELLO = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def client(api):  # noqa: F811
    return openai_client(api.servers[0])


@pytest.fixture(scope="module")
def model_id(client) -> str:
    return client.models.list().data[0].id


def test_models_list_and_retrieve(client, model_id) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [model_id] and model_id.startswith("SmolLM2")
    assert models[0].object == "model" and models[0].owned_by == "turbospark"
    assert client.models.retrieve(model_id).id == model_id
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"


def test_chat_non_stream(client, model_id) -> None:
    r = client.chat.completions.create(model=model_id, messages=HELLO, max_tokens=6, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 6 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6
    assert r.usage.prompt_tokens_details.cached_tokens is not None
    timings = r.model_extra["timings"]
    assert timings["predicted_n"] == 6
    assert timings["cache_n"] + timings["prompt_n"] == r.usage.prompt_tokens
    assert timings["cache_n"] == r.usage.prompt_tokens_details.cached_tokens


def test_chat_stream_chunk_order_and_usage(client, model_id) -> None:
    chunks = list(client.chat.completions.create(
        model=model_id, messages=HELLO, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    first, finish, last = chunks[0], chunks[-2], chunks[-1]
    assert first.choices[0].delta.role == "assistant" and first.usage is None
    body = chunks[1:-2]
    assert body and all(c.choices[0].delta.role is None and c.choices[0].finish_reason is None
                        for c in body)
    assert finish.choices[0].finish_reason == "length"
    assert finish.choices[0].delta.content is None and finish.choices[0].delta.role is None
    assert last.choices == [] and last.usage.completion_tokens == 8
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    whole = client.chat.completions.create(model=model_id, messages=HELLO, max_tokens=8,
                                           temperature=0).choices[0].message.content
    assert streamed == whole
    # Without include_usage: no usage chunk, the finish chunk is last.
    plain = list(client.chat.completions.create(model=model_id, messages=HELLO, max_tokens=3,
                                                temperature=0, stream=True))
    assert plain[-1].choices[0].finish_reason == "length"


def test_stream_wire_format_is_exact_sse(api) -> None:  # noqa: F811
    server = api.servers[0]
    body = json.dumps({"messages": HELLO, "max_tokens": 3, "temperature": 0, "stream": True}).encode()
    code, headers, raw = http(server, "POST", "/v1/chat/completions", body,
                              {"Content-Type": "application/json"})
    assert code == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert raw.endswith(b"data: [DONE]\n\n") and events[-1] == b"data: [DONE]"
    data = [e for e in events if not e.startswith(b":")]
    assert all(e.startswith(b"data: ") for e in data)
    assert all(e == b": ping" for e in events if e.startswith(b":"))
    parsed = [json.loads(e[6:]) for e in data[:-1]]
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert parsed[-1]["choices"][0]["delta"] == {}


def test_completions_raw_prompt_stream_and_not(client, model_id) -> None:
    prompt = "The capital of France is"
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    streamed = list(client.completions.create(model=model_id, prompt=prompt, max_tokens=5,
                                              temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == r.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"
    echoed = client.completions.create(model=model_id, prompt=prompt, max_tokens=5, temperature=0,
                                       echo=True)
    assert echoed.choices[0].text == prompt + r.choices[0].text


def test_completions_takes_token_ids(client, model_id) -> None:
    ids = client.completions.create(model=model_id, prompt="Hello", max_tokens=1, temperature=0,
                                    logprobs=0)
    token_prompt = [19556]  # a token id inside the vocabulary
    r = client.completions.create(model=model_id, prompt=token_prompt, max_tokens=3, temperature=0)
    assert r.usage.prompt_tokens == 1 and r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=[10**9], max_tokens=3)
    assert e.value.body["param"] == "prompt"
    assert ids.choices[0].logprobs.tokens


def test_stop_strings_are_never_emitted(client, model_id) -> None:
    full = client.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=16,
                                     temperature=0).choices[0].text
    stop = full[4:7]  # a string in the middle of the greedy reply, across token boundaries
    assert len(stop) == 3
    cut = full[: full.index(stop)]
    r = client.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=16,
                                  temperature=0, stop=[stop, "never-matches"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=16,
                                              temperature=0, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_seed_reproduces_a_sampled_reply(client, model_id) -> None:
    def sample(seed: int) -> str:
        return client.chat.completions.create(
            model=model_id, messages=HELLO, max_tokens=12, temperature=1.2, seed=seed,
        ).choices[0].message.content
    a, b = sample(1234), sample(1234)
    assert a == b
    assert len({sample(s) for s in (1, 2, 3)} | {a}) > 1  # the seed matters


def test_logit_bias_bans_and_forces_tokens(client, model_id, default_model_path) -> None:
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    tok = GGUFTokenizer.from_gguf(default_model_path, use_cache=False)

    def first(**kw: object) -> str:
        return client.completions.create(model=model_id, prompt="The capital of France is", max_tokens=1,
                                         temperature=0, **kw).choices[0].text

    top = first()
    (top_id,) = tok.encode(top)
    assert first(logit_bias={str(top_id): -100}) != top  # banned: the next best instead
    (forced,) = tok.encode(" zebra")
    assert first(logit_bias={str(forced): 100}) == " zebra"
    for bad, param in (({"x": 1}, "logit_bias"), ({"5": 101}, "logit_bias"), ([[5, 1]], "logit_bias"),
                       ({str(10**9): 1}, "logit_bias")):
        with pytest.raises(openai.BadRequestError) as e:
            first(logit_bias=bad)
        assert e.value.body["param"] == param


def test_chat_logprobs_stream_and_not(client, model_id) -> None:
    r = client.chat.completions.create(model=model_id, messages=HELLO, max_tokens=6, temperature=0,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        lps = [a.logprob for a in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert t.top_logprobs[0].token == t.token  # greedy: the chosen token is the likeliest
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob)
        assert bytes(t.bytes).decode("utf-8", errors="replace") == t.token
    chunks = list(client.chat.completions.create(model=model_id, messages=HELLO, max_tokens=6,
                                                 temperature=0, logprobs=True, top_logprobs=2,
                                                 stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(len(t.top_logprobs) == 2 for t in streamed)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_id, messages=HELLO, top_logprobs=2)


def test_prefix_reuse_across_requests(client, model_id) -> None:
    history = [{"role": "system", "content": "You are a terse assistant. " * 8},
               {"role": "user", "content": "Count to three."}]
    first = client.chat.completions.create(model=model_id, messages=history, max_tokens=8, temperature=0)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "And to four?"}]
    second = client.chat.completions.create(model=model_id, messages=history, max_tokens=4, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 1  # the whole first prompt continued
    assert second.model_extra["timings"]["prompt_n"] == second.usage.prompt_tokens - cached
    # A pinned conversation keeps its own slot.
    pinned = client.chat.completions.create(model=model_id, messages=history, max_tokens=2,
                                            temperature=0, extra_body={"conversation_id": "c-42"})
    again = client.chat.completions.create(model=model_id, messages=history, max_tokens=2,
                                           temperature=0, extra_body={"conversation_id": "c-42"})
    assert again.usage.prompt_tokens_details.cached_tokens == pinned.usage.prompt_tokens - 1


def test_extensions_are_accepted(client, model_id) -> None:
    r = client.chat.completions.create(
        model=model_id, messages=HELLO, max_tokens=4, temperature=0.7, top_p=0.9,
        frequency_penalty=0.5, presence_penalty=0.3, seed=3,
        extra_body={"top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1, "max_tokens_per_sec": 50},
    )
    assert r.usage.completion_tokens >= 1
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=HELLO, extra_body={"top_k": -1})
    assert e.value.body["param"] == "top_k"


def test_continue_final_message_and_the_cap_header(api, client, model_id) -> None:  # noqa: F811
    msgs = HELLO + [{"role": "assistant", "content": "Red, green"}]
    raw = client.chat.completions.with_raw_response.create(
        model=model_id, messages=msgs, max_tokens=4, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False,
                    "max_tokens_per_sec": 50})
    assert raw.headers["x-turbospark-cap"] == "50"
    continued = raw.parse()
    # The same as a raw completion of the rendered conversation with the last message open.
    template = api.engine.facts[2].template
    head = template.render([*HELLO, {"role": "assistant", "content": "\u0000"}],
                           add_generation_prompt=False).split("\u0000")[0]
    plain = client.completions.create(model=model_id, prompt=head + "Red, green", max_tokens=4,
                                      temperature=0)
    assert continued.choices[0].message.content == plain.choices[0].text
    assert continued.usage.prompt_tokens == plain.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_id, messages=HELLO,
                                       extra_body={"continue_final_message": True})
