"""The settings of the PyInstaller build, as plain data a test can check without building.

`packaging/turbospark.spec` imports this module; `tests/test_packaging.py` imports it too, so
"what we exclude" and "what Info.plist says" are checked in a fast test, and the slow test
builds the real app from the very same values.

Nothing here imports PyInstaller at module level (only `hidden_imports` does, lazily), nor
anything heavy from the app: the version is read from `turbospark_app/__init__.py` as text.
"""

from __future__ import annotations

import ast
import functools
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Any, Iterable

PACKAGING_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGING_DIR.parent
APP_PACKAGE_DIR = REPO_ROOT / "turbospark_app"
ENTRY_SCRIPT = PACKAGING_DIR / "launcher.py"
ICON_PNG = REPO_ROOT / "resources" / "icon.png"

APP_NAME = "TurboSpark"
BUNDLE_ID = "app.turbospark.TurboSpark"
MIN_MACOS_VERSION = "12.0"
COPYRIGHT = "Copyright © TurboSpark contributors. Apache-2.0."

BUNDLED_MODELS_DIR = "models"  # must match turbospark_app.host.bundle.BUNDLED_MODELS_DIR
BUNDLED_RESOURCES_DIR = "resources"  # must match turbospark_app.host.bundle.BUNDLED_RESOURCES_DIR
BUNDLE_MODEL_ENV = "TURBOSPARK_BUNDLE_MODEL"
"""Build with this GGUF as the embedded default model instead of the fetched one (it is still
embedded under the default model's file name)."""

# --- Qt modules ----------------------------------------------------------------------------------

QT_MODULES_ALWAYS: tuple[str, ...] = ("QtCore", "QtGui", "QtWidgets")
"""The Qt modules the app is built on; kept even if a source scan were to miss them."""

QT_MODULES_KNOWN_UNUSED: tuple[str, ...] = (
    # Web, QML/Quick and 3D are the big ones (hundreds of MB with their plugins and resources).
    "QtWebEngineCore", "QtWebEngineWidgets", "QtWebEngineQuick", "QtWebChannel", "QtWebSockets",
    "QtWebView", "QtQml", "QtQuick", "QtQuick3D", "QtQuickControls2", "QtQuickWidgets",
    "QtQuickTest", "QtQmlFeatures", "Qt3DCore", "Qt3DRender", "Qt3DInput", "Qt3DLogic",
    "Qt3DExtras", "Qt3DAnimation",
    # Media, documents, devices, data.
    "QtMultimedia", "QtMultimediaWidgets", "QtSpatialAudio", "QtTextToSpeech", "QtPdf",
    "QtPdfWidgets", "QtBluetooth", "QtNfc", "QtSensors", "QtSerialPort", "QtSerialBus",
    "QtPositioning", "QtLocation", "QtSql", "QtCharts", "QtDataVisualization", "QtGraphs",
    "QtGraphsWidgets", "QtCanvasPainter",
    # Tooling and everything else the app never imports.
    "QtDesigner", "QtHelp", "QtUiTools", "QtTest", "QtXml", "QtSvg", "QtSvgWidgets",
    "QtOpenGL", "QtOpenGLWidgets", "QtPrintSupport", "QtConcurrent", "QtDBus", "QtNetwork",
    "QtNetworkAuth", "QtHttpServer", "QtRemoteObjects", "QtScxml", "QtStateMachine",
    "QtLabsStyleKit", "QtAxContainer", "QtAsyncio",
)
"""PySide6 modules to exclude unless the app's sources import them (then they are kept)."""

_QT_DOTTED_RE = re.compile(r"\bPySide6\.(Qt\w+)")

# --- Python modules ------------------------------------------------------------------------------

