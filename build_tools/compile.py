"""Lower one variant with tilelang and compile it to a cubin with nvcc (build time only).

We call nvcc ourselves (same flags tilelang uses, minus `-lineinfo`, whose temp-file paths
would make cubins differ between builds) from a directory named after the cache key, so two
clean builds give identical bytes.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tkreg.elf import check_cubin, sm_of_arch

# --orig_src_path_name: nvcc otherwise hashes the source's absolute path into CUTLASS's
# `_INTERNAL_<hash>` symbols, and the cubin would depend on the folder it was compiled in.
NVCC_FLAGS = ("--cubin", "-O3", "-std=c++20", "-w", "-Xcicc", "--orig_src_path_name=kernel.cu")


class CompileError(RuntimeError):
    """A variant failed to lower or compile; the message names op, variant, arch and the cause."""


@dataclass(frozen=True)
class Toolchain:
    tilelang: str
    nvcc: str
    nvcc_path: str

    def to_json(self) -> dict:
        return {"tilelang": self.tilelang, "nvcc": self.nvcc, "flags": list(NVCC_FLAGS)}


def _nvcc_path() -> str:
    for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if c and Path(c, "bin", "nvcc").exists():
            return str(Path(c, "bin", "nvcc"))
    from shutil import which
    p = which("nvcc")
    if p:
        return p
    try:  # nvidia-cuda-nvcc from PyPI (CUDA 13 installs under nvidia/cu13)
        import nvidia  # type: ignore
        for base in nvidia.__path__:
            for sub in ("cu13", "cuda_nvcc"):
                p = Path(base, sub, "bin", "nvcc")
                if p.exists():
                    return str(p)
    except ImportError:
        pass
    raise CompileError("nvcc not found: install the CUDA 13.0 toolkit or `pip install nvidia-cuda-nvcc==13.0.88`")


@functools.lru_cache(maxsize=None)
def toolchain() -> Toolchain:
    """Versions that go into every cache key; cheap: no tilelang import."""
    try:
        tl = metadata.version("tilelang")
    except metadata.PackageNotFoundError:
        raise CompileError("tilelang is not installed; the build needs tilelang==0.1.15") from None
    path = _nvcc_path()
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return Toolchain(tl, m.group(1) if m else "unknown", path)


def target(arch: str) -> dict:
    sm_of_arch(arch)  # ValueError on an unknown arch
    return {"kind": "cuda", "arch": arch}


def lower(func, arch: str, pass_configs: dict | None = None):
    """tilelang artifact with `kernel_source`, `device_mod`, `host_mod` (no host codegen)."""
    import tvm
    from tilelang.backend.module import create_backend_context
    from tilelang.engine.lower import lower_with_context

    ctx = create_backend_context(target(arch), None, "cython")
    with tvm.transform.PassContext(opt_level=3, config=dict(pass_configs or {})), ctx.target:
        return lower_with_context(func, ctx, enable_host_codegen=False, enable_device_compile=False)


_WS_DECL = re.compile(r"void\* (workspace(?:_\d+)?) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ \d+\)\);")
_WS_USE = re.compile(r"tl::AllReduce<tl::\w+, ([^;]*?)>::run\([^;]*?\(\(\(float\*\)(workspace(?:_\d+)?)\)\[0\]\)")


def canonical_source(source: str) -> str:
    """tilelang hands its allreduce workspaces (equal shared-memory slots) to the reductions in
    an order that varies between processes, so two clean builds of one kernel could differ.
    When every use of every workspace is an `AllReduce` with the same thread/barrier arguments
    (hence the same slot size), give the slots out in order of first use: the kernel computes the
    same thing and its bytes no longer depend on the build.  Any other source is left as it is."""
    decls = _WS_DECL.findall(source)
    if len(decls) < 2:
        return source
    uses = _WS_USE.findall(source)
    if len({args for args, _ in uses}) != 1 or source.count("float*)workspace") != len(uses):
        return source
    first = list(dict.fromkeys(name for _, name in uses))
    if sorted(first) != sorted(decls) or first == decls:
        return source
    rename = dict(zip(first, decls))
    return re.sub(r"\(\(float\*\)(workspace(?:_\d+)?)\)", lambda m: f"((float*){rename[m.group(1)]})", source)


def device_flags(pass_configs: dict) -> tuple:
    """The nvcc flags tilelang's own compile derives from a variant's pass configs
    (tilelang/cuda/backend.py), so a config means here what it means under tilelang's JIT: without
    this, `tl.enable_fast_math` lowered exp2 to the exact exp2f (an MUFU plus range fix-ups:
    twice the SASS of flash attention's softmax loop) instead of a bare ex2.approx."""
    import shlex
    flags = []
    extra = pass_configs.get("tl.device_compile_flags")
    if extra:
        flags += shlex.split(extra) if isinstance(extra, str) else [t for f in extra for t in shlex.split(str(f))]
    if pass_configs.get("tl.enable_fast_math"):
        flags.append("--use_fast_math")
    level = pass_configs.get("tl.ptxas_register_usage_level")
    if level is not None:
        flags.append(f"--ptxas-options=--register-usage-level={int(level)}")
    return tuple(flags)


def nvcc(source: str, arch: str, workdir: Path, extra_flags=()) -> bytes:
    """Compile CUDA C++ to a cubin for `arch` (tkreg's flags, then a variant's own);
    CompileError carries nvcc's message."""
    from tilelang import env as tl_env

    sm = arch[3:]
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kernel.cu").write_text(source)
    cmd = [toolchain().nvcc_path, *NVCC_FLAGS, *extra_flags, "-gencode", f"arch=compute_{sm},code=sm_{sm}",
           "-I" + str(tl_env.TILELANG_TEMPLATE_PATH), "-I" + str(tl_env.CUTLASS_INCLUDE_DIR),
           "-o", "kernel.cubin", "kernel.cu"]
    p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if p.returncode != 0:
        raise CompileError(f"nvcc failed ({p.returncode}):\n{(p.stdout + p.stderr).strip()[-4000:]}")
    data = (workdir / "kernel.cubin").read_bytes()
    try:
        check_cubin(data, arch)
    except ValueError as e:
        raise CompileError(f"ELF check failed: {e}") from None
    return data
