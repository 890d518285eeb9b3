"""`turbospark_app.host.bundle` (where a frozen app keeps its files) and `turbospark --self-test`."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from turbospark_app.cli import self_test
from turbospark_app.host import bundle
from turbospark_app.model.fetch import DEFAULT_MODEL_FILENAME, MODEL_ENV

REPO = Path(__file__).resolve().parent.parent


# --- bundle.py -----------------------------------------------------------------------------------


def test_not_frozen_in_a_normal_install() -> None:
    assert bundle.is_frozen() is False
    assert bundle.bundle_root() is None
    assert bundle.macos_resources_dir() is None
    assert bundle.bundled_model_path(DEFAULT_MODEL_FILENAME) is None


def test_resource_path_unfrozen_is_the_source_tree() -> None:
    icon = bundle.resource_path("icon.png")
    assert icon == REPO / "resources" / "icon.png"
    assert icon.is_file()


@pytest.mark.parametrize("name", ["", "../secrets.txt", "a/../../b", "/etc/passwd"])
def test_resource_path_rejects_names_outside_resources(name: str) -> None:
    with pytest.raises(ValueError):
        bundle.resource_path(name)


def _freeze(monkeypatch: pytest.MonkeyPatch, meipass: Path, executable: Path) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)
    monkeypatch.setattr(sys, "executable", str(executable))


def test_one_folder_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    internal = tmp_path / "TurboSpark" / "_internal"
    internal.mkdir(parents=True)
    _freeze(monkeypatch, internal, tmp_path / "TurboSpark" / "TurboSpark")
    assert bundle.is_frozen() and bundle.bundle_root() == internal
    assert bundle.macos_resources_dir() is None
    assert bundle.bundled_model_path(DEFAULT_MODEL_FILENAME) is None  # a bundle without the model
    model = internal / "models" / DEFAULT_MODEL_FILENAME
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    assert bundle.bundled_model_path(DEFAULT_MODEL_FILENAME) == model
    assert bundle.bundled_model_path("other.gguf") is None
    (internal / "models" / "other.gguf").write_bytes(b"GGUF")
    assert bundle.bundled_model_path("other.gguf") == internal / "models" / "other.gguf"
    assert bundle.resource_path("icon.png") == internal / "resources" / "icon.png"


def test_macos_app_layout_prefers_contents_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    contents = tmp_path / "TurboSpark.app" / "Contents"
    frameworks, resources = contents / "Frameworks", contents / "Resources"
    (contents / "MacOS").mkdir(parents=True)
    frameworks.mkdir()
    (resources / "models").mkdir(parents=True)
    (resources / "resources").mkdir()
    model = resources / "models" / DEFAULT_MODEL_FILENAME
    model.write_bytes(b"GGUF")
    (resources / "resources" / "icon.png").write_bytes(b"png")
    _freeze(monkeypatch, frameworks, contents / "MacOS" / "TurboSpark")
    assert bundle.macos_resources_dir() == resources
    assert bundle.bundled_model_path(DEFAULT_MODEL_FILENAME) == model
    assert bundle.resource_path("icon.png") == resources / "resources" / "icon.png"
    # A name that exists nowhere resolves under _MEIPASS (the caller reports it missing).
    assert bundle.resource_path("nope.png") == frameworks / "resources" / "nope.png"


# --- self_test: pieces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_name", "plugin"),
    [("libqxcb.so", "xcb"), ("libqcocoa.dylib", "cocoa"), ("qwindows.dll", "windows"),
     ("libqoffscreen.so", "offscreen"), ("libqxcb.so.debug", None), ("README", None),
     ("libfoo.so", None)],
)
def test_platform_plugin_name(file_name: str, plugin: str | None) -> None:
    assert self_test.platform_plugin_name(file_name) == plugin


def test_a_native_library_that_does_not_import_is_named(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert self_test.check_native_libraries() == list(self_test.NATIVE_LIBRARIES)
    # A package whose import breaks inside (as numpy does when its native folder is gone).
    (tmp_path / "brokenlib").mkdir()
    (tmp_path / "brokenlib" / "__init__.py").write_text("open('/nonexistent/_core.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(self_test, "NATIVE_LIBRARIES", ("numpy", "brokenlib"))
    with pytest.raises(self_test.SelfTestError,
                       match=r"^brokenlib does not import: FileNotFoundError.* at __init__.py:1$"):
        self_test.check_native_libraries()


def test_model_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                isolated_dirs: dict[str, Path]) -> None:
    monkeypatch.delenv(MODEL_ENV, raising=False)
    path, source = self_test.resolve_self_test_model(None)
    assert source == "default" and path == isolated_dirs["data"] / "models" / DEFAULT_MODEL_FILENAME
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "env.gguf"))
    assert self_test.resolve_self_test_model(None) == (tmp_path / "env.gguf", MODEL_ENV)
    assert self_test.resolve_self_test_model(str(tmp_path / "flag.gguf")) == (
        tmp_path / "flag.gguf", "--model")


def test_frozen_app_uses_its_bundled_model_or_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_ENV, raising=False)
    internal = tmp_path / "_internal"
    internal.mkdir()
    _freeze(monkeypatch, internal, tmp_path / "TurboSpark")
    with pytest.raises(self_test.SelfTestError, match="no bundled model"):
        self_test.resolve_self_test_model(None)
    model = internal / "models" / DEFAULT_MODEL_FILENAME
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    assert self_test.resolve_self_test_model(None) == (model, "bundled")
    # An explicit choice still wins inside a frozen app.
    assert self_test.resolve_self_test_model("/x/other.gguf")[1] == "--model"


@pytest.fixture
def offscreen(monkeypatch: pytest.MonkeyPatch, qapp: object) -> Iterator[None]:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    yield


def test_check_qt_imports_the_ui_and_renders(offscreen: None) -> None:
    report = self_test.check_qt(frozen=False)
    assert report.platform == "offscreen"
    assert "offscreen" in report.available_platforms
    assert "turbospark_app.ui.main_window" in report.ui_modules
    assert all(name in sys.modules for name in report.ui_modules)


def test_check_qt_fails_when_a_ui_module_does_not_import(
    offscreen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(self_test, "ui_module_names", lambda: ["turbospark_app.ui.no_such_module"])
    with pytest.raises(self_test.SelfTestError, match="no_such_module does not import"):
        self_test.check_qt(frozen=False)


def test_check_qt_fails_when_math_does_not_render(offscreen: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from turbospark_app.ui.render import math as math_render, rich_text

    monkeypatch.setattr(rich_text, "MATH", math_render.MathRenderer())  # nothing cached
    monkeypatch.setattr(math_render, "_svg", lambda *a: None)  # as without ziamath's font
    with pytest.raises(self_test.SelfTestError, match="formula did not render"):
        self_test.check_qt(frozen=False)


def test_check_qt_fails_when_a_frozen_app_lacks_the_native_plugin(
    offscreen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    native = self_test.NATIVE_QT_PLATFORM.get(sys.platform)
    if native is None:
        pytest.skip(f"no native Qt platform known for {sys.platform}")
    monkeypatch.setattr(self_test, "available_platform_plugins", lambda: ["minimal", "offscreen"])
    self_test.check_qt(frozen=False)  # an unfrozen install is not judged on its plugins
    with pytest.raises(self_test.SelfTestError, match=f"native Qt platform plugin '{native}'"):
        self_test.check_qt(frozen=True)


@pytest.mark.parametrize(
    ("env", "expected"),
    [("offscreen", ["offscreen"]), ("xcb:dpi=96", ["xcb"]), ("wayland;xcb", ["wayland", "xcb"]),
     (" wayland-egl ; offscreen:fontengine=freetype ", ["wayland-egl", "offscreen"])],
)
def test_requested_platforms_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str, expected: list[str]
) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", env)
    assert self_test.requested_platforms() == expected


def test_check_qt_fails_before_qt_aborts_on_a_missing_requested_plugin(
    offscreen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "nosuchplatform:option=1")
    with pytest.raises(self_test.SelfTestError, match="'nosuchplatform' is missing"):
        self_test.check_qt(frozen=False)


def test_self_test_reports_a_missing_model_on_stderr(
    offscreen: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = self_test.self_test(argparse.Namespace(model=str(tmp_path / "missing.gguf")))
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.startswith(self_test.FAILED_PREFIX) and "missing.gguf" in err


def test_self_test_reports_an_unexpected_error_with_its_traceback(
    offscreen: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str | None] = []

    def boom(cli_value: str | None) -> None:
        asked.append(cli_value)
        raise ModuleNotFoundError("No module named 'tokenizers'", name="tokenizers")

    monkeypatch.setattr(self_test, "check_model", boom)
    assert self_test.self_test(argparse.Namespace(model="m.gguf")) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert f"{self_test.FAILED_PREFIX}: ModuleNotFoundError: No module named 'tokenizers'" in err
    assert asked == ["m.gguf"]  # --model reaches the model load


# --- self_test: the real model ------------------------------------------------------------------


def _fields(stdout: str) -> dict[str, str]:
    return {k: v for k, sep, v in (line.strip().partition(": ") for line in stdout.splitlines()) if sep}


@pytest.mark.real_model
def test_self_test_with_the_real_model(
    offscreen: None, default_model_path: Path, isolated_dirs: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = self_test.self_test(argparse.Namespace(model=str(default_model_path)))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(self_test.OK_LINE)
    fields = _fields(out)
    assert fields["model"] == str(default_model_path)
    assert fields["model source"] == "--model"
    assert fields["frozen"] == "no"
    assert int(fields["prompt tokens"]) > 5  # the chat template wraps "Say hello."
    assert 1 <= int(fields["new tokens"]) <= self_test.SELF_TEST_MAX_NEW_TOKENS
    assert float(fields["decode tok/s"]) > 0
    assert float(fields["load seconds"]) > 0
    assert fields["reply"].startswith('"') and fields["reply"].endswith('"')
    assert fields["qt platform"] == "offscreen"
    assert fields["engine"].startswith("llama.cpp · CPU") and fields["gpu layers"] == "0"


@pytest.mark.real_model
@pytest.mark.slow
def test_turbospark_self_test_command(default_model_path: Path, tmp_path: Path) -> None:
    """The console entry point dispatches --self-test (exit 0) and fails cleanly (exit 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURBOSPARK_")}
    env.update(QT_QPA_PLATFORM="offscreen", TURBOSPARK_DATA_DIR=str(tmp_path / "data"),
               TURBOSPARK_CACHE_DIR=str(tmp_path / "cache"), TURBOSPARK_CONFIG_DIR=str(tmp_path / "config"))
    command = [sys.executable, "-m", "turbospark_app", "--self-test"]
    ok = subprocess.run(command + ["--model", str(default_model_path)], env=env,
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(self_test.OK_LINE)
    # No --model and an empty data dir: the default model is not there.
    missing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert "FAILED: no model at" in missing.stderr
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
