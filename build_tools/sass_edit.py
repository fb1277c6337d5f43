"""Edit scheduling hints in a compiled cubin (build time only): DeepGEMM's FFMA interleave.

The FP8 block-scaled tiles promote each 128-K block on the CUDA cores (`acc += part * scale`, a
run of FFMAs) while the other consumer warpgroup's WGMMAs should keep the tensor cores busy.
ptxas emits those FFMA runs with the operand-reuse flag set and no yield, so a warp holds its
issue slot through the run.  DeepGEMM (deep_gemm/jit/interleave_ffma.py, "10%+ in some cases")
clears the reuse flag and flips the yield flag on some FFMAs in the first 9/16 of each run: the
scheduler may switch warps there, and a yielding warp cannot keep a reuse-cached operand.  Both
are hints: the instructions, their operands and their results stay the same, so the edited
cubin computes bit for bit what the original does.

Volta+ encodings are 128 bits (two little-endian 64-bit words); in the high word bit 45 is the
yield flag and bits 58-61 the operand-reuse flags (bit 59: the second source operand).
"""
from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from pathlib import Path

from tkreg.elf import check_cubin

from .sass import find_disassembler

YIELD, REUSE_B = 1 << 45, 1 << 59
MIN_RUN = 8         # runs of fewer FFMAs are left alone (DeepGEMM: 16 text lines = 8 instructions)

# nvdisasm -hex: "/*0a70*/  FFMA R24, R24, R9, R40 ;  /* 0x0000000918187223 */" then a line with
# the high word alone.
_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
_HIGH = re.compile(r"^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
_FUNC = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")


def _text_sections(cubin: bytes) -> dict:
    """{section name: (file offset, size)} of the ELF's sections."""
    shoff = struct.unpack_from("<Q", cubin, 40)[0]
    shnum, shstrndx = struct.unpack_from("<HH", cubin, 60)
    stroff = struct.unpack_from("<Q", cubin, shoff + 64 * shstrndx + 24)[0]
    out = {}
    for i in range(shnum):
        name_off, _, _, _, off, size = struct.unpack_from("<IIQQQQ", cubin, shoff + 64 * i)
        end = cubin.index(b"\0", stroff + name_off)
        out[cubin[stroff + name_off:end].decode()] = (off, size)
    return out


def _listing(cubin: bytes) -> str:
    tool = find_disassembler()
    if tool is None or "nvdisasm" not in Path(tool[0]).name:
        raise RuntimeError("the FFMA interleave needs nvdisasm (PyPI nvidia-cuda-nvdisasm, or TKREG_NVDISASM)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        p = subprocess.run([tool[0], "-c", "-hex", f.name], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {p.stderr.strip()[-2000:]}")
    return p.stdout


def _runs(listing: str):
    """Yield (function, [(offset, mnemonic text, low, high), ...]) for each run of FFMAs."""
    func, run, pending = None, [], None
    for line in listing.splitlines():
        m = _FUNC.match(line)
        if m:
            func = m.group(1)
            continue
        m = _INSN.match(line)
        if m:
            pending = (int(m.group(1), 16), m.group(2), int(m.group(3), 16))
            continue
        h = _HIGH.match(line)
        if h and pending:
            off, text, low = pending
            pending = None
            if re.match(r"^(@!?U?P\w+\s+)?FFMA\b", text):
                run.append((off, text, low, int(h.group(1), 16)))
                continue
        elif not line.strip():
            continue
        if len(run) >= MIN_RUN:
            yield func, run
        run = []
    if len(run) >= MIN_RUN:
        yield func, run


def _second_source(text: str) -> str:
    regs = [tok.split(".")[0] for tok in re.split(r"[\s,]+", text) if re.fullmatch(r"-?\|?R\d+(\.\w+)?\|?", tok)]
    return regs[-2].lstrip("-|") if len(regs) >= 2 else ""


def interleave_ffma(cubin: bytes) -> tuple[bytes, int]:
    """The cubin with DeepGEMM's FFMA yield/reuse edit applied; returns (bytes, FFMAs edited)."""
    sections = _text_sections(cubin)
    out, edited = bytearray(cubin), 0
    for func, run in _runs(_listing(cubin)):
        base, size = sections[f".text.{func}"]
        seen, last_src, last_reused = set(), None, False
        for off, text, low, high in run[: len(run) * 9 // 16]:
            src = _second_source(text)
            reused = bool(high & REUSE_B)
            if reused and (src not in seen or (last_reused and src == last_src)):
                assert off + 16 <= size
                word = struct.unpack_from("<Q", out, base + off + 8)[0]
                assert struct.unpack_from("<Q", out, base + off)[0] == low and word == high, f"{func}+{off:#x}"
                struct.pack_into("<Q", out, base + off + 8, high ^ (REUSE_B | YIELD))
                edited += 1
                reused = False
            seen.add(src)
            last_reused, last_src = reused, src
    return bytes(out), edited


EDITS = {"ffma_interleave": interleave_ffma}


def apply_edits(cubin: bytes, names, arch: str) -> bytes:
    """A variant's `sass_edits`, in order.  Each must change something: an edit that finds nothing
    to edit (no FFMA run, a new ptxas) fails the build instead of shipping an unedited cubin."""
    from .compile import CompileError
    for name in names:
        if name not in EDITS:
            raise CompileError(f"unknown SASS edit {name!r} (known: {', '.join(EDITS)})")
        try:
            cubin, count = EDITS[name](cubin)
            check_cubin(cubin, arch)
        except (RuntimeError, ValueError, AssertionError) as e:
            raise CompileError(f"SASS edit {name!r} failed: {e}") from None
        if count == 0:
            raise CompileError(f"SASS edit {name!r} found nothing to edit in the {arch} cubin")
    return cubin
