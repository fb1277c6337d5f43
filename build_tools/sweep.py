"""Tune a kernel: compile N configs of a shipped op's factory into one pack, then, on a GPU, check
each against the op's torch reference and time them in turn beside the shipped op, torch.compile of
the reference and a device copy of the same bytes.

A sweep file (kept outside the product, e.g. under .ab/) names the op, its configs and the sizes:

    from build_tools.sweep import Sweep
    SWEEP = Sweep("tkreg.rms_norm", rule="N % 8 == 0",
                  configs=[dict(N=0, dtype="bfloat16", threads=256, max_n=128, preload_weight=1,
                                threads_per_row=16), ...],
                  checks=[dict(M=37, N=128), dict(M=0, N=96)],     # sizes of the op's symbols
                  shapes=[dict(M=1 << 20, N=128)])                  # sizes timed
    specs = SWEEP.specs

Build here (tilelang, nvcc):
    .venv/bin/python -m build_tools build --src FILE --namespace sweep --arch sm_90a --out PACK
Run on the GPU with the wheel installed, from outside the repository (so `tkreg` is the wheel's):
    TKREG_PACKS=PACK python3 /path/to/repo/build_tools/sweep.py FILE OUT.json

The sweep op `sweep.<op>` is the shipped spec plus an int scalar `cfg` that picks the config.
Inputs are drawn from the spec (floats ~ N(0, 1), integers zero) unless the file defines
`inputs(sizes) -> tuple`; in-place tensors are cloned for each checked call.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Sweep:
    op: str                       # a built-in op, e.g. "tkreg.rms_norm"
    configs: list                 # factory kwargs, one dict a config
    rule: str | None = None       # where every config applies, besides `cfg == i`
    checks: list = field(default_factory=list)
    shapes: list = field(default_factory=list)
    arch: str = "sm_90a"

    @property
    def name(self) -> str:
        return "sweep." + self.op.split(".", 1)[1]

    def specs(self) -> tuple:
        """The sweep OpSpec: the shipped op's tensors and scalars, `cfg`, one variant a config."""
        from build_tools import sources
        from tkreg.spec import OpSpec, Scalar, Variant
        base = next(s for r in sources.resolve("kernels_src") for s in sources.specs_of(r) if s.name == self.op)
        variants = tuple(Variant(c, rule=f"cfg == {i}" + (f" and ({self.rule})" if self.rule else ""))
                         for i, c in enumerate(self.configs))
        return (OpSpec(name=self.name, doc=base.doc, tensors=base.tensors, factory=base.factory,
                       scalars=base.scalars + (Scalar("cfg", "int32", 0),), variants=variants,
                       archs=(self.arch,), reference=base.reference),)


def _dtypes(spec, sweep: Sweep) -> dict:
    """tensor -> torch dtype: free dtypes from the configs' `dtype` (else the first declared)."""
    import torch
    roots, by = spec.dtype_roots(), {t.name: t for t in spec.tensors}
    want = sweep.configs[0].get("dtype")
    out = {}
    for t in spec.tensors:
        r = by[roots[t.name]]
        name = r.dtype or (want if want in r.dtypes else r.dtypes[0])
        out[t.name] = getattr(torch, name)
    return out


def _shape(t, sizes: dict) -> tuple:
    from tkreg import expr
    return tuple(int(expr.evaluate(p, sizes)) for p in t.dims())


def make_inputs(spec, sweep: Sweep, sizes: dict, custom=None) -> tuple:
    import torch
    if custom:
        return tuple(custom(sizes))
    dts = _dtypes(spec, sweep)
    out = []
    for t in spec.tensors:
        if t.is_input:
            shape, dt = _shape(t, sizes), dts[t.name]
            out.append(torch.randn(shape, device="cuda").to(dt) if dt.is_floating_point
                       else torch.zeros(shape, dtype=dt, device="cuda"))
    return tuple(out)


