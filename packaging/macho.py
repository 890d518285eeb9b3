"""The lowest macOS version a Mach-O binary runs on, read from its load commands (no Xcode).

A .app's `LSMinimumSystemVersion` must be at least the deployment target of every library in it
(PySide6, numpy and tokenizers wheels each have their own), or the app would pass Gatekeeper on
an older Mac and then crash at launch. The spec raises `LSMinimumSystemVersion` to what the
bundled binaries need; `build_macos.sh` re-checks the finished bundle:

    python packaging/macho.py dist/TurboSpark.app          # exit 1 if Info.plist is too low

Pure Python, so it is tested on any platform.
"""

from __future__ import annotations

import plistlib
import struct
import sys
from pathlib import Path
from typing import Iterable

Version = tuple[int, int]

_FAT_MAGIC = 0xCAFEBABE
_FAT_MAGIC_64 = 0xCAFEBABF
_MH_MAGIC = 0xFEEDFACE
_MH_MAGIC_64 = 0xFEEDFACF
_LC_VERSION_MIN_MACOSX = 0x24
_LC_BUILD_VERSION = 0x32
_PLATFORM_MACOS = 1


def _decode(packed: int) -> Version:
    """xxxx.yy.zz nibble-packed version -> (major, minor)."""
    return packed >> 16, (packed >> 8) & 0xFF


def _thin_min_os(data: bytes, offset: int) -> Version | None:
    """The minimum macOS of one (thin) Mach-O image starting at `offset`, or None."""
    if len(data) < offset + 28:
        return None
    magic_le = struct.unpack_from("<I", data, offset)[0]
    if magic_le in (_MH_MAGIC, _MH_MAGIC_64):
        endian = "<"
    elif struct.unpack_from(">I", data, offset)[0] in (_MH_MAGIC, _MH_MAGIC_64):
        endian = ">"
    else:
        return None
    magic = struct.unpack_from(endian + "I", data, offset)[0]
    ncmds = struct.unpack_from(endian + "I", data, offset + 16)[0]
    cursor = offset + (32 if magic == _MH_MAGIC_64 else 28)
    for _ in range(ncmds):
        if len(data) < cursor + 8:
            return None
        cmd, size = struct.unpack_from(endian + "II", data, cursor)
        if cmd == _LC_BUILD_VERSION and len(data) >= cursor + 16:
            platform, minos = struct.unpack_from(endian + "II", data, cursor + 8)
            if platform == _PLATFORM_MACOS:
                return _decode(minos)
        elif cmd == _LC_VERSION_MIN_MACOSX and len(data) >= cursor + 12:
            return _decode(struct.unpack_from(endian + "I", data, cursor + 8)[0])
        if size < 8:
            return None
        cursor += size
    return None


_LOAD_COMMANDS_READ = 1 << 16  # load commands sit right after the header, well within this


def _fat_slices(head: bytes) -> list[int] | None:
    """The slice offsets of a universal binary's header, or None when `head` is not one."""
    if len(head) < 8:
        return None
    magic, count = struct.unpack_from(">II", head, 0)
    if magic not in (_FAT_MAGIC, _FAT_MAGIC_64) or count > 16:
        return None  # count > 16: a Java .class file, which shares 0xCAFEBABE
    entry = 32 if magic == _FAT_MAGIC_64 else 20
    offsets = []
    for i in range(count):
        fields = head[8 + i * entry: 8 + (i + 1) * entry]
        if len(fields) < entry:
            return offsets
        if magic == _FAT_MAGIC_64:
            offsets.append(struct.unpack(">iiQQII", fields)[2])
        else:
            offsets.append(struct.unpack(">iiIII", fields)[2])
    return offsets


def min_macos_of_bytes(data: bytes) -> Version | None:
    """The highest minimum macOS over the slices of a thin or universal Mach-O; None if `data`
    is not a Mach-O or declares no macOS minimum."""
    offsets = _fat_slices(data)
    if offsets is None:
        return _thin_min_os(data, 0)
    versions = [v for offset in offsets if (v := _thin_min_os(data, offset))]
    return max(versions) if versions else None


def min_macos(path: Path) -> Version | None:
    """`min_macos_of_bytes` of a file, reading only the headers of each slice."""
    try:
        with path.open("rb") as f:
            head = f.read(_LOAD_COMMANDS_READ)
            offsets = _fat_slices(head)
            if offsets is None:
                return _thin_min_os(head, 0)
            versions = []
            for offset in offsets:
                f.seek(offset)
                found = _thin_min_os(f.read(_LOAD_COMMANDS_READ), 0)
                if found:
                    versions.append(found)
    except OSError:
        return None
    return max(versions) if versions else None


def highest_min_macos(paths: Iterable[Path]) -> tuple[Version | None, list[tuple[Path, Version]]]:
    """The highest minimum over `paths` and every (file, minimum) found, highest first."""
    found = [(p, v) for p in paths if p.is_file() and not p.is_symlink() and (v := min_macos(p))]
    found.sort(key=lambda item: item[1], reverse=True)
    return (found[0][1] if found else None), found


def parse_version(text: str) -> Version:
    """"12.0" -> (12, 0); "13" -> (13, 0)."""
    parts = [int(p) for p in text.split(".")[:2]]
    return parts[0], parts[1] if len(parts) > 1 else 0


def format_version(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def check_app(app: Path) -> int:
    """0 when the .app's LSMinimumSystemVersion covers every binary in it, else 1 (and why)."""
    with (app / "Contents" / "Info.plist").open("rb") as f:
        declared = parse_version(str(plistlib.load(f).get("LSMinimumSystemVersion", "10.13")))
    highest, found = highest_min_macos(app.rglob("*"))
    if highest is None:
        print(f"{app}: no Mach-O binaries found", file=sys.stderr)
        return 1
    print(f"{app}: LSMinimumSystemVersion {format_version(declared)}, "
          f"binaries need {format_version(highest)} ({found[0][0].name})")
    if highest > declared:
        for path, version in found:
            if version > declared:
                print(f"  needs macOS {format_version(version)}: {path.relative_to(app)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} path/to/App.app")
    sys.exit(check_app(Path(sys.argv[1])))
