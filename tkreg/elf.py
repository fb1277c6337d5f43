"""Which SM a cubin was compiled for, read from its ELF header (no CUDA needed).

nvcc 13 writes the SM into bits 8-15 of `e_flags` (offset 48): 0x5a = 90, 0x64 = 100; bit 3
of the low byte marks the arch-specific ("a") variant seen as 0x...04/0x...02 below, so we
compare only the SM number.  Used by build_tools after each compile and by `tkreg verify`.
"""
from __future__ import annotations

import struct

# The archs a pack may hold, and the compute capability that runs each ("a" cubins run only there).
ARCHS = {"sm_90a": (9, 0), "sm_100a": (10, 0)}


def sm_of_arch(arch: str) -> int:
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; tkreg builds {', '.join(ARCHS)}")
    major, minor = ARCHS[arch]
    return major * 10 + minor


def cubin_sm(data: bytes) -> int:
    """The SM number in a cubin's ELF header; ValueError when it is no cubin."""
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    if struct.unpack_from("<H", data, 18)[0] != 190:  # EM_CUDA
        raise ValueError("ELF machine is not EM_CUDA")
    (flags,) = struct.unpack_from("<I", data, 48)
    return (flags >> 8) & 0xFF


def check_structure(data: bytes) -> None:
    """The ELF header, program and section tables and every section lie inside the file: the
    driver parses them without bounds checks (a cubin with scrambled tables crashed
    cuModuleLoadData with SIGSEGV on an H200, driver 580), so this runs before each first load."""
    if len(data) < 64:
        raise ValueError("truncated ELF header")
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    ehsize, phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<6H", data, 52)
    if ehsize != 64 or shentsize != 64 or (phnum and phentsize != 56):
        raise ValueError("ELF header sizes are not ELF64's")
    if phoff + phnum * 56 > len(data) or shoff + shnum * 64 > len(data) or not 0 < shstrndx < shnum:
        raise ValueError("ELF program or section table lies outside the file")
    for i in range(shnum):
        name, typ, _, _, off, size = struct.unpack_from("<IIQQQQ", data, shoff + 64 * i)
        if typ != 8 and off + size > len(data):  # 8: SHT_NOBITS (no bytes in the file)
            raise ValueError(f"ELF section {i} lies outside the file")
    str_off, str_size = struct.unpack_from("<QQ", data, shoff + 64 * shstrndx + 24)
    if any(struct.unpack_from("<I", data, shoff + 64 * i)[0] >= str_size for i in range(shnum)):
        raise ValueError("ELF section name outside the string table")


def check_cubin(data: bytes, arch: str) -> None:
    """Raise ValueError when `data` is not a well-formed cubin for `arch`."""
    got, want = cubin_sm(data), sm_of_arch(arch)
    if got != want:
        raise ValueError(f"cubin is for sm_{got}, expected {arch}")
    check_structure(data)
