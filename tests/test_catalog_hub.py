"""The catalog against a local stand-in of the Hub (tests/hub_standin.py) through the real
huggingface_hub client: search, a repo's files by quantization, the Hub's GGUF metadata or a
ranged read of the header, architectures llama.cpp does not run, pasted ids and URLs."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from hub_standin import HubStandin, standard_hub
from turbospark_app.catalog import hub, inspect, names


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> HubStandin:
    server = standard_hub(tmp_path_factory.mktemp("hub"), default_model_path).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def endpoint(standin: HubStandin, isolated_dirs, monkeypatch: pytest.MonkeyPatch) -> HubStandin:
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(isolated_dirs["data"]))
    standin.requests.clear()
    return standin


def test_search_finds_gguf_repos_by_downloads_or_recency(standin: HubStandin) -> None:
    by_downloads = [r.repo_id for r in hub.search("", sort="downloads")]
    assert by_downloads[0] == "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    assert by_downloads[:3] == ["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
                                "turbospark-test/tiny-vision-GGUF", "turbospark-test/tiny-llama-GGUF"]
    recent = [r.repo_id for r in hub.search("", sort="recent")]
    assert recent[0] == "turbospark-test/tiny-llama-GGUF"
    hits = hub.search("smollm2")
    assert [h.repo_id for h in hits] == ["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"]
    assert hits[0].facts.architecture == "llama" and hits[0].facts.parameters > 100_000_000
    assert hits[0].downloads == 52000
    # what went over the wire: the search, restricted to GGUF, sorted, with the fields asked
    method, path, query, headers = standin.requests[-1]
    assert (method, path) == ("GET", "/api/models")
    assert query["filter"] == ["gguf"] and query["search"] == ["smollm2"] and query["sort"] == ["downloads"]
    assert "gguf" in query["expand"]
    assert "authorization" not in headers  # no token given: none sent
    import huggingface_hub

    assert headers["user-agent"] == f"turbospark/0.1.0; hf_hub/{huggingface_hub.__version__}; " \
        f"python/{platform.python_version()}"  # no telemetry (torch version, agent name)


def test_listing_groups_files_by_quantization_with_sizes_and_sha256(default_model_path: Path) -> None:
    listing = hub.repo_listing("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF")
    assert [g.quant for g in listing.groups] == ["Q4_1"]
    group = listing.groups[0]
    assert group.size == default_model_path.stat().st_size
    from turbospark_app.model.default_model import DEFAULT_MODEL_SHA256

    assert group.first.sha256 == DEFAULT_MODEL_SHA256
    assert listing.commit == hub.api().model_info("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF").sha
    tiny = hub.repo_listing("turbospark-test/tiny-llama-GGUF")
    assert sorted(g.quant for g in tiny.groups) == ["F16", "Q4_K_M", "Q8_0"]
    vision = hub.repo_listing("turbospark-test/tiny-vision-GGUF")
    assert [g.quant for g in vision.groups] == ["Q8_0"]  # the projector is not a model
    assert vision.projector_for(vision.groups[0]).path == "mmproj-F16.gguf"


def test_facts_come_from_the_hub_else_from_a_ranged_read_of_the_header(standin: HubStandin) -> None:
    report = inspect.inspect_repo(hub.repo_listing("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"))
    assert report.source == "hub" and report.architecture == "llama" and report.context_length == 8192
    assert report.runnable and report.shape.n_layers == 30
    standin.served.clear()
    tiny = inspect.inspect_repo(hub.repo_listing("turbospark-test/tiny-llama-GGUF"))
    assert tiny.source == "header" and tiny.architecture == "llama" and tiny.context_length == 1024
    assert tiny.parameters == tiny.shape.parameters > 0
    ranged = [h for m, p, q, h in standin.requests if p.startswith("/store/") and m == "GET"]
    assert ranged and all(h["range"].startswith("bytes=0-") for h in ranged)
    fit = inspect.fit(tiny, tiny.listing.groups[0])
    assert fit.verdict == "fits" and fit.need.total > tiny.listing.groups[0].size


def test_an_architecture_llama_cpp_does_not_run_is_marked_before_download(standin: HubStandin) -> None:
    report = inspect.inspect_repo(hub.repo_listing("turbospark-test/brand-new-arch-GGUF"))
    assert not report.runnable
    assert report.problem == "unknown model architecture: 'brand-new-arch'"
    full = standin.repos["turbospark-test/brand-new-arch-GGUF"].files[0].size
    assert standin.served.get("alien-Q8_0.gguf", 0) <= full  # only its first bytes, at most


def test_a_pasted_id_or_url_names_the_repo() -> None:
    for text in ("turbospark-test/tiny-llama-GGUF", "https://huggingface.co/turbospark-test/tiny-llama-GGUF",
                 "hf.co/turbospark-test/tiny-llama-GGUF:Q8_0",
                 "https://huggingface.co/turbospark-test/tiny-llama-GGUF/blob/main/tiny-llama-Q8_0.gguf"):
        ref = names.parse_repo_ref(text)
        assert ref is not None and ref.repo_id == "turbospark-test/tiny-llama-GGUF", text
        listing = hub.repo_listing(ref.repo_id)
        if ref.quant:
            assert listing.group(ref.quant).quant == "Q8_0"
    assert names.parse_repo_ref("llama 3 8b") is None


def test_unknown_repos_and_unreachable_hubs_are_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(hub.HubError, match="no such model repo"):
        hub.repo_listing("nobody/nothing-GGUF")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    import huggingface_hub.utils._http as hf_http

    monkeypatch.setattr(hf_http.time, "sleep", lambda s: None)  # its 5 retries, without the waits
    with pytest.raises(hub.HubError, match="cannot reach"):
        hub.search("x")


def test_the_token_is_sent_only_when_the_user_gave_one(standin: HubStandin) -> None:
    from turbospark_app.catalog import config

    config.token_store().set(config.TOKEN_NAME, "hf_testtoken")
    try:
        hub.search("tiny")
        assert standin.requests[-1][3]["authorization"] == "Bearer hf_testtoken"
    finally:
        config.token_store().set(config.TOKEN_NAME, "")
    hub.search("tiny")
    assert "authorization" not in standin.requests[-1][3]
