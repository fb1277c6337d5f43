"""Launch format v2 on a GPU, through the committed probe pack (tests/format_probe): two kernels
with a zero-filled scratch sized by a variant parameter, an optional tensor, a grid from an int
scalar and the SM count, a strided input read through TMA; the first load racing threads; and
hostile packs, each in its own process, that must give a clean error and leave it healthy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest
import torch

from tkreg.native import launcher
from tkreg.registry import Registry
from tkreg.runtime import Runtime

from .conftest import OP, PROBE, TARGETED

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


@pytest.fixture
def rt():
    r = Runtime(Registry())
    r.register_pack(PROBE)
    return r


def want(x, bias=None):
    y = 2 * x.float() + x.float().sum(0)
    return (y if bias is None else y + bias.float()).to(x.dtype)


def strided(m, n, pad=72):
    """x[m, n] inside a wider buffer: row stride n + pad, 16-byte aligned start."""
    return torch.randn(m, n + pad, dtype=BF16, device="cuda")[:, 8:8 + n]


@pytest.mark.parametrize("m, n", [(1, 8), (37, 192), (300, 1000), (4097, 64), (130, 4096)], ids=str)
@pytest.mark.parametrize("nblk", [1, 3, 100000])
@pytest.mark.parametrize("bias", [False, True])
def test_probe_matches_torch(rt, m, n, nblk, bias, seed):
    x = strided(m, n)
    b = torch.randn(n, dtype=BF16, device="cuda") if bias else None
    got = rt.op(OP)(x, b, nblk)
    torch.testing.assert_close(got, want(x, b), rtol=2e-2, atol=2e-2 * (1 + m ** 0.5))
    assert got.is_contiguous() and got.shape == (m, n)


def test_scratch_is_zeroed_every_call(rt, seed):
    """The allocator hands back the last call's scratch: without the memset the sums pile up."""
    x = strided(64, 256)
    first = rt.op(OP)(x)
    for _ in range(3):
        assert torch.equal(rt.op(OP)(x), first)


def test_contiguous_input_empty_problem_and_out(rt, seed):
    x = torch.randn(50, 128, dtype=BF16, device="cuda")
    out = torch.empty_like(x)
    assert rt.op(OP)(x, out=out) is out
    torch.testing.assert_close(out, want(x), rtol=2e-2, atol=0.2)
    assert rt.op(OP)(torch.empty(0, 128, dtype=BF16, device="cuda")).shape == (0, 128)


def test_int32_kernel_parameters_are_range_checked(rt):
    """A row stride past int32 (an 8 GB buffer): refused when the parameters are packed."""
    try:
        base = torch.empty(2, 2**31 + 64, dtype=BF16, device="cuda")
    except torch.OutOfMemoryError:
        pytest.skip("needs 8 GB of device memory")
    with pytest.raises(ValueError, match="over the int32 range"):
        rt.op(OP)(base[:, :256])
    del base


def test_first_load_is_idempotent_under_racing_threads(seed):
    rt = Runtime(Registry())
    rt.register_pack(PROBE)
    x = strided(33, 256)
    ref = want(x)
    torch.cuda.synchronize()
    before = launcher().modules_loaded()
    go, errors, outs = threading.Barrier(8), [], []

    def work():
        try:
            go.wait()
            outs.append(rt.op(OP)(x))
            torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=work) for _ in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
    assert launcher().modules_loaded() - before == 1      # one variant, one device: one module
    for o in outs:
        torch.testing.assert_close(o, ref, rtol=2e-2, atol=0.2)


# ---- hostile packs: a subprocess each, so a crash fails one case, not the run ------------------
CHILD = textwrap.dedent(r"""
    import json, pathlib, random, shutil, sys, tempfile, torch
    sys.path.insert(0, sys.argv[1])
    from conftest import PROBE, OP, TARGETED, garbage_cubin, leaves, put
    from tkreg import manifest, reference
    from tkreg.errors import PackError
    from tkreg.registry import Registry
    from tkreg.runtime import Runtime
    raw = json.loads((PROBE / "sm_90a" / manifest.FILENAME).read_text())
    x = torch.randn(10, 300, dtype=torch.bfloat16, device="cuda")[:, 8:200]

    def attempt(label, mutate=None, pack_fn=None):
        pack = pathlib.Path(tempfile.mkdtemp()) / "pack"
        shutil.copytree(PROBE, pack)
        if mutate:
            m = json.loads(json.dumps(raw))
            mutate(m)
            manifest.dump_json(pack / "sm_90a" / manifest.FILENAME, m)
        if pack_fn:
            pack_fn(pack)
        print("CASE", label, flush=True)
        rt = Runtime(Registry())
        try:
            rt.register_pack(pack)
        except PackError as e:
            print("SKIPPED", label, str(e)[:120], flush=True)
            return
        try:
            rt.op(OP)(x)
            torch.cuda.synchronize()
            print("RAN", label, flush=True)
        except Exception as e:
            print("ERROR", label, type(e).__name__, str(e)[:160], flush=True)

    mode = sys.argv[2]
    if mode == "targeted":
        for name, fn in sorted(TARGETED.items()):
            attempt(name, fn)
        attempt("garbage_cubin", pack_fn=garbage_cubin)
    else:
        rnd = random.Random(int(mode))
        paths = [p for p, _ in leaves(raw) if p and "plan" in p]
        vals = [0, 1, -1, 3, 2**31, -2**40, 255, "$M", "$Q", "+", [], [1, 2], None]
        for i in range(60):
            changes = [(rnd.choice(paths), rnd.choice(vals)) for _ in range(rnd.randint(1, 2))]
            def mutate(m, changes=changes):
                for p, v in changes:
                    try:
                        put(m, p, v)
                    except (KeyError, IndexError, TypeError):
                        pass
            attempt(f"random{i}:{changes}", mutate)
    w = torch.randn(1024, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(8, 1024, dtype=torch.bfloat16, device="cuda")
    import tkreg
    torch.testing.assert_close(tkreg.ops.rms_norm(y, w), reference.rms_norm(y, w), rtol=2e-2, atol=2e-2)
    print("HEALTHY", flush=True)
""")


def child(mode: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TKREG_FALLBACK"}
    r = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__), mode], capture_output=True,
                       text=True, env=env, cwd=tempfile.gettempdir(), timeout=600)
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("CASE")][-1:]
    assert r.returncode == 0 and "HEALTHY" in r.stdout, f"died after {last} (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_targeted_hostile_packs_give_clean_errors():
    out = child("targeted")
    results = {ln.split()[1]: ln.split()[0] for ln in out.splitlines() if ln.split()[:1] in (["SKIPPED"], ["RAN"], ["ERROR"])}
    assert set(results) == set(TARGETED) | {"garbage_cubin"}, out
    for name in ("fewer_params", "more_params", "wrong_param_size", "missing_kernel"):
        assert results[name] == "ERROR", (name, out)   # found when the module loads
    assert results["garbage_cubin"] == "SKIPPED", out  # its ELF tables: before the driver sees it
    for name in ("fewer_params", "more_params", "wrong_param_size", "missing_kernel"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"ERROR {name} "))
        assert "PackError" in line and "rebuild" in line, line


@pytest.mark.parametrize("seed_", [1, 2])
def test_random_hostile_packs_leave_the_process_healthy(seed_):
    child(str(seed_))
