"""`turbospark --self-test`: a headless smoke test of an installed or frozen TurboSpark.

It checks the two halves a packaged app can lose to a missing hidden import, Qt plugin or data
file:

1. Qt: the platform plugins are present (when frozen, the native one - cocoa on macOS, xcb on
   Linux - must be bundled even if the test itself runs offscreen), a QApplication starts, every
   `turbospark_app.ui` module imports, and a small widget renders (fonts, style).
2. The model: the GGUF is resolved (`--model`, else `TURBOSPARK_MODEL`, else - when frozen - the
   model embedded in the bundle, else the default model's path), loaded through the chat
   backend (llama.cpp), and one short greedy turn ("Say hello.", at most 8 new tokens) is
   generated. On Apple Silicon the model must run on the GPU (llama.cpp's Metal device): a
   bundle whose Metal backend is missing or refused fails here instead of decoding slowly on the
   CPU (`SELF_TEST_ALLOW_CPU=1` lifts that, for a Mac without Metal).

On success it prints a summary (model, load seconds, prompt/new tokens, decode tok/s, the reply,
the Qt platform) on stdout and returns 0; on any failure it prints what failed on stderr and
returns 1. Without a display on Linux it runs Qt offscreen; on a desktop it uses the native
platform, so the native plugin is exercised. On macOS run it from a terminal as
`TurboSpark.app/Contents/MacOS/TurboSpark --self-test`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SELF_TEST_PROMPT = "Say hello."
SELF_TEST_MAX_NEW_TOKENS = 8
SELF_TEST_SESSION = "self-test"
OK_LINE = "TurboSpark self-test: OK"
FAILED_PREFIX = "TurboSpark self-test: FAILED"

# The platform plugin Qt uses on a desktop, per sys.platform; a frozen app must bundle it.
NATIVE_QT_PLATFORM = {"darwin": "cocoa", "linux": "xcb", "win32": "windows"}


class SelfTestError(RuntimeError):
    """A self-test check failed; the message says which and why."""


@dataclass
class QtReport:
    """What the Qt half of the self-test found."""

    platform: str
    qt_version: str
    pyside_version: str
    available_platforms: list[str]
    ui_modules: list[str]


@dataclass
class ModelReport:
    """What the model half of the self-test found."""

    path: Path
    source: str
    load_seconds: float
    prompt_tokens: int
    new_tokens: int
    prefill_seconds: float
    decode_seconds: float
    decode_tokens_per_sec: float
    stop_reason: str
    reply: str
    engine: str = "?"  # what runs it: "llama.cpp · CPU AVX2 · 2 threads", "llama.cpp · MTL0"
    gpu_layers: int = 0


@dataclass
class SelfTestReport:
    """The whole self-test's findings (printed by `format_summary`)."""

    frozen: bool
    qt: QtReport
    model: ModelReport
    total_seconds: float
    python: str = field(default_factory=lambda: sys.version.split()[0])
    vision: str = ""  # image input's native parts (check_vision)
    capabilities: str = ""  # the MCP client and PDF text (check_capabilities)


# --- Qt ------------------------------------------------------------------------------------------


def requested_platforms() -> list[str]:
    """The QPA platforms Qt will try, in order: QT_QPA_PLATFORM's ";"-separated candidates
    (without their ":options"), else the native one. Empty when neither is known."""
    requested = os.environ.get("QT_QPA_PLATFORM", "").strip()
    if requested:
        names = [part.split(":", 1)[0].strip() for part in requested.split(";")]
        return [name for name in names if name]
    native = NATIVE_QT_PLATFORM.get(sys.platform)
    return [native] if native else []


def _default_to_offscreen_without_display() -> None:
    """On Linux with no X11/Wayland display, run Qt offscreen instead of aborting in xcb."""
    if os.environ.get("QT_QPA_PLATFORM", "").strip():
        return
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"


def _plugin_dirs() -> list[Path]:
    """Every folder Qt looks for plugins in (QLibraryInfo, QT_PLUGIN_PATH, library paths)."""
    from PySide6.QtCore import QCoreApplication, QLibraryInfo

    candidates = [QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)]
    candidates += [p for p in os.environ.get("QT_PLUGIN_PATH", "").split(os.pathsep) if p]
    candidates += list(QCoreApplication.libraryPaths())
    dirs: list[Path] = []
    for c in candidates:
        path = Path(c)
        if path.is_dir() and path not in dirs:
            dirs.append(path)
    return dirs


