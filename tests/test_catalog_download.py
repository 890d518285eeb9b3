"""Downloads from the stand-in Hub (tests/hub_standin.py) through huggingface_hub: a cut
connection and a restart fetch only the rest (bytes served counted), the sha256 the Hub lists is
checked (a mismatch is not kept), cancel, never a half file under the model's name, a full disk
said before a byte is fetched, the projector fetched with a vision model, the models folder."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from hub_standin import HubStandin, standard_hub
from turbospark_app.catalog import config, download, hub, library

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "smollm2-135m-instruct-q4_1.gguf"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> HubStandin:
    server = standard_hub(tmp_path_factory.mktemp("hub"), default_model_path).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def endpoint(standin: HubStandin, isolated_dirs, monkeypatch: pytest.MonkeyPatch) -> HubStandin:
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(isolated_dirs["data"]))
    monkeypatch.delenv("TURBOSPARK_MODELS_DIR", raising=False)
    standin.requests.clear()
    standin.served.clear()
    standin.cut_once.clear()
    standin.corrupt.clear()
    return standin


def _job(repo: str, quant: str) -> download.DownloadJob:
    listing = hub.repo_listing(repo)
    return download.plan(listing, listing.group(quant), config.models_folder())


def _no_half_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.gguf") if not p.name.startswith("."))


def test_a_download_lands_verified_with_progress_and_is_listed(standin: HubStandin, default_model_path: Path) -> None:
    job = _job(SMOL, "Q4_1")
    events: list[download.Progress] = []
    path = download.run(job, on_progress=events.append)
    assert path == config.models_folder() / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF" / SMOL_FILE
    assert path.read_bytes() == default_model_path.read_bytes()
    assert standin.served[SMOL_FILE] == path.stat().st_size  # every byte once
    phases = collections.Counter(e.phase for e in events)
    assert phases["download"] > 3 and phases["verify"] > 3 and events[-1].phase == "done"
    fetched = [e for e in events if e.phase == "download"]
    assert [e.done for e in fetched] == sorted(e.done for e in fetched)
    assert fetched[-1].done == fetched[-1].total == path.stat().st_size
    assert fetched[-1].speed > 0 and fetched[-1].eta_s is not None
    assert not list(path.parent.glob(".*.part*"))
    # what went over the wire for the file: the HEAD of `resolve`, then the store's GET
    methods = [(m, p.split("/")[1]) for m, p, _q, _h in standin.requests if SMOL_FILE in p]
    assert methods == [("HEAD", "HuggingFaceTB"), ("GET", "store")]
    listed = library.list_models()
    assert [m.name for m in listed] == [f"{SMOL}:Q4_1"]
    assert listed[0].size == path.stat().st_size
    assert library.resolve(f"{SMOL}:q4_1") == path == library.resolve(SMOL)
    # a second `get` of the same file fetches nothing
    standin.served.clear()
    assert download.run(_job(SMOL, "Q4_1")) == path and standin.served == {}


def test_a_connection_cut_at_half_resumes_with_only_the_rest(standin: HubStandin) -> None:
    standin.cut_once[SMOL_FILE] = 0.5
    job = _job(SMOL, "Q4_1")
    path = download.run(job)
    size = path.stat().st_size
    gets = [h.get("range") for m, p, _q, h in standin.requests if p.startswith("/store/") and m == "GET"]
    assert len(gets) == 2 and gets[0] is None
    # huggingface_hub's own resume asks for the rest from what reached the file; what it had
    # read but not yet written (its read buffer, at most a chunk) comes again
    resumed_from = int(gets[1].removeprefix("bytes=").removesuffix("-"))
    from huggingface_hub import constants

    assert 0 < size // 2 - resumed_from <= constants.DOWNLOAD_CHUNK_SIZE
    assert standin.served[SMOL_FILE] == size // 2 + (size - resumed_from)
    assert library.is_verified(path, job.files[0].sha256)


def test_a_restarted_download_fetches_only_what_is_missing(standin: HubStandin) -> None:
    job = _job(SMOL, "Q4_1")
    half = job.total // 2
    with pytest.raises(download.DownloadCancelled):
        download.run(job, cancel=lambda: job_progress["done"] >= half,
                     on_progress=lambda p: job_progress.update(done=p.done))
    final = job.model_path
    part = final.with_name(f".{final.name}.part")
    assert not final.exists() and part.is_file()  # never a half file under the model's name
    kept = part.stat().st_size
    assert half <= kept <= half + (10 << 20)  # huggingface_hub reports in 10 MB chunks
    assert download.bytes_left(job) == job.total - kept
    [partial] = library.partial_downloads()  # My Models shows it, resumable
    assert (partial.name, partial.have, partial.size, partial.path) == (f"{SMOL}:Q4_1", kept, job.total, final)
    standin.settle()
    standin.served.clear()
    path = download.run(_job(SMOL, "Q4_1"))  # "restart": a new job, as after relaunching
    assert standin.served[SMOL_FILE] == job.total - kept
    assert library.is_verified(path, job.files[0].sha256)
    assert not part.exists() and library.partial_downloads() == []


job_progress: dict[str, int] = {"done": 0}


def test_a_part_of_another_version_is_started_over(standin: HubStandin) -> None:
    job = _job(SMOL, "Q4_1")
    final = job.model_path
    final.parent.mkdir(parents=True)
    part = final.with_name(f".{final.name}.part")
    part.write_bytes(b"x" * 1000)
    final.with_name(f".{final.name}.part.json").write_text('{"sha256": "another", "size": 5}')
    path = download.run(job)
    assert standin.served[SMOL_FILE] == path.stat().st_size


def test_a_file_whose_sha256_differs_is_not_kept(standin: HubStandin) -> None:
    standin.corrupt.add("tiny-llama-Q8_0.gguf")
    job = _job("turbospark-test/tiny-llama-GGUF", "Q8_0")
    with pytest.raises(download.DownloadError, match="sha256 mismatch.*not kept"):
        download.run(job)
    assert _no_half_files(config.models_folder()) == []
    assert not list(job.folder.glob(".*"))  # the bad bytes are gone too, not resumed from
    assert library.list_models() == []


def test_a_full_disk_is_said_before_a_byte_is_fetched(standin: HubStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(SMOL, "Q4_1")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(download.shutil, "disk_usage", lambda p: usage(10**12, 10**12 - 50_000_000, 50_000_000))
    with pytest.raises(download.NotEnoughSpace, match=r"needs 0\.10 GB .* has 0\.05 GB free"):
        download.run(job)
    assert not [p for m, p, _q, _h in standin.requests if SMOL_FILE in p]
    assert not job.folder.exists() or not any(job.folder.iterdir())


def test_a_vision_model_brings_its_projector(standin: HubStandin) -> None:
    job = _job("turbospark-test/tiny-vision-GGUF", "Q8_0")
    assert job.projector is not None
    path = download.run(job)
    assert (path.parent / "mmproj-F16.gguf").is_file()
    [model] = library.list_models()
    assert model.mmproj == path.parent / "mmproj-F16.gguf"
    assert model.size == path.stat().st_size + model.mmproj.stat().st_size


def test_delete_removes_the_files_and_the_entry(standin: HubStandin) -> None:
    path = download.run(_job("turbospark-test/tiny-vision-GGUF", "Q8_0"))
    [model] = library.list_models()
    gone = library.delete(model)
    assert sorted(p.name for p in gone) == ["mmproj-F16.gguf", "tiny-vision-Q8_0.gguf"]
    assert not path.parent.exists() and library.list_models() == []


def test_added_files_and_a_changed_models_folder_are_listed(tmp_path: Path, standin: HubStandin) -> None:
    from tiny_gguf import write_tiny_gguf

    own = tmp_path / "elsewhere" / "mine.gguf"
    own.parent.mkdir()
    write_tiny_gguf(own)
    library.add_file(own)
    path = download.run(_job("turbospark-test/tiny-llama-GGUF", "Q8_0"))
    config.set_models_folder(tmp_path / "new-folder")
    assert config.models_folder() == tmp_path / "new-folder"
    names = {m.name: m for m in library.list_models()}
    assert set(names) == {"mine.gguf", "turbospark-test/tiny-llama-GGUF:Q8_0"}  # the old folder's too
    library.mark_used(path)
    assert library.list_models()[0].path == path and library.list_models()[0].last_used
    library.delete(names["mine.gguf"])
    assert own.is_file()  # an added file is only taken off the list
    assert "mine.gguf" not in {m.name for m in library.list_models()}
    config.set_models_folder(None)


def test_a_split_model_downloads_every_shard_and_is_one_model(standin: HubStandin) -> None:
    listing = hub.repo_listing("turbospark-test/tiny-llama-GGUF")
    group = listing.group("F16")
    assert [f.name for f in group.files] == ["tiny-llama-F16-00001-of-00002.gguf",
                                             "tiny-llama-F16-00002-of-00002.gguf"]  # in order
    assert group.complete and group.size == sum(f.size for f in group.files)
    path = download.run(download.plan(listing, group, config.models_folder()))
    assert path.name == "tiny-llama-F16-00001-of-00002.gguf" and path.parent.name == "F16"
    assert (path.parent / "tiny-llama-F16-00002-of-00002.gguf").is_file()
    [model] = library.list_models()
    assert model.name == "turbospark-test/tiny-llama-GGUF:F16" and model.size == group.size
    assert library.resolve("turbospark-test/tiny-llama-GGUF:f16") == path


def test_a_second_download_of_the_same_model_is_refused_while_one_runs(standin: HubStandin) -> None:
    import threading

    standin.slow[SMOL_FILE] = 0.02
    first_error: list[BaseException] = []
    started = threading.Event()
    stop = threading.Event()

    def first() -> None:
        try:
            download.run(_job(SMOL, "Q4_1"), on_progress=lambda p: started.set(), cancel=stop.is_set)
        except BaseException as exc:  # noqa: BLE001
            first_error.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert started.wait(30)
        with pytest.raises(download.DownloadError, match="is being downloaded already"):
            download.run(_job(SMOL, "Q4_1"))
    finally:
        stop.set()
        thread.join(30)
        standin.slow.clear()
    assert isinstance(first_error[0], download.DownloadCancelled)
    path = download.run(_job(SMOL, "Q4_1"))  # the lock is gone with the first
    assert library.is_verified(path, None)