PYTHON_EXCLUDES: tuple[str, ...] = (
    # GUI toolkits and Qt bindings the app does not use (qasync names them all).
    "tkinter", "_tkinter", "turtle", "turtledemo", "idlelib", "PyQt5", "PyQt6", "PySide2",
    # Test and build tooling that is installed next to the app in the venv.
    "test", "pytest", "_pytest", "pytestqt", "hypothesis", "PyInstaller", "pip", "setuptools",
    "pkg_resources", "distutils", "lib2to3", "pydoc_data",
    # Optional imports of dependencies that the app never reaches.
    "readline", "gguf.scripts", "requests", "PIL", "IPython", "matplotlib",
    # huggingface_hub's Xet storage client (11 MB): optional, the catalog downloads over HTTP;
    # fsspec serves only its HfFileSystem, which the catalog does not use.
    "hf_xet", "fsspec",
    # llama-cpp-python's high-level layer (its Llama class, chat formats, OpenAI server): the app
    # loads only the C binding (model/llamacpp/library.py), so its __init__ never runs. The
    # Llama class imports the openai client lazily, which brought 14 MB (openai, with httpx2 and
    # pygments, which the catalog and the transcript now use themselves); openai is a test
    # dependency here.
    "llama_cpp.server", "llama_cpp.llama", "llama_cpp.llama_chat_format", "llama_cpp.llama_cache",
    "llama_cpp.llama_speculative", "llama_cpp.llama_grammar", "llama_cpp.llama_tokenizer",
    "llama_cpp.llama_types", "llama_cpp._internals", "llama_cpp._logger", "llama_cpp.llava_cpp",
    "llama_cpp.llama_cpp_ext", "openai",
    "numpy.f2py", "numpy.distutils",
    # numpy's submodules the app never uses (numpy 2 imports them only when asked for).
    "numpy.fft", "numpy.polynomial", "numpy.ma", "numpy.testing",
    # keyring's Secret Service backend (Linux) and what it needs (jeepney). The frozen Linux app
    # keeps API keys in the user-only file instead and says so; macOS (Keychain) and Windows
    # (Credential Locker) backends need none of them. (pydantic and cryptography, once left out
    # too, are the MCP SDK's own imports now: tools/.)
    "secretstorage", "jeepney",
    # Hugging Face `tokenizers`: the app tokenizes with llama.cpp's own tokenizer
    # (model/llamacpp/vocab.py); GGUFTokenizer, which builds one with it, reads a GGUF without
    # llama.cpp and is on none of the app's paths.
    "tokenizers",
)

HIDDEN_IMPORTS_EXTRA: tuple[str, ...] = (
    "qasync", "psutil", "platformdirs", "jinja2", "yaml",
    # llama.cpp's binding (model/llamacpp/library.py imports it inside a function).
    "llama_cpp", "llama_cpp.llama_cpp", "llama_cpp._ctypes_extensions", "typing_extensions",
    # The transcript's math (ui/render/math.py imports ziamath inside a function).
    "ziamath", "ziafont", "latex2mathml",
    # The Hugging Face catalog (catalog/): huggingface_hub loads its API lazily by name, over
    # httpx2 (and tqdm for its progress bars).
    "huggingface_hub", "huggingface_hub.hf_api", "huggingface_hub.file_download",
    "huggingface_hub.errors", "huggingface_hub.utils", "huggingface_hub.constants", "httpx2", "tqdm",
    # PDF text for documents (documents/pdf_worker.py imports it in the child, inside a function;
    # pyinstaller-hooks-contrib's hooks bring PDFium's library).
    "pypdfium2", "pypdfium2_raw",
    # libmtmd's binding: image input (model/llamacpp/vision.py imports it on first use).
    "llama_cpp.mtmd_cpp",
    # The MCP SDK's client (tools/server.py imports it inside the server task).
    "mcp", "mcp.client.stdio", "mcp.client.streamable_http", "mcp.shared._httpx_utils", "mcp_types",
)
"""Imported lazily or by name somewhere; collected explicitly so a lazy path cannot miss them."""
DATA_PACKAGES: tuple[str, ...] = ("ziamath", "ziafont", "latex2mathml")
"""Packages whose data files the app reads at run time (math fonts, LaTeX symbol tables)."""
METADATA_PACKAGES: tuple[str, ...] = ("llguidance",)
"""Packages that read their own dist-info when imported (`llguidance.__version__` asks
importlib.metadata): without it in the bundle their import raises PackageNotFoundError."""