def bytes_moved(spec, sweep: Sweep, sizes: dict) -> int:
    """Each input read once, each output written once, in-place tensors both."""
    dts = _dtypes(spec, sweep)
    total = 0
    for t in spec.tensors:
        if t.role == "scratch":
            continue
        n = dts[t.name].itemsize
        for d in _shape(t, sizes):
            n *= d
        total += n * (2 if t.role == "inplace" else 1)
    return total


def _outputs(spec, args, result) -> list:
    """What a call produced: its returned tensors, then the in-place inputs it wrote."""
    got = list(result) if isinstance(result, (tuple, list)) else ([] if result is None else [result])
    ins = [t for t in spec.tensors if t.is_input]
    return got + [a for t, a in zip(ins, args) if t.role == "inplace"]


def _error(got, want) -> float:
    """Relative Frobenius error for floats; the share of differing elements otherwise."""
    if got.shape != want.shape:
        return float("inf")
    if got.numel() == 0:
        return 0.0
    if got.dtype.is_floating_point and got.dtype.itemsize > 1:
        g, w = got.double(), want.double()
        return float((g - w).norm() / w.norm().clamp_min(1e-30))
    return float((got.view(-1).view(torch_uint(got)) != want.view(-1).view(torch_uint(want))).double().mean())


def torch_uint(t):
    import torch
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.dtype.itemsize]


def run(sweep: Sweep, out: str, custom_inputs=None) -> dict:
    """Checks, then timed rows; writes JSON to `out` and prints a table."""
    import torch
    import tkreg
    from tkreg.bench.timing import compiled, copy_ms, queued_ms, queued_ms_paired, rotations
    from tkreg.runtime import RUNTIME
    from tkreg.spec import import_ref
    spec = RUNTIME.registry.entry(sweep.op).spec
    ref = import_ref(spec.reference)
    n = len(sweep.configs)
    res = {"op": sweep.op, "configs": sweep.configs, "checks": [], "rows": []}
    torch.manual_seed(0)
    for sizes in sweep.checks:
        args = make_inputs(spec, sweep, sizes, custom_inputs)
        want = _outputs(spec, copies := [a.clone() for a in args], ref(*copies))
        for c in range(n):
            call = [a.clone() for a in args]
            got = _outputs(spec, call, tkreg.call(sweep.name, *call, cfg=c))
            res["checks"].append(dict(sizes=sizes, cfg=c, error=max(_error(g, w) for g, w in zip(got, want))))
    worst = max((r["error"] for r in res["checks"]), default=0.0)
    print(f"{sweep.op}: {len(res['checks'])} checks, worst error {worst:.3g}", flush=True)
    comp = compiled(ref)
    for sizes in sweep.shapes:
        nbytes = bytes_moved(spec, sweep, sizes)
        sets = rotations(lambda: make_inputs(spec, sweep, sizes, custom_inputs), nbytes)
        fns = [lambda *a, c=c: tkreg.call(sweep.name, *a, cfg=c) for c in range(n)]
        fns += [lambda *a: tkreg.call(sweep.op, *a), comp]
        ms = queued_ms_paired(fns, sets, reps=30, runs=5)
        copy = copy_ms(nbytes, queued_ms)
        names = [f"cfg{c}" for c in range(n)] + ["shipped", "torch.compile"]
        row = dict(sizes=sizes, bytes=nbytes, copy_ms=copy, ms=dict(zip(names, ms)),
                   of_copy={k: copy / v for k, v in zip(names, ms)})
        res["rows"].append(row)
        print(sizes, "  ".join(f"{k} {v:.3f}" for k, v in row["of_copy"].items()), "(of a same-size copy)", flush=True)
        del sets
    Path(out).write_text(json.dumps(res, indent=1))
    return res


def _load(path: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_tkreg_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: TKREG_PACKS=PACK python3 build_tools/sweep.py SWEEP_FILE OUT.json")
    sys.path.append(str(Path(__file__).resolve().parents[1]))   # after site-packages: the wheel's tkreg
    m = _load(sys.argv[1])
    run(m.SWEEP, sys.argv[2], getattr(m, "inputs", None))
