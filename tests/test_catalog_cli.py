"""`turbospark model search | get | list` and `--model REPO:QUANT`, run as the real command (a
child process) against the stand-in Hub (tests/hub_standin.py) named by HF_ENDPOINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hub_standin import HubStandin, standard_hub

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> HubStandin:
    server = standard_hub(tmp_path_factory.mktemp("hub"), default_model_path).start()
    yield server
    server.stop()


@pytest.fixture
def env(standin: HubStandin, tmp_path: Path) -> dict[str, str]:
    standin.served.clear()
    standin.requests.clear()
    return dict(os.environ, HF_ENDPOINT=standin.endpoint, TURBOSPARK_DATA_DIR=str(tmp_path / "data"),
                TURBOSPARK_CONFIG_DIR=str(tmp_path / "config"), PYTHONPATH=str(Path(__file__).parent.parent))


def turbospark(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "turbospark_app", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_search_lists_each_file_with_its_size_and_fit(env: dict[str, str]) -> None:
    out = turbospark(env, "model", "search", "turbospark-test")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("turbospark-test/tiny-vision-GGUF  llama")  # most downloaded first
    assert any(line.strip().startswith("turbospark-test/tiny-vision-GGUF:Q8_0") and "+ projector" in line
               and "fits (" in line for line in lines)
    assert any("tiny-llama-GGUF:Q4_K_M" in line for line in lines)
    alien = lines.index(next(line for line in lines if line.startswith("turbospark-test/brand-new-arch-GGUF")))
    assert lines[alien + 1] == "  cannot run: unknown model architecture: 'brand-new-arch'"
    recent = turbospark(env, "model", "search", "turbospark-test", "--sort", "recent")
    assert recent.stdout.splitlines()[0].startswith("turbospark-test/tiny-llama-GGUF")
    pasted = turbospark(env, "model", "search", f"https://huggingface.co/{SMOL}")
    assert pasted.returncode == 0 and pasted.stdout.startswith(f"{SMOL}  llama  135M params  context 8,192")
    assert f"{SMOL}:Q4_1          98.4 MB  fits (0.29 GB at 4,096 tokens)" in pasted.stdout


def test_get_downloads_resumes_lists_and_opens_by_name(env: dict[str, str], standin: HubStandin) -> None:
    # a slow store so the first `get` can be interrupted half way (as Ctrl-C would)
    standin.slow["smollm2-135m-instruct-q4_1.gguf"] = 0.01
    first = subprocess.Popen([sys.executable, "-m", "turbospark_app", "model", "get", f"{SMOL}:Q4_1"],
                             env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = Path(env["TURBOSPARK_DATA_DIR"]) / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    part = folder / ".smollm2-135m-instruct-q4_1.gguf.part"
    deadline = time.monotonic() + 60
    while (not part.exists() or part.stat().st_size < 20_000_000) and time.monotonic() < deadline:
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)
    _out, err = first.communicate(timeout=30)
    assert first.returncode == 130, err
    assert "run the same command again to resume" in err
    assert not (folder / "smollm2-135m-instruct-q4_1.gguf").exists()
    kept = part.stat().st_size
    standin.slow.clear()
    standin.settle()
    standin.served.clear()
    standin.requests.clear()
    second = turbospark(env, "model", "get", f"{SMOL}:Q4_1")
    assert second.returncode == 0, second.stderr
    size = standin.repos[SMOL].files[0].size
    assert f"resuming: " in second.stderr
    # the header's first 4 MiB (the fit check before a download), then only the missing part
    from turbospark_app.catalog.remote_header import FIRST_BYTES

    ranges = [h.get("range") for m, p, _q, h in standin.requests if p.startswith("/store/") and m == "GET"]
    assert ranges == [f"bytes=0-{FIRST_BYTES - 1}", f"bytes={kept}-"]
    assert standin.served["smollm2-135m-instruct-q4_1.gguf"] == FIRST_BYTES + size - kept
    assert "%" in second.stderr and "MB/s" in second.stderr  # the progress bar
    assert Path(second.stdout.strip()) == folder / "smollm2-135m-instruct-q4_1.gguf"
    listed = turbospark(env, "model", "list")
    assert f"{SMOL}:Q4_1  98.4 MB  last used never" in listed.stdout
    chat = turbospark(env, "chat", "--model", f"{SMOL}:Q4_1", "--prompt", "Say hi", "--max-new", "4",
                      "--temperature", "0")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()
    assert "last used never" not in turbospark(env, "model", "list").stdout


def test_get_needs_a_quant_when_there_are_several_and_unknown_names_fail(env: dict[str, str]) -> None:
    out = turbospark(env, "model", "get", "turbospark-test/tiny-llama-GGUF")
    assert out.returncode == 2 and "name one as turbospark-test/tiny-llama-GGUF:QUANT: Q8_0" in out.stderr \
        or "Q4_K_M" in out.stderr
    out = turbospark(env, "model", "get", "turbospark-test/tiny-llama-GGUF:Q2_K")
    assert out.returncode == 1 and "has no Q2_K" in out.stderr
    out = turbospark(env, "model", "get", "turbospark-test/brand-new-arch-GGUF")
    assert out.returncode == 1 and "unknown model architecture: 'brand-new-arch'" in out.stderr
    out = turbospark(env, "chat", "--model", "someone/not-here-GGUF:Q4_K_M", "--prompt", "x")
    assert out.returncode == 2 and "no downloaded model named 'someone/not-here-GGUF:Q4_K_M'" in out.stderr


def test_nothing_contacts_the_hub_but_search_and_get(env: dict[str, str], standin: HubStandin,
                                                       default_model_path: Path) -> None:
    assert turbospark(env, "model", "list").returncode == 0
    assert turbospark(env, "model", "info", str(default_model_path)).returncode == 0
    assert standin.requests == []


def test_a_gated_repo_asks_for_a_token_and_downloads_with_it(env: dict[str, str], standin: HubStandin) -> None:
    out = turbospark(env, "model", "get", "turbospark-test/gated-GGUF")
    assert out.returncode == 1, out.stderr
    assert "the repo is gated" in out.stderr and "turbospark model token" in out.stderr
    stored = subprocess.run([sys.executable, "-m", "turbospark_app", "model", "token"], env=env, text=True,
                            input="hf_standintoken\n", capture_output=True, timeout=60)
    assert stored.returncode == 0 and "token stored" in stored.stderr
    standin.requests.clear()
    out = turbospark(env, "model", "get", "turbospark-test/gated-GGUF")
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_file()
    auth = {p.split("/")[1]: h.get("authorization") for m, p, _q, h in standin.requests if "gated-Q8_0" in p}
    assert auth["turbospark-test"] == "Bearer hf_standintoken"  # the Hub's resolve
    assert auth["store"] is None  # never sent to the file store
    subprocess.run([sys.executable, "-m", "turbospark_app", "model", "token"], env=env, text=True,
                   input="\n", capture_output=True, timeout=60)