QT_PLUGIN_DIRS_EXCLUDED: dict[str, str | None] = {
    # Plugin folders of Qt modules the app does not use -> that module (kept if it is used).
    "qmltooling": "QtQml", "qmllint": "QtQml", "sqldrivers": "QtSql", "multimedia": "QtMultimedia",
    "position": "QtPositioning", "sensors": "QtSensors", "webview": "QtWebView",
    "designer": "QtDesigner", "renderers": "Qt3DRender", "sceneparsers": "Qt3DRender",
    "geometryloaders": "Qt3DRender", "assetimporters": "QtQuick3D", "texttospeech": "QtTextToSpeech",
    "canbus": "QtSerialBus", "printsupport": "QtPrintSupport", "networkinformation": "QtNetwork",
    "tls": "QtNetwork", "scxmldatamodel": "QtScxml",
    # Embedded-Linux input and EGL device integrations: no desktop uses them (None = always).
    "egldeviceintegrations": None, "generic": None,
}
"""Folders under PySide6/Qt/plugins whose plugins are dropped, unless their module is used."""

QT_PLUGINS_EXCLUDED: dict[str, tuple[str, ...]] = {
    # The PDF image format pulls in QtPdf + QtNetwork; the virtual keyboard pulls in QtQuick/QML.
    # Images for vision models are PNG (QtGui's own), JPEG, WebP or GIF (media/images.py): those
    # plugins stay; SVG stays for icon themes, ICO for Windows.
    "imageformats": ("qpdf", "qicns", "qtga", "qtiff", "qwbmp"),
    "platforminputcontexts": ("qtvirtualkeyboardplugin",),
    # Embedded/remote platforms: the desktop app runs on xcb, wayland, cocoa or offscreen.
    "platforms": ("qeglfs", "qlinuxfb", "qminimalegl", "qvnc", "qvkkhrdisplay"),
    # The GTK theme loads the desktop's own libgtk-3 against the cairo/pango/glib copies the
    # bundle would carry (~8 MB, mismatched with that GTK); Qt's own style and the portal theme
    # (native file dialogs) remain.
    "platformthemes": ("qgtk3",),
}
"""Single plugins dropped, by folder and plugin name (file name without lib/suffix)."""

QT_LIBRARIES_EXCLUDED: tuple[str, ...] = (
    "Quick", "Qml", "QmlModels", "QmlMeta", "QmlWorkerScript", "VirtualKeyboard",
    "VirtualKeyboardQml", "Pdf", "Network", "EglFSDeviceIntegration", "EglFsKmsSupport",
)
"""Qt shared libraries (libQt6<X>.so, Qt<X>.framework, Qt6<X>.dll) that only the dropped
plugins need. One is kept when the sources use its module (`Qt<X>`); the slow test checks with
ldd that no kept library, binding or plugin links against a dropped one."""

_QT_LIB_PATTERNS = (
    re.compile(r"^libQt6(\w+?)\.so(\.\d+)*$"),  # Linux
    re.compile(r"^libQt6(\w+?)(\.\d+)*\.dylib$"),  # macOS (non-framework builds)
    re.compile(r"^Qt(\w+?)\.framework$"),  # macOS frameworks: a path component
    re.compile(r"^Qt6(\w+?)\.dll$"),  # Windows
)