def platform_plugin_name(file_name: str) -> str | None:
    """`libqxcb.so` -> "xcb", `libqcocoa.dylib` -> "cocoa", `qwindows.dll` -> "windows"."""
    stem, dot, suffix = file_name.partition(".")
    if not dot or suffix not in ("so", "dylib", "dll"):
        return None
    stem = stem.removeprefix("lib")
    return stem[1:] if stem.startswith("q") and len(stem) > 1 else None


def available_platform_plugins() -> list[str]:
    """The QPA platform plugins present on disk (e.g. ["cocoa", "minimal", "offscreen"])."""
    found: set[str] = set()
    for folder in _plugin_dirs():
        platforms = folder / "platforms"
        if platforms.is_dir():
            for entry in platforms.iterdir():
                name = platform_plugin_name(entry.name)
                if name:
                    found.add(name)
    return sorted(found)


def ui_module_names() -> list[str]:
    """Every module of the `turbospark_app.ui` package (empty when there is no UI package)."""
    try:
        ui = importlib.import_module("turbospark_app.ui")
    except ModuleNotFoundError as exc:
        if exc.name in ("turbospark_app.ui",):
            return []
        raise
    return sorted(
        f"{ui.__name__}.{info.name}" for info in pkgutil.iter_modules(list(ui.__path__))
    )


# Libraries with native parts that a bundle can lose; imported first so their loss is named.
NATIVE_LIBRARIES = ("numpy", "psutil")  # llama.cpp: the model half loads it


def _where(exc: BaseException) -> str:
    """The innermost frame of an import failure ("multiarray.py:12"), to name what broke."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def check_native_libraries() -> list[str]:
    """Import the libraries with native parts; raises naming the one that does not import."""
    for name in NATIVE_LIBRARIES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise SelfTestError(f"{name} does not import: {exc!r}{_where(exc)}") from exc
    return list(NATIVE_LIBRARIES)


VISION_IMAGE_FORMATS = ("gif", "jpeg", "png", "webp")  # media/images.py's (Qt's readers)


def check_vision() -> str:
    """Image input's native parts: libmtmd loads, and Qt reads the formats images come in.
    Raises naming what is missing (a bundle without them would refuse every image)."""
    from PySide6.QtGui import QImageReader

    from ..model.llamacpp.vision import VisionUnavailable, mtmd

    try:
        mtmd()
    except VisionUnavailable as exc:
        raise SelfTestError(str(exc)) from exc
    readable = {bytes(f.data()).decode() for f in QImageReader.supportedImageFormats()}
    missing = [f for f in VISION_IMAGE_FORMATS if f not in readable]
    if missing:
        raise SelfTestError(f"Qt cannot read {', '.join(missing)} images (its image format plugins "
                            "are missing)")
    return "libmtmd; images: " + " ".join(VISION_IMAGE_FORMATS)


def check_capabilities() -> str:
    """The MCP SDK's client (tools) and PDFium (documents) import: both are loaded only when
    first used, so a bundle that lost them would fail then, not at start. Raises naming what is
    missing."""
    import importlib

    found = []
    for label, module in (("mcp", "mcp.client.stdio"), ("mcp http", "mcp.client.streamable_http"),
                          ("pdfium", "pypdfium2")):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any failure to import is the finding
            raise SelfTestError(f"{module} does not import ({type(exc).__name__}: {exc})") from exc
        found.append(label)
    return ", ".join(found)


def check_qt(*, frozen: bool) -> QtReport:
    """Start a QApplication, import the UI modules and render a small widget. Raises on failure."""
    _default_to_offscreen_without_display()
    try:
        import PySide6
        from PySide6.QtCore import qVersion
        from PySide6.QtWidgets import QApplication, QLabel
    except ImportError as exc:
        raise SelfTestError(f"Qt (PySide6) does not import: {exc}") from exc

    available = available_platform_plugins()
    requested = requested_platforms()
    # Checked before QApplication exists: a missing platform plugin makes Qt abort the process.
    if requested and not set(requested) & set(available):
        raise SelfTestError(
            f"the Qt platform plugin {' or '.join(map(repr, requested))} is missing (plugins found: "
            f"{', '.join(available) or 'none'}; searched {', '.join(map(str, _plugin_dirs()))})"
        )
    native = NATIVE_QT_PLATFORM.get(sys.platform)
    if frozen and native and native not in available:
        raise SelfTestError(
            f"the frozen app lacks the native Qt platform plugin {native!r} "
            f"(plugins found: {', '.join(available) or 'none'})"
        )

    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "turbospark"])
    if not isinstance(app, QApplication):
        raise SelfTestError(f"a non-widget {type(app).__name__} already exists in this process")

    modules = ui_module_names()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise SelfTestError(f"UI module {name} does not import: {exc!r}") from exc

    label = QLabel("TurboSpark self-test")
    label.adjustSize()
    pixmap = label.grab()
    label.deleteLater()
    if pixmap.isNull() or pixmap.width() == 0:
        raise SelfTestError("a QLabel rendered to an empty pixmap")
    _check_rich_reply()
    return QtReport(
        platform=app.platformName(),
        qt_version=qVersion(),
        pyside_version=PySide6.__version__,
        available_platforms=available,
        ui_modules=modules,
    )


RICH_PROBE = "```python\ndef f(x):\n    return x\n```\n\n$$\\frac{a}{b}$$"


def _check_rich_reply() -> None:
    """A reply with code and math drawn as the transcript draws it: Pygments' lexers and
    ziamath's font are data a bundle can lose."""
    from PySide6.QtGui import QPalette, QTextCursor

    from turbospark_app.ui.pane.transcript import Entry, Transcript

    view = Transcript()
    view.set_entries([Entry("assistant", RICH_PROBE)])
    if "\ufffc" not in view.document().toPlainText():
        raise SelfTestError("a formula did not render (ziamath or its math font missing?)")
    found = view.document().find("def")
    cursor = QTextCursor(view.document())
    cursor.setPosition(found.selectionStart() + 1)
    if cursor.charFormat().foreground().color() == view.palette().color(QPalette.ColorRole.Text):
        raise SelfTestError("code was not coloured (Pygments' Python lexer missing?)")
    view.deleteLater()


