"""The macOS deployment target (packaging/macho.py): read from Mach-O load commands, and the
Info.plist's LSMinimumSystemVersion raised to what the bundled binaries need."""

from __future__ import annotations

import plistlib
from pathlib import Path
from types import ModuleType

import pytest

from test_packaging import PACKAGING, _load, cfg  # noqa: F401 (cfg: the fixture)


def _thin_macho(minos: tuple[int, int] | None, *, legacy: bool = False) -> bytes:
    """A minimal 64-bit little-endian Mach-O header with one version load command."""
    import struct

    commands = b""
    if minos is not None:
        packed = (minos[0] << 16) | (minos[1] << 8)
        if legacy:  # LC_VERSION_MIN_MACOSX
            commands = struct.pack("<IIII", 0x24, 16, packed, packed)
        else:  # LC_BUILD_VERSION, platform macOS, no tools
            commands = struct.pack("<IIIIII", 0x32, 24, 1, packed, packed, 0)
    segment = struct.pack("<II", 0x19, 8)  # an unrelated command first (LC_SEGMENT_64 stub)
    ncmds = 2 if commands else 1
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 6, ncmds,
                         len(segment) + len(commands), 0, 0)
    return header + segment + commands


def _fat(*slices: bytes) -> bytes:
    import struct

    offset = 4096
    table, body = b"", b""
    for blob in slices:
        table += struct.pack(">iiIII", 0x0100000C, 0, offset + len(body), len(blob), 12)
        body += blob + b"\0" * (-len(blob) % 4096)
    header = struct.pack(">II", 0xCAFEBABE, len(slices)) + table
    return header + b"\0" * (offset - len(header)) + body


@pytest.fixture(scope="module")
def macho() -> ModuleType:
    return _load("macho", PACKAGING / "macho.py")


def test_macho_minimum_macos(macho: ModuleType) -> None:
    assert macho.min_macos_of_bytes(_thin_macho((13, 0))) == (13, 0)
    assert macho.min_macos_of_bytes(_thin_macho((11, 3), legacy=True)) == (11, 3)
    assert macho.min_macos_of_bytes(_thin_macho(None)) is None
    assert macho.min_macos_of_bytes(_fat(_thin_macho((11, 0)), _thin_macho((13, 3)))) == (13, 3)
    assert macho.min_macos_of_bytes(b"\x7fELF" + b"\0" * 60) is None
    assert macho.min_macos_of_bytes(b"\xca\xfe\xba\xbe\x00\x00\x00\x34" + b"\0" * 64) is None  # Java
    assert macho.min_macos_of_bytes(_thin_macho((13, 0))[:40]) is None  # truncated


def test_min_macos_is_raised_to_what_the_binaries_need(
    cfg: ModuleType, macho: ModuleType, tmp_path: Path
) -> None:
    old, new = tmp_path / "old.so", tmp_path / "new.dylib"
    old.write_bytes(_thin_macho((11, 0)))
    new.write_bytes(_fat(_thin_macho((12, 0)), _thin_macho((14, 2))))
    assert cfg.effective_min_macos([str(old)]) == cfg.MIN_MACOS_VERSION == "12.0"
    assert cfg.effective_min_macos([str(old), str(new), str(tmp_path / "gone")]) == "14.2"
    assert cfg.info_plist("14.2")["LSMinimumSystemVersion"] == "14.2"

    app = tmp_path / "TurboSpark.app" / "Contents"
    (app / "Frameworks").mkdir(parents=True)
    (app / "Info.plist").write_bytes(plistlib.dumps(cfg.info_plist()))
    (app / "Frameworks" / "old.so").write_bytes(old.read_bytes())
    assert macho.check_app(app.parent) == 0
    (app / "Frameworks" / "new.dylib").write_bytes(new.read_bytes())
    assert macho.check_app(app.parent) == 1
