"""Kernels of the ``llvm`` target linked into this process by LLVM's own linker (ORC JIT).

Entry points: :func:`in_process_available`, :func:`link_in_process`.

A library built to be run here (a ``relay.build`` in this process, a ``kiln.jit`` segment)
need not become a file: its object files are linked in memory by llvmlite's ORC JIT
(JITLink), which takes about a millisecond where ``ld -shared``, writing the ``.so`` and
``dlopen`` took 15-30 ms. ``export_library`` still links the same objects into a real
shared library (:class:`kiln.target.build.NativeModule` keeps them).

The undefined symbols of the objects are resolved here, one by one, before LLVM links:
against the other objects, then kiln's runtime support library (loaded ``RTLD_GLOBAL``:
``TVMBackendParallelLaunch``, ``TVMAPISetLastError``...) and the process (libm, libc). A
symbol found nowhere is a :class:`TVMError` naming it (LLVM itself would only say which
function failed to materialize). So is an object whose headers are damaged (e.g. a corrupted
``KILN_CACHE_DIR/llvm`` entry): JITLink trusts them and would abort the process. Objects
with static constructors (a ``system-lib``'s registration) are not linked here: ORC does
not run them; nor a library defining a function it also calls from the process (a kernel
named ``exp``): the dynamic loader binds such a call to the process's definition, a JIT to
the library's own. Both take the ``.so`` path.

Thread and fork safety: every call into LLVM goes through llvmlite's process-wide lock
(a fork waits for it: :mod:`.llvm_fork`), and each process makes its own JIT; a forked
child keeps calling the code it inherited (the pages are copied with the rest).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import struct
import threading
from collections.abc import Mapping
from typing import Any

from kiln.runtime.error import TVMError
from kiln.runtime.module import InProcessLibrary
from kiln.runtime.packed_func import runtime_library
from kiln.target.llvm_toolchain import initialized_llvm

__all__ = ["in_process_available", "link_in_process"]

# Symbols the JIT linker defines itself (x86-64 PIC code may name the GOT)
_LINKER_DEFINED = frozenset({"_GLOBAL_OFFSET_TABLE_"})
# Sections whose code the dynamic loader runs at load time and ORC's linker would not
_CONSTRUCTOR_SECTIONS = (b".init_array", b".preinit_array", b".ctors")

_JIT: list[Any] = []  # [(pid, LLJIT)]: a forked child makes its own
# JITs of parent processes, kept alive in a forked child: disposing one frees the code (and the
# trackers' session) that libraries the child inherited still call into
_INHERITED_JITS: list[Any] = []
_JIT_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    global _JIT_LOCK
    _JIT_LOCK = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_new_lock_in_child)
_LIBRARY_NUMBERS = itertools.count()  # a JIT library's name is used once


def in_process_available() -> bool:
    """Whether this llvmlite offers the ORC JIT linker (llvmlite >= 0.42) and kiln may use
    it (``KILN_LLVM_IN_PROCESS=0`` makes every library a ``.so``, as before)."""
    if os.environ.get("KILN_LLVM_IN_PROCESS", "1") == "0":
        return False
    try:
        _, llvm = initialized_llvm()
    except TVMError:  # no llvmlite (objects read from a build cache): the system linker
        return False
    return hasattr(llvm, "create_lljit_compiler") and hasattr(llvm, "JITLibraryBuilder")


class ObjectSymbols:
    """The global symbols one ELF64 relocatable object defines and needs, and whether it
    has static constructors (read from its section and symbol tables)."""

    def __init__(self, data: bytes, name: str) -> None:
        self.defined: set[str] = set()
        self.undefined: set[str] = set()
        try:
            self._read(data)
        except (struct.error, IndexError, ValueError) as err:
            raise TVMError(f"object file {name} is not a readable ELF64 object: {err}") from None

    def _read(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a little-endian ELF64 file")
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if shentsize != _SECTION_HEADER_SIZE or shstrndx >= shnum:
            raise ValueError(f"section header size {shentsize}, string table {shstrndx} of "
                             f"{shnum} sections")
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        _check_sections(sections, data)
        names_at = sections[shstrndx][4]
        self.has_constructors = any(
            _c_string(data, names_at + s[0]) in _CONSTRUCTOR_SECTIONS for s in sections)
        for _, kind, _, _, offset, size, link, _, _, _ in sections:
            if kind != _SHT_SYMTAB:
                continue
            strings = sections[link][4]
            for at in range(offset, offset + size, 24):
                name_at, info, _, shndx = struct.unpack_from("<IBBH", data, at)
                if shndx >= shnum and shndx < _SHN_LORESERVE:
                    raise ValueError(f"a symbol in section {shndx} of {shnum}")
                binding = info >> 4
                if binding not in (1, 2) or not name_at:  # global or weak only
                    continue
                name = _c_string(data, strings + name_at).decode()
                if shndx != 0:
                    self.defined.add(name)
                elif binding == 1:  # an undefined weak symbol may stay null
                    self.undefined.add(name)


# ELF64 constants: section header size, section types, the first reserved section index
_SECTION_HEADER_SIZE = 64
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 4, 8, 9
_SHN_LORESERVE = 0xFF00


def _check_sections(sections: list[tuple], data: bytes) -> None:
    """Raise ValueError for section headers JITLink would trust to its harm (it asserts or
    reads out of bounds, killing the process, where ``ld`` reports a bad object): data past
    the file's end, an alignment that is not a power of two, tables of the wrong entry size,
    links to sections that do not exist, relocations naming symbols or places outside their
    tables and sections."""
    count = len(sections)
    for index, (_, kind, _, _, offset, length, link, info, align, entsize) in \
            enumerate(sections):
        if align & (align - 1):
            raise ValueError(f"section {index}: alignment {align} is not a power of two")
        if kind != _SHT_NOBITS and offset + length > len(data):
            raise ValueError(f"section {index}: bytes {offset}..{offset + length} past the "
                             f"end of the {len(data)}-byte file")
        if kind == _SHT_SYMTAB and (entsize != 24 or length % 24 or link >= count):
            raise ValueError(f"section {index}: a malformed symbol table")
        if kind not in (_SHT_RELA, _SHT_REL):
            continue
        step = 24 if kind == _SHT_RELA else 16
        if entsize != step or length % step or link >= count or info >= count or \
                sections[link][1] != _SHT_SYMTAB:
            raise ValueError(f"section {index}: a malformed relocation table")
        symbols, patched = sections[link][5] // 24, sections[info][5]
        for at in range(offset, offset + length, step):
            place, what = struct.unpack_from("<QQ", data, at)
            if place >= patched or what >> 32 >= symbols:
                raise ValueError(f"section {index}: a relocation at {place} of symbol "
                                 f"{what >> 32} outside section {info} ({patched} bytes) or "
                                 f"the {symbols} symbols")


def _c_string(data: bytes, at: int) -> bytes:
    end = data.index(b"\0", at)
    return data[at:end]


def link_in_process(objects: Mapping[str, bytes], name: str) -> InProcessLibrary | None:
    """Link ``objects`` (file name -> ELF bytes) into this process; None when they must be
    a shared library instead (no ORC in this llvmlite, or static constructors)."""
    if not in_process_available() or not all(d.startswith(b"\x7fELF") for d in objects.values()):
        return None  # (this reader knows ELF; another platform's objects take its linker)
    symbols = {file: ObjectSymbols(data, file) for file, data in objects.items()}
    if any(s.has_constructors for s in symbols.values()):
        return None
    defined = set().union(*(s.defined for s in symbols.values()))
    needed = set().union(*(s.undefined for s in symbols.values()))
    runtime_library()  # its symbols are then the process's (RTLD_GLOBAL)
    process = ctypes.CDLL(None)
    if any(_process_address(process, symbol) for symbol in needed & defined):
        # a kernel named like a function the process has (``exp``) whose code calls that
        # function: dlopen binds the call to the process's (libm), a JIT to the kernel
        return None
    imports: dict[str, int] = {}
    for file, found in sorted(symbols.items()):
        for symbol in sorted(found.undefined - defined - _LINKER_DEFINED):
            if symbol in imports:
                continue
            address = _process_address(process, symbol)
            if address is None:
                raise TVMError(
                    f"cannot load library {name!r}: symbol {symbol!r} (used by {file}) is "
                    "defined neither by its objects nor by kiln's runtime library nor by "
                    "the process")
            imports[symbol] = address
    _, llvm = initialized_llvm()
    builder = llvm.JITLibraryBuilder()
    for data in objects.values():
        builder.add_object_img(data)
    for symbol, address in imports.items():
        builder.import_symbol(symbol, address)
    for symbol in defined:
        builder.export_symbol(symbol)
    library = f"{name}#{next(_LIBRARY_NUMBERS)}"
    try:
        tracker = builder.link(_process_jit(llvm), library)
    except RuntimeError as err:
        raise TVMError(f"LLVM could not link library {name!r} in process: {err}") from None
    return InProcessLibrary({symbol: tracker[symbol] for symbol in defined}, tracker, library)


def _process_address(process: ctypes.CDLL, symbol: str) -> int | None:
    """Where the process (its executable and every library loaded globally) defines
    ``symbol``, or None."""
    try:
        return ctypes.cast(process[symbol], ctypes.c_void_p).value
    except AttributeError:
        return None


def _process_jit(llvm: Any) -> Any:
    """This process's ORC JIT (made on first use; a forked child makes its own)."""
    with _JIT_LOCK:
        if not _JIT or _JIT[0][0] != os.getpid():
            _INHERITED_JITS.extend(jit for _, jit in _JIT)
            _JIT[:] = [(os.getpid(), llvm.create_lljit_compiler(use_jit_link=True))]
        return _JIT[0][1]
