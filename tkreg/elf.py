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


def check_cubin(data: bytes, arch: str) -> None:
    """Raise ValueError when `data` is not a cubin for `arch`."""
    got, want = cubin_sm(data), sm_of_arch(arch)
    if got != want:
        raise ValueError(f"cubin is for sm_{got}, expected {arch}")
