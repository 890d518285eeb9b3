"""What a Linux (ELF) binary links against and whether it carries debug info, read from its
section headers (no binutils needed to read; `strip` is needed only to strip).

The spec uses it to leave out shared libraries that nothing kept in the bundle links against
(e.g. the GTK stack that only Qt's gtk3 platform theme needs, once that plugin is dropped) and
to strip the debug info and symbol tables some wheels and the Python build ship (most of
libpython's 23 MB); the dynamic symbols that loading needs stay.

Pure Python, so it is tested on any platform.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ELF_MAGIC = b"\x7fELF"
_SHT_DYNAMIC = 6
_DT_NEEDED = 1


@dataclass(frozen=True)
class ElfInfo:
    needed: tuple[str, ...]  # DT_NEEDED: the shared libraries it links against, by file name
    strippable: bool  # has a .symtab or .debug_* section (what `strip --strip-unneeded` removes)


def read_elf(data: bytes) -> ElfInfo | None:
    """The ELF facts of `data`, or None when it is not a (well-formed) ELF file."""
    if len(data) < 64 or data[:4] != _ELF_MAGIC or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide = data[4] == 2  # ELFCLASS64
    end = "<" if data[5] == 1 else ">"
    try:
        if wide:
            shoff, = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)
        sections = []
        for i in range(shnum):
            at = shoff + i * shentsize
            if wide:
                name, kind, _, _, offset, size, link = struct.unpack_from(end + "IIQQQQI", data, at)
            else:
                name, kind, _, _, offset, size, link = struct.unpack_from(end + "IIIIIII", data, at)
            sections.append((name, kind, offset, size, link))
    except struct.error:
        return None

    def c_string(table: int, index: int) -> str:
        if not 0 <= table < len(sections):
            return ""
        start = sections[table][2] + index
        stop = data.find(b"\0", start)
        return data[start:stop if stop >= 0 else None].decode("utf-8", "replace")

    names = [c_string(shstrndx, s[0]) for s in sections]
    needed: list[str] = []
    for _, kind, offset, size, link in sections:
        if kind != _SHT_DYNAMIC:
            continue
        step = 16 if wide else 8
        fmt = end + ("qQ" if wide else "iI")
        for at in range(offset, min(offset + size, len(data) - step + 1), step):
            tag, value = struct.unpack_from(fmt, data, at)
            if tag == 0:  # DT_NULL ends the table
                break
            if tag == _DT_NEEDED:
                needed.append(c_string(link, value))
    return ElfInfo(tuple(needed), any(n == ".symtab" or n.startswith(".debug_") for n in names))


def read_elf_file(path: Path) -> ElfInfo | None:
    """`read_elf` of a file (None for an unreadable or non-ELF file)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != _ELF_MAGIC:
                return None
            return read_elf(_ELF_MAGIC + f.read())
    except OSError:
        return None


def stripped_copy(source: Path, dest: Path) -> bool:
    """Write `source` without its debug info and static symbol table to `dest` (`strip
    --strip-unneeded`: code and the dynamic symbols stay). False when there is no `strip` or it
    failed (then use `source` as is)."""
    tool = shutil.which("strip")
    if tool is None:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([tool, "--strip-unneeded", "-o", str(dest), str(source)],
                          capture_output=True, text=True)
    return proc.returncode == 0 and dest.is_file()