# --- the model ------------------------------------------------------------------------------------


def resolve_self_test_model(cli_value: str | None) -> tuple[Path, str]:
    """The GGUF to test and where its choice came from ("--model", "TURBOSPARK_MODEL", "bundled",
    "default"). A frozen app without `--model`/TURBOSPARK_MODEL must use its bundled model."""
    from ..host.bundle import bundled_model_path, is_frozen
    from ..model.fetch import DEFAULT_MODEL_FILENAME, MODEL_ENV, resolve_model_path

    if cli_value and cli_value.strip():
        return resolve_model_path(cli_value), "--model"
    if os.environ.get(MODEL_ENV, "").strip():
        return resolve_model_path(None), MODEL_ENV
    if is_frozen():
        bundled = bundled_model_path(DEFAULT_MODEL_FILENAME)
        if bundled is None:
            raise SelfTestError("this frozen app has no bundled model (models/ is missing from it)")
        return bundled, "bundled"
    return resolve_model_path(None), "default"


def gpu_required() -> bool:
    """On Apple Silicon the model must decode on Metal (unless SELF_TEST_ALLOW_CPU is set)."""
    import platform

    return (sys.platform == "darwin" and platform.machine() == "arm64"
            and not os.environ.get("SELF_TEST_ALLOW_CPU", "").strip())


