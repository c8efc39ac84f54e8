"""Reading a loaded shared library safely: ELF checks before dlopen, bounded symbol reads.

Entry points: :func:`check_elf` (refuse a file dlopen would crash on), :func:`symbol_info`
(which file defines an address, and the symbol's size), :func:`mapped_segment_end`,
:func:`read_c_string` and :func:`read_blob_at` (reads through a symbol's address that stay
inside the segment the loader mapped: a tampered file controls its own symbol table).
"""

from __future__ import annotations

import ctypes
import os
import struct

from kiln.runtime.error import TVMError

__all__ = ["check_elf", "symbol_info", "mapped_segment_end", "read_c_string", "read_blob_at"]


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


_libc = ctypes.CDLL(None)
_libc.dladdr1.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo), ctypes.c_void_p, ctypes.c_int]
_RTLD_DL_SYMENT = 1
_ELF64_SYM_SIZE_OFFSET = 16  # Elf64_Sym: u32 name, u8 info, u8 other, u16 shndx, u64 value


def symbol_info(address: int) -> tuple[str, int | None]:
    """(file that defines the symbol at ``address``, the symbol's size in bytes or None)."""
    info = _DlInfo()
    symbol = ctypes.c_void_p()
    if not _libc.dladdr1(address, ctypes.byref(info), ctypes.byref(symbol), _RTLD_DL_SYMENT):
        return "", None
    size = None
    if symbol.value:
        size = ctypes.c_uint64.from_address(symbol.value + _ELF64_SYM_SIZE_OFFSET).value
    return (info.dli_fname or b"").decode(errors="replace"), size


_ELF_HEADER = struct.Struct("<4sBBBBB7xHHIQQQIHHHHHH")
_ELF_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
_PT_LOAD, _ET_DYN = 1, 3


def check_elf(path: str) -> None:
    """Refuse files dlopen would crash on: not 64-bit ELF, or segments past the file's end.

    dlopen maps segments straight from the file, so a truncated library faults (SIGBUS)
    instead of failing; checking the headers against the real size first keeps that a
    clear error.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        header = file.read(_ELF_HEADER.size)
        if len(header) < _ELF_HEADER.size or not header.startswith(b"\x7fELF"):
            raise TVMError(f"cannot load shared library {path}: not an ELF file")
        fields = _ELF_HEADER.unpack(header)
        elf_class, data_order, e_type = fields[1], fields[2], fields[6]
        ph_offset, sh_offset = fields[10], fields[11]
        ph_size, ph_count, sh_size, sh_count = fields[14], fields[15], fields[16], fields[17]
        if elf_class != 2 or data_order != 1 or e_type != _ET_DYN:
            raise TVMError(
                f"cannot load shared library {path}: not a 64-bit little-endian shared object"
            )
        if ph_size < _ELF_PROGRAM_HEADER.size or ph_offset + ph_size * ph_count > size:
            raise TVMError(f"cannot load shared library {path}: program headers truncated")
        if sh_offset + sh_size * sh_count > size:
            raise TVMError(f"cannot load shared library {path}: file is truncated")
        for index in range(ph_count):
            file.seek(ph_offset + index * ph_size)
            p_type, _, p_offset, _, _, p_filesz, _, _ = _ELF_PROGRAM_HEADER.unpack(
                file.read(_ELF_PROGRAM_HEADER.size)
            )
            if p_offset + p_filesz > size:
                raise TVMError(
                    f"cannot load shared library {path}: segment {index} ends at byte "
                    f"{p_offset + p_filesz} but the file has {size}; it is truncated"
                )


class _PhdrInfo(ctypes.Structure):
    _fields_ = [
        ("dlpi_addr", ctypes.c_uint64),
        ("dlpi_name", ctypes.c_char_p),
        ("dlpi_phdr", ctypes.c_void_p),
        ("dlpi_phnum", ctypes.c_uint16),
    ]


_PHDR_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t, ctypes.c_void_p
)
_libc.dl_iterate_phdr.argtypes = [_PHDR_CALLBACK, ctypes.c_void_p]


def mapped_segment_end(address: int) -> int | None:
    """The end of the loaded ELF segment holding ``address``, or None when none holds it.

    A symbol's address comes from the library's own symbol table, which a tampered file
    controls; reading through it is safe only inside a segment the loader mapped.
    """
    found: list[int] = []

    def visit(info_ptr, size, data):
        info = info_ptr.contents
        for index in range(info.dlpi_phnum):
            header = ctypes.string_at(info.dlpi_phdr + index * _ELF_PROGRAM_HEADER.size,
                                      _ELF_PROGRAM_HEADER.size)
            p_type, _, _, p_vaddr, _, _, p_memsz, _ = _ELF_PROGRAM_HEADER.unpack(header)
            start = info.dlpi_addr + p_vaddr
            if p_type == _PT_LOAD and start <= address < start + p_memsz:
                found.append(start + p_memsz)
                return 1
        return 0

    _libc.dl_iterate_phdr(_PHDR_CALLBACK(visit), None)
    return found[0] if found else None


def read_c_string(address: int, where: str, limit: int = 4096) -> str:
    """The NUL-terminated string at a symbol's address, read only inside its segment."""
    end = mapped_segment_end(address)
    if end is None:
        raise TVMError(f"{where}: a symbol points outside the loaded library")
    data = ctypes.string_at(address, min(limit, end - address))
    if b"\0" not in data:
        raise TVMError(f"{where}: a symbol's string has no terminating NUL")
    try:
        return data[:data.index(b"\0")].decode()
    except UnicodeDecodeError:
        raise TVMError(f"{where}: a symbol's string is not UTF-8") from None


def read_blob_at(address: int, symbol_size: int | None, where: str,
                 symbol: str = "__tvm_dev_mblob") -> bytes:
    """The module blob at ``address`` (u64 length + bytes), checked against the mapped image
    and against ``symbol_size`` (the size of the ELF symbol ``symbol`` holding it)."""
    end = mapped_segment_end(address)
    if end is None or end - address < 8:
        raise TVMError(f"{where}: {symbol} points outside the loaded library")
    if symbol_size is not None and symbol_size < 8:
        raise TVMError(f"{where}: {symbol} is {symbol_size} bytes, too small for a blob")
    length = ctypes.c_uint64.from_address(address).value
    if symbol_size is not None and length > symbol_size - 8:
        raise TVMError(
            f"{where}: {symbol} claims {length} bytes but the symbol holds "
            f"{symbol_size - 8}; the library is truncated or tampered"
        )
    if length > end - address - 8:
        raise TVMError(
            f"{where}: {symbol} claims {length} bytes but only {end - address - 8} "
            "are mapped after it; the library is truncated or tampered"
        )
    return ctypes.string_at(address + 8, length)
