"""The Linux bundle's slimming (packaging/elf.py): libraries nothing links against are left out,
binaries are stripped, ICU's data library is replaced by an empty one. The slow test in
test_packaging.py checks the result: the frozen app under its size ceiling, self-test green."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from test_packaging import PACKAGING, _load


@pytest.fixture(scope="module")
def elf() -> ModuleType:
    return _load("elf", PACKAGING / "elf.py")


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF binaries (Linux)")


@linux_only
def test_elf_reads_what_a_library_links_against(elf: ModuleType) -> None:
    import _ctypes

    info = elf.read_elf_file(Path(_ctypes.__file__))
    assert info is not None and any(name.startswith("libffi.so") for name in info.needed)
    assert elf.read_elf_file(Path(__file__)) is None
    data = Path(_ctypes.__file__).read_bytes()
    assert elf.read_elf(data[:100]) is None  # truncated: section headers missing
    assert elf.read_elf(b"\x7fELF" + b"\xff" * 60) is None


def test_libraries_nothing_links_against_are_left_out(elf: ModuleType) -> None:
    needs = {
        "/src/qxcb.so": ("libQt6XcbQpa.so.6", "libxcb-cursor.so.0", "libc.so.6"),
        "/src/qgtk3.so": ("libgtk-3.so.0", "libcairo.so.2"),
        "/src/libxcb-cursor.so.0": ("libxcb-image.so.0",),
        "/src/libcairo.so.2": ("libpixman-1.so.0",),
    }
    binaries = [
        ("PySide6/Qt/plugins/platforms/libqxcb.so", "/src/qxcb.so", "BINARY"),
        ("libxcb-cursor.so.0", "/src/libxcb-cursor.so.0", "BINARY"),
        ("libxcb-image.so.0", "/src/libxcb-image.so.0", "BINARY"),  # through libxcb-cursor
        ("libcairo.so.2", "/src/libcairo.so.2", "BINARY"),  # only the dropped gtk3 theme's
        ("libpixman-1.so.0", "/src/libpixman-1.so.0", "BINARY"),  # only cairo's
        ("libQt6XcbQpa.so.6", "PySide6/Qt/lib/libQt6XcbQpa.so.6", "SYMLINK"),
        ("libpython3.11.so.1.0", "/src/libpython", "BINARY"),  # the executable's: always kept
        ("_cffi_backend.so", "/src/cffi.so", "EXTENSION"),
    ]
    kept = elf.prune_unlinked_libraries(binaries, needed_of=lambda src: needs.get(src, ()))
    assert [e[0] for e in kept] == [
        "PySide6/Qt/plugins/platforms/libqxcb.so", "libxcb-cursor.so.0", "libxcb-image.so.0",
        "libQt6XcbQpa.so.6", "libpython3.11.so.1.0", "_cffi_backend.so"]


@linux_only
@pytest.mark.skipif(shutil.which("strip") is None, reason="needs binutils' strip")
def test_binaries_are_stripped_but_vendored_ones_are_left_alone(elf: ModuleType, tmp_path: Path) -> None:
    import _ctypes

    source = tmp_path / "src" / "_ctypes.so"
    source.parent.mkdir()
    source.write_bytes(Path(_ctypes.__file__).read_bytes())
    if not elf.read_elf_file(source).strippable:
        pytest.skip("this Python's _ctypes has no symbol table to strip")
    out = elf.strip_binaries([("lib-dynload/_ctypes.so", str(source), "EXTENSION"),
                              ("numpy.libs/libopenblas.so", str(source), "BINARY")], tmp_path / "w")
    stripped = Path(out[0][1])
    assert stripped != source and stripped.stat().st_size < source.stat().st_size
    assert not elf.read_elf_file(stripped).strippable
    assert elf.read_elf_file(stripped).needed == elf.read_elf_file(source).needed
    assert out[1] == ("numpy.libs/libopenblas.so", str(source), "BINARY")


@linux_only
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_icu_data_stub_is_an_empty_icu_data_table(elf: ModuleType, tmp_path: Path) -> None:
    import ctypes

    entries = [("PySide6/Qt/lib/libicudata.so.73", "/real/libicudata.so.73", "BINARY"),
               ("PySide6/Qt/lib/libicuuc.so.73", "/real/libicuuc.so.73", "BINARY")]
    out = elf.stub_icu_data(entries, tmp_path)
    stub = Path(out[0][1])
    assert stub.parent == tmp_path / "icu" and out[1] == entries[1]
    assert stub.stat().st_size < 100_000  # the real one: 32 MB
    header = (ctypes.c_uint8 * 32).in_dll(ctypes.CDLL(str(stub)), "icudt73_dat")
    assert bytes(header[:4]) == b"\x20\x00\xda\x27"  # header size 32, ICU's magic
    assert bytes(header[12:16]) == b"ToCP"  # a table of contents...
    assert bytes((ctypes.c_uint8 * 4).from_address(ctypes.addressof(header) + 32)) == b"\0" * 4  # ...of 0