def check_model(cli_value: str | None) -> ModelReport:
    """Load the model and generate one short greedy turn. Raises on failure."""
    path, source = resolve_self_test_model(cli_value)
    if not path.is_file():
        raise SelfTestError(f"no model at {path} (from {source}); run `turbospark model fetch`")

    from ..chat.api import ChatMessage, TurnSettings
    from ..chat.backend import load_backend
    from ..engine import (
        GenerationConfig,
        RawDecodeProgress,
        StopReason,
        TailProgress,
        TokenProgress,
        drive_raw_completion,
    )

    start = time.perf_counter()
    backend = load_backend(path, session_slots=1)
    load_seconds = time.perf_counter() - start
    info = backend.model_info()
    if gpu_required() and not info.get("gpu_layers"):
        raise SelfTestError(f"the model runs on the CPU ({info.get('runs_on')}), not on Metal: "
                            "llama.cpp found no GPU device in this build")

    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=SELF_TEST_MAX_NEW_TOKENS))
    turn = backend.prepare_turn(SELF_TEST_SESSION, [ChatMessage("user", SELF_TEST_PROMPT)], settings)
    pieces: list[str] = []

    def on_progress(event: RawDecodeProgress) -> None:
        if isinstance(event, TokenProgress):
            pieces.append(event.delta)
        elif isinstance(event, TailProgress):
            pieces.append(event.text)

    def never() -> bool:
        return False

    stream = backend.stream_turn(turn, cancel=never)
    result = drive_raw_completion(stream, settings.generation.rate, never, on_progress)
    if result.reason is StopReason.CANCELLED:
        raise SelfTestError("the self-test turn was cancelled although nothing cancelled it")
    if result.new_tokens < 1:
        raise SelfTestError(f"the model generated no tokens (stop reason {result.reason.value})")
    return ModelReport(
        path=path,
        source=source,
        load_seconds=load_seconds,
        prompt_tokens=result.prompt_tokens,
        new_tokens=result.new_tokens,
        prefill_seconds=result.prefill_seconds,
        decode_seconds=result.decode_seconds,
        decode_tokens_per_sec=result.decode_tokens_per_sec,
        stop_reason=result.reason.value,
        reply="".join(pieces),
        engine=str(info.get("runs_on") or "?"),
        gpu_layers=int(info.get("gpu_layers") or 0),
    )


# --- the command ----------------------------------------------------------------------------------


def run_self_test(model: str | None = None) -> SelfTestReport:
    """Both halves of the self-test; raises (SelfTestError or the underlying error) on failure."""
    from ..host.bundle import is_frozen

    start = time.perf_counter()
    frozen = is_frozen()
    check_native_libraries()
    qt = check_qt(frozen=frozen)
    vision = check_vision()
    capabilities = check_capabilities()
    model_report = check_model(model)
    return SelfTestReport(
        frozen=frozen, qt=qt, model=model_report, total_seconds=time.perf_counter() - start,
        vision=vision, capabilities=capabilities,
    )


def summary_fields(report: SelfTestReport) -> dict[str, Any]:
    """The summary as ordered key/value pairs (what `format_summary` prints)."""
    from .. import __version__

    m, q = report.model, report.qt
    return {
        "version": __version__,
        "frozen": "yes" if report.frozen else "no",
        "python": report.python,
        "model": str(m.path),
        "model source": m.source,
        "engine": m.engine,
        "gpu layers": m.gpu_layers,
        "load seconds": f"{m.load_seconds:.2f}",
        "prompt tokens": m.prompt_tokens,
        "new tokens": m.new_tokens,
        "prefill seconds": f"{m.prefill_seconds:.2f}",
        "decode tok/s": f"{m.decode_tokens_per_sec:.1f}",
        "stop reason": m.stop_reason,
        "reply": json.dumps(m.reply, ensure_ascii=False),
        "qt platform": q.platform,
        "qt platforms bundled": ", ".join(q.available_platforms),
        "qt version": f"{q.qt_version} (PySide6 {q.pyside_version})",
        "ui modules imported": len(q.ui_modules),
        "vision": report.vision,
        "tools and documents": report.capabilities,
        "total seconds": f"{report.total_seconds:.2f}",
    }


def format_summary(report: SelfTestReport) -> str:
    """`OK_LINE` followed by one "  key: value" line per summary field."""
    lines = [OK_LINE]
    lines += [f"  {key}: {value}" for key, value in summary_fields(report).items()]
    return "\n".join(lines)


def self_test(args: argparse.Namespace) -> int:
    """`turbospark --self-test [--model GGUF]`: 0 and a summary on stdout, or 1 and why on stderr."""
    try:
        report = run_self_test(getattr(args, "model", None))
    except SelfTestError as exc:
        print(f"{FAILED_PREFIX}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{FAILED_PREFIX}: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a smoke test reports every failure as exit 1
        traceback.print_exc(file=sys.stderr)
        print(f"{FAILED_PREFIX}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(format_summary(report), flush=True)
    return 0
