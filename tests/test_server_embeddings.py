"""POST /v1/embeddings through the official `openai` client: OpenAI's shape (base64, the
client's default, and float), the same vectors as the embedder gives directly, clear 400s, and a
503 that names the problem when the embedding model is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from api_harness import api, openai_client  # noqa: F401 (the fixture)
from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "A monkey is playing drums."]


def test_embeddings_in_openai_shape_equal_the_embedder(api, embedder_path: Path) -> None:  # noqa: F811
    client = openai_client(api.servers[0])
    got = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)  # base64 on the wire
    assert [d.index for d in got.data] == [0, 1, 2] and got.object == "list"
    assert got.model == "all-MiniLM-L6-v2.f16"
    vectors = np.array([d.embedding for d in got.data], np.float32)
    with LlamaCppEmbedder(embedder_path) as direct:
        expected = direct.embed(TEXTS)
        tokens = sum(direct.count_tokens(t) for t in TEXTS)
    assert vectors.shape == (3, 384)
    assert np.abs(vectors - expected).max() < 1e-5
    assert got.usage.prompt_tokens == got.usage.total_tokens == tokens
    floats = client.embeddings.create(model="x", input="A man is eating food.", encoding_format="float")
    assert np.abs(np.array(floats.data[0].embedding) - expected[0]).max() < 1e-5


@pytest.mark.parametrize("payload,match", [
    ({"input": []}, "non-empty array"),
    ({"input": [[101, 102]]}, "token ids"),
    ({"input": ["ok", "  "]}, "empty"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
])
def test_bad_requests_are_400s(api, embedder_path: Path, payload, match) -> None:  # noqa: F811
    client = openai_client(api.servers[0])
    with pytest.raises(openai.BadRequestError, match=match):
        client.post("/embeddings", body={"model": "m", **payload}, cast_to=object)


def test_a_missing_embedding_model_is_a_503_that_says_so(api) -> None:  # noqa: F811
    from turbospark_app.model.fetch import FetchError
    from turbospark_app.server import ApiServer, ServerConfig
    import asyncio

    def missing():
        raise FetchError("the embedding model is not at /nowhere.gguf")

    server = ApiServer(api.engine, ServerConfig(port=0), embedder=missing)
    asyncio.run_coroutine_threadsafe(server.start(), api.loop).result(10)
    api.servers.append(server)
    with pytest.raises(openai.InternalServerError, match="nowhere.gguf"):
        openai_client(server).embeddings.create(model="m", input="hi")
