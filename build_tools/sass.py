"""Look at a cubin's SASS (build time only): which tensor-core instructions did nvcc emit?

sm_100a kernels should run their MMAs on tcgen05 (SASS `UTCHMMA` / `UTCQMMA` / ... : tensor
memory accumulators), not on the `HMMA` of mma.sync, which tilelang falls back to silently when
a plain `T.gemm` has a register accumulator.  The disassembler is nvdisasm (or cuobjdump) from
the CUDA toolkit that holds build_tools' nvcc, else from PATH, else from the PyPI package
`nvidia-cuda-nvdisasm` (`TKREG_NVDISASM` names one explicitly).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from shutil import which

# tcgen05.mma lowers to UTC<kind>MMA: UTCHMMA (f16/bf16), UTCQMMA (f8f6f4), UTCIMMA (i8),
# UTCOMMA / UTCMXQMMA-style block-scaled forms; `.2CTA` and other suffixes follow a dot.
TCGEN05_MMA = re.compile(r"\bUTC[A-Z]*MMA\b")
MMA_SYNC = re.compile(r"\bHMMA\b")
_OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", re.M)


def find_disassembler() -> list[str] | None:
    """Command prefix that disassembles a cubin file given as the last argument, or None."""
    explicit = os.environ.get("TKREG_NVDISASM")
    if explicit:
        return [explicit, "-c"] if "nvdisasm" in Path(explicit).name else [explicit, "-sass"]
    dirs = []
    try:
        from build_tools.compile import toolchain
        dirs.append(Path(toolchain().nvcc_path).parent)
    except Exception:  # no nvcc: other places may still have a disassembler
        pass
    for tool, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])):
        for d in dirs:
            if (d / tool).exists():
                return [str(d / tool), *args]
        p = which(tool)
        if p:
            return [p, *args]
    try:  # nvidia-cuda-nvdisasm from PyPI installs nvidia/cu13/bin/nvdisasm
        import nvidia  # type: ignore
        for base in nvidia.__path__:
            for sub in ("cu13", "cuda_nvdisasm"):
                p = Path(base, sub, "bin", "nvdisasm")
                if p.exists():
                    return [str(p), "-c"]
    except ImportError:
        pass
    return None


def disassemble(cubin: bytes, tool: list[str] | None = None) -> str:
    """SASS text of a cubin; RuntimeError when no disassembler is found or it fails."""
    tool = tool or find_disassembler()
    if tool is None:
        raise RuntimeError("no nvdisasm/cuobjdump found: install the CUDA toolkit or "
                           "`pip install nvidia-cuda-nvdisasm`, or set TKREG_NVDISASM")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d, "kernel.cubin")
        f.write_bytes(cubin)
        p = subprocess.run([*tool, str(f)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{tool[0]} failed ({p.returncode}): {(p.stdout + p.stderr).strip()[-2000:]}")
    return p.stdout


def opcode_counts(sass: str) -> Counter:
    """Opcode (without modifiers) -> how many times it appears in the SASS listing."""
    return Counter(m.group(1) for m in _OPCODE.finditer(sass))


def mma_summary(cubin: bytes, tool: list[str] | None = None) -> dict:
    """{'tcgen05': {opcode: n}, 'mma_sync': n}: the tensor-core instructions of a cubin."""
    counts = opcode_counts(disassemble(cubin, tool))
    return {"tcgen05": {k: v for k, v in sorted(counts.items()) if TCGEN05_MMA.fullmatch(k)},
            "mma_sync": sum(v for k, v in counts.items() if MMA_SYNC.fullmatch(k))}

