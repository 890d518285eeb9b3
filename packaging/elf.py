"""A leaner Linux bundle: what an ELF binary links against and whether it carries symbols or
debug info, read from its section headers (no binutils needed to read; `strip` and a C compiler
are needed only to strip and to build the ICU data stub).

The spec uses it to leave out shared libraries that nothing kept in the bundle links against
(e.g. the GTK stack that only Qt's gtk3 platform theme needs, once that plugin is dropped) and
to strip the debug info and symbol tables some wheels and the Python build ship (most of
libpython's 23 MB); the dynamic symbols that loading needs stay.

Pure Python, so it is tested on any platform.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

TocEntry = tuple[str, str, str]
"""A PyInstaller TOC entry: (destination in the bundle, source path, typecode)."""

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


def _toc_path_parts(dest: str) -> tuple[str, ...]:
    return tuple(part for part in re.split(r"[\\/]", dest) if part)


def _is_top_level_library(dest: str) -> bool:
    """A shared library PyInstaller put beside the executable because some binary needs it."""
    parts = _toc_path_parts(dest)
    return len(parts) == 1 and parts[0].startswith("lib") and ".so" in parts[0] \
        and not parts[0].startswith("libpython")


def prune_unlinked_libraries(
    binaries: Iterable[TocEntry], needed_of: Callable[[str], tuple[str, ...]] | None = None
) -> list[TocEntry]:
    """`binaries` without the top-level shared libraries that no kept binary links against,
    directly or through another kept library (ELF DT_NEEDED, Linux). What dropping a plugin
    left behind goes with it: Qt's gtk3 theme took cairo, pango, gdk-pixbuf, atk, gio...

    `needed_of(source)` gives a binary's DT_NEEDED names (default: read from the file).
    """
    if needed_of is None:
        def needed_of(source: str) -> tuple[str, ...]:
            info = read_elf_file(Path(source))
            return info.needed if info is not None else ()

    entries = list(binaries)
    candidates = {_toc_path_parts(e[0])[0]: e for e in entries if _is_top_level_library(e[0])}
    reached: set[str] = set()
    todo = [e for e in entries if not _is_top_level_library(e[0])]
    while todo:
        entry = todo.pop()
        if entry[2] == "SYMLINK":
            continue  # its target is an entry of its own
        for name in needed_of(entry[1]):
            if name in candidates and name not in reached:
                reached.add(name)
                todo.append(candidates[name])
    dropped = sorted(set(candidates) - reached)
    if dropped:
        print(f"TurboSpark spec: leaving out {len(dropped)} libraries nothing links against: "
              + ", ".join(dropped))
    return [e for e in entries if not _is_top_level_library(e[0])
            or _toc_path_parts(e[0])[0] in reached]


def strip_binaries(binaries: Iterable[TocEntry], workdir: Path) -> list[TocEntry]:
    """Linux: each binary with a symbol table or debug info (libpython, lib-dynload, Cython and
    Rust extensions) replaced by a stripped copy under `workdir`. Libraries that auditwheel
    vendored (`numpy.libs/...`) are left alone: patchelf rewrote them and strip can corrupt
    that layout. Entries `strip` cannot handle stay as they are."""
    out: list[TocEntry] = []
    saved = 0
    for dest, source, kind in binaries:
        vendored = any(part.endswith(".libs") for part in _toc_path_parts(dest)[:-1])
        info = read_elf_file(Path(source)) if kind != "SYMLINK" and not vendored else None
        if info is not None and info.strippable:
            copy = workdir / "stripped" / dest
            if stripped_copy(Path(source), copy):
                saved += Path(source).stat().st_size - copy.stat().st_size
                source = str(copy)
        out.append((dest, source, kind))
    print(f"TurboSpark spec: symbols and debug info stripped: {saved / 1e6:.1f} MB")
    return out


_ICU_DATA_RE = re.compile(r"^libicudata\.so\.(\d+)$")
ICU_STUB_SOURCE = Path(__file__).resolve().parent / "icu_stub.c"


def stub_icu_data(binaries: Iterable[TocEntry], workdir: Path) -> list[TocEntry]:
    """Linux: Qt's 32 MB ICU data library replaced by an empty one built from
    `packaging/icu_stub.c` (why that is safe: see that file). Needs a C compiler (`cc`); without
    one the real library stays and the build says so."""
    out: list[TocEntry] = []
    for dest, source, kind in binaries:
        match = _ICU_DATA_RE.match(_toc_path_parts(dest)[-1]) if kind != "SYMLINK" else None
        if match:
            stub = workdir / "icu" / match.group(0)
            stub.parent.mkdir(parents=True, exist_ok=True)
            compiler = shutil.which(os.environ.get("CC", "cc"))
            command = [str(compiler), "-shared", "-fPIC", "-O2",
                       f"-DICU_DATA_SYMBOL=icudt{match.group(1)}_dat", f"-Wl,-soname,{match.group(0)}",
                       "-o", str(stub), str(ICU_STUB_SOURCE)]
            proc = subprocess.run(command, capture_output=True, text=True) if compiler else None
            if proc is not None and proc.returncode == 0:
                source = str(stub)
            else:
                why = proc.stderr.strip() if proc is not None else "no C compiler (cc) found"
                print(f"TurboSpark spec: keeping the full {match.group(0)}: {why}")
        out.append((dest, source, kind))
    return out


def slim_binaries(binaries: Iterable[TocEntry], workdir: Path) -> list[TocEntry]:
    """All three above, in order (the spec calls this on Linux only)."""
    return strip_binaries(stub_icu_data(prune_unlinked_libraries(binaries), workdir), workdir)