def app_version() -> str:
    """`turbospark_app.__version__`, read from the source without importing the package."""
    tree = ast.parse((APP_PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise RuntimeError("turbospark_app/__init__.py defines no __version__ string")


def _qt_names_in(source_text: str) -> set[str]:
    """Qt modules named by the imports of one source file, plus any dotted `PySide6.QtX`
    mention (e.g. an `importlib.import_module("PySide6.QtCharts")` string)."""
    found = set(_QT_DOTTED_RE.findall(source_text))
    try:
        tree = ast.parse(source_text)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "PySide6":
            found.update(alias.name for alias in node.names if alias.name.startswith("Qt"))
    return found


def scan_qt_imports(package_dir: Path = APP_PACKAGE_DIR) -> set[str]:
    """The `PySide6.Qt*` modules the app's Python sources import or name."""
    used: set[str] = set()
    for source in sorted(package_dir.rglob("*.py")):
        used |= _qt_names_in(source.read_text(encoding="utf-8", errors="replace"))
    return used


def installed_qt_modules() -> set[str]:
    """The binding modules of the installed PySide6 (empty when PySide6 is not importable)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return set()
    if spec is None or not spec.submodule_search_locations:
        return set()
    found: set[str] = set()
    for folder in spec.submodule_search_locations:
        for entry in Path(folder).iterdir():
            name = entry.name.split(".", 1)[0]
            if name.startswith("Qt") and entry.suffix in (".so", ".pyd", ".pyi"):
                found.add(name)
    return found


def used_qt_modules() -> set[str]:
    """The Qt modules to keep: the base three plus whatever the sources import."""
    return set(QT_MODULES_ALWAYS) | scan_qt_imports()


def excluded_qt_modules() -> list[str]:
    """Dotted `PySide6.Qt*` names to exclude: every known or installed module not in use."""
    unused = (set(QT_MODULES_KNOWN_UNUSED) | installed_qt_modules()) - used_qt_modules()
    return sorted(f"PySide6.{name}" for name in unused)


def excludes() -> list[str]:
    """The Analysis `excludes`: unused Qt modules and the Python packages listed above."""
    return excluded_qt_modules() + list(PYTHON_EXCLUDES)


LLAMA_CPP_LIB_DEST = "llama_cpp/lib"
"""Where llama-cpp-python's loader looks for libllama and the ggml libraries (beside its
`llama_cpp.py`); the libraries find each other there too (RUNPATH $ORIGIN, @loader_path)."""


def _llama_lib_wanted(name: str) -> bool:
    """A wheel holds each Linux library three times (no symlinks in wheels): libllama.so,
    .so.0, .so.0.5.0. The loader opens libllama.so and libggml.so.0 (device list); the libraries
    link each other by soname (.so.0). macOS dylibs are kept as they come."""
    if name.endswith(".dylib") or name.endswith(".dll"):
        return True
    if name.startswith("libllama.so"):
        return name == "libllama.so"  # opened by name; nothing links against it
    if name.startswith("libmtmd.so"):
        return name == "libmtmd.so"  # (the same: mtmd_cpp opens it by name)
    return bool(re.fullmatch(r"lib[\w.-]+?\.so\.\d+", name))


def llama_cpp_binaries() -> list[tuple[str, str]]:
    """(source, destination folder) of every llama.cpp library the app loads."""
    import llama_cpp  # noqa: F401 - (PyInstaller runs the spec in the build venv)

    lib = Path(llama_cpp.__file__).resolve().parent / "lib"
    return [(str(p), LLAMA_CPP_LIB_DEST) for p in sorted(lib.iterdir())
            if p.is_file() and _llama_lib_wanted(p.name)]


def hidden_imports() -> list[str]:
    """Every `turbospark_app` submodule (the CLI imports subcommands lazily) plus the extras."""
    from PyInstaller.utils.hooks import collect_submodules

    ours = collect_submodules("turbospark_app")
    return sorted(set(ours) | set(HIDDEN_IMPORTS_EXTRA))


def package_datas() -> list[tuple[str, str]]:
    """The Analysis `datas` of DATA_PACKAGES (their fonts and tables, beside their code) and the
    dist-info of METADATA_PACKAGES."""
    from PyInstaller.utils.hooks import collect_data_files, copy_metadata

    return [*(entry for package in DATA_PACKAGES for entry in collect_data_files(package)),
            *(entry for package in METADATA_PACKAGES for entry in copy_metadata(package))]


def _toc_path_parts(dest: str) -> tuple[str, ...]:
    return tuple(part for part in re.split(r"[\\/]", dest) if part)


def plugin_name(file_name: str) -> str:
    """`libqxcb.so` -> "qxcb", `libqcocoa.dylib` -> "qcocoa", `qwindows.dll` -> "qwindows"."""
    stem = file_name.split(".", 1)[0]
    return stem.removeprefix("lib")


def qt_library_module(dest: str) -> str | None:
    """The Qt module of a bundled Qt library path ("Quick" for .../libQt6Quick.so.6 or
    .../QtQuick.framework/...), or None when `dest` is not a Qt library."""
    for part in _toc_path_parts(dest):
        for pattern in _QT_LIB_PATTERNS:
            match = pattern.match(part)
            if match:
                return match.group(1)
    return None


@functools.lru_cache(maxsize=1)
def _used_for_filtering() -> frozenset[str]:
    # keep_toc_entry runs for thousands of entries: scan the sources once per build.
    return frozenset(used_qt_modules())


def keep_toc_entry(dest: str, used: Iterable[str] | None = None) -> bool:
    """False for a collected file the app cannot use: a plugin of an excluded kind, a Qt
    library only those plugins need, or a Qt translation of a module we exclude.

    `used` is the set of Qt modules in use (default: `used_qt_modules()`); a plugin folder or a
    library that belongs to a used module is kept.
    """
    used = _used_for_filtering() if used is None else frozenset(used)
    parts = _toc_path_parts(dest)
    if "plugins" in parts:
        i = parts.index("plugins")
        folder = parts[i + 1] if i + 1 < len(parts) else ""
        if folder in QT_PLUGIN_DIRS_EXCLUDED and QT_PLUGIN_DIRS_EXCLUDED[folder] not in used:
            return False
        if i + 2 < len(parts) and plugin_name(parts[i + 2]) in QT_PLUGINS_EXCLUDED.get(folder, ()):
            return False
    library = qt_library_module(dest)
    if library in QT_LIBRARIES_EXCLUDED and f"Qt{library}" not in used:
        return False
    if "translations" in parts and parts[-1].endswith(".qm"):
        return False  # the UI is English and installs no QTranslator: Qt never reads them (7 MB)
    if "/".join(parts[-3:]) == "llama_cpp/lib/libllama.so.0":
        # libmtmd names libllama by soname, so PyInstaller collects this second copy (3.9 MB);
        # never loaded: libllama.so (the same soname) is loaded before libmtmd, and the dynamic
        # loader matches the soname against it.
        return False
    return True


TocEntry = tuple[str, str, str]
"""A PyInstaller TOC entry: (destination in the bundle, source path or symlink target, typecode)."""


def _symlink_target(entry: TocEntry) -> str:
    """The bundle path a SYMLINK entry points at (its target is relative to its own folder)."""
    dest, target, _ = entry
    return posixpath.normpath(posixpath.join(posixpath.dirname(dest.replace("\\", "/")),
                                             target.replace("\\", "/")))


def keep_toc(entry: TocEntry) -> bool:
    """`keep_toc_entry` for a TOC entry; a SYMLINK is judged by its own path and its target's,
    so PyInstaller's top-level `libQt6Quick.so.6 -> PySide6/Qt/lib/libQt6Quick.so.6` goes when
    the library goes, instead of being left dangling."""
    if not keep_toc_entry(entry[0]):
        return False
    return entry[2] != "SYMLINK" or keep_toc_entry(_symlink_target(entry))


def filter_tocs(
    datas: Iterable[TocEntry], binaries: Iterable[TocEntry]
) -> tuple[list[TocEntry], list[TocEntry]]:
    """`datas` and `binaries` without the entries `keep_toc` rejects."""
    return [e for e in datas if keep_toc(e)], [e for e in binaries if keep_toc(e)]


def slim_linux_binaries(binaries: Iterable[TocEntry], workdir: Path) -> list[TocEntry]:
    """Linux: `packaging/elf.py`'s slimming (libraries nothing links against left out, ICU's
    data stubbed, binaries stripped). A macOS bundle needs none of it: no bundled GTK, Qt
    without ICU, and its binaries are signed afterwards."""
    if not sys.platform.startswith("linux"):
        return list(binaries)
    if str(PACKAGING_DIR) not in sys.path:
        sys.path.insert(0, str(PACKAGING_DIR))
    import elf

    return elf.slim_binaries(binaries, workdir)


def model_to_bundle() -> Path:
    """The GGUF to embed: `$TURBOSPARK_BUNDLE_MODEL`, else the fetched, verified default model.

    Raises SystemExit with the fix when there is none, so the build stops before PyInstaller
    spends minutes on an app that would not work offline.
    """
    override = os.environ.get(BUNDLE_MODEL_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise SystemExit(f"{BUNDLE_MODEL_ENV}={override}: no such file")
        return path.resolve()
    sys.path.insert(0, str(REPO_ROOT))
    from turbospark_app.model.fetch import (
        DEFAULT_MODEL_SHA256,
        default_model_path,
        hash_file,
        is_verified,
    )

    path = default_model_path()
    if not path.is_file():
        raise SystemExit(
            f"the default model is not at {path}: run `make model` (or `turbospark model fetch`) "
            f"first, or set {BUNDLE_MODEL_ENV} to a GGUF"
        )
    if not is_verified(path) and hash_file(path) != DEFAULT_MODEL_SHA256:
        raise SystemExit(f"{path} fails its sha256 check: run `turbospark model fetch` again")
    return path.resolve()


def bundled_model_dest() -> str:
    """Where the model goes inside the bundle, relative to its data root."""
    sys.path.insert(0, str(REPO_ROOT))
    from turbospark_app.model.fetch import DEFAULT_MODEL_FILENAME

    return f"{BUNDLED_MODELS_DIR}/{DEFAULT_MODEL_FILENAME}"


def effective_min_macos(binary_sources: Iterable[str]) -> str:
    """`MIN_MACOS_VERSION`, raised to the highest deployment target among the bundled binaries
    (a wheel built for a newer macOS would crash the app on an older one)."""
    if str(PACKAGING_DIR) not in sys.path:
        sys.path.insert(0, str(PACKAGING_DIR))
    import macho

    highest, found = macho.highest_min_macos(Path(source) for source in binary_sources)
    floor = macho.parse_version(MIN_MACOS_VERSION)
    if highest is None or highest <= floor:
        return MIN_MACOS_VERSION
    print(f"TurboSpark spec: LSMinimumSystemVersion raised from {MIN_MACOS_VERSION} to "
          f"{macho.format_version(highest)}: {found[0][0]} needs it")
    return macho.format_version(highest)


def info_plist(min_macos: str = MIN_MACOS_VERSION) -> dict[str, Any]:
    """Info.plist keys for the macOS BUNDLE (PyInstaller adds the executable/icon keys).

    CFBundleIdentifier and CFBundleShortVersionString are also passed as BUNDLE arguments;
    they are repeated here so this one dict is the whole reviewed Info.plist content.
    `min_macos` is `effective_min_macos(...)` of the bundled binaries.
    """
    version = app_version()
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "CFBundlePackageType": "APPL",
        "CFBundleDevelopmentRegion": "en",
        "LSApplicationCategoryType": "public.app-category.productivity",
        "LSMinimumSystemVersion": min_macos,
        "NSHighResolutionCapable": True,
        "NSSupportsAutomaticGraphicsSwitching": True,
        "NSRequiresAquaSystemAppearance": False,  # follow the system's dark mode
        "NSHumanReadableCopyright": COPYRIGHT,
    }


def pyinstaller_flags() -> dict[str, Any]:
    """The EXE/COLLECT options that matter for size and behaviour (checked by the fast test)."""
    return {
        "name": APP_NAME,
        "console": False,  # no console window; `--self-test` still prints from a terminal
        "upx": False,  # UPX breaks Qt plugins and code signatures, and saves little
        "strip": False,  # stripping Qt/numpy libraries breaks macOS signatures
        "argv_emulation": False,  # the app takes no file-open Apple Events
        "noarchive": False,
    }
