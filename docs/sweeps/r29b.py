"""Sweep pack + runner (29th session, staged): rms_norm_backward for any N % 8 == 0 (#17: "like the
forward").  The shipped backward has kernels for the HIDDEN sizes only; other N raise NoKernelError
(so autograd of rms_norm at N = 2880 / 3584 / 16384 fails).  `_any_n_backward` (kernels_src/norm.py):
a CTA's 16 rows one at a time, two passes of 16-byte slots (sums of x^2 and dy*w*x, then x, dy, w
re-read for dx), each thread adding dy*x*r into its own columns of the CTA's fp32 partial dw row.
cfg 0-2: the any-N kernel at 128 / 256 / 512 threads, bf16; cfg 3: at 256 threads, fp16.
Checks: every cfg against the torch reference (fp32 math) (relative Frobenius error of dx
and dw, the GPU test's bound 1e-2) at M = 0, 1, 37, 4097 x N = 8, 1024, 2056, 2880, 3584, 4096,
16384, 16392; at the HIDDEN sizes also against the shipped static kernel.  Then timed in turn in
ONE process (bf16 cfgs, queued, 5 paired runs) beside the shipped static kernel where there is one,
torch.compile of the reference, and a device copy of the same bytes (dy, x read, dx written).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r29b.py --namespace sw --arch sm_90a \\
      --out .ab/r29b/pack --cache build/cache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 r29b.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg

CFGS = ((128, "bfloat16"), (256, "bfloat16"), (512, "bfloat16"), (256, "float16"))
CHECK_N = (8, 1024, 2056, 2880, 3584, 4096, 16384, 16392)
SHAPES = ((16384, 3584), (16384, 4096), (16384, 7168), (8192, 16384))


def specs():
    from kernels_src import norm as Nm
    from tkreg.spec import OpSpec, Scalar, Variant
    base = next(s for s in Nm.SPECS if s.name == "tkreg.rms_norm_backward")
    return (OpSpec(name="sw.bw", doc=base.doc, tensors=base.tensors, scalars=base.scalars + (Scalar("cfg", "int32", 0),),
                   factory=base.factory, archs=("sm_90a",), reference=base.reference,
                   variants=tuple(Variant(dict(N=0, dtype=d, threads=t), rule=f"cfg == {i} and N % 8 == 0")
                                  for i, (t, d) in enumerate(CFGS))),)


def run(out: str):
    import json
    import torch
    import tkreg
    from tkreg import reference
    from kernels_src.norm import HIDDEN
    from tkreg.bench.timing import compiled, copy_ms, queued_ms, queued_ms_paired, rotations

    def rel(a, b):
        a, b = a.double(), b.double()
        return float((a - b).norm() / b.norm().clamp_min(1e-30)) if b.numel() else 0.0

    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for m in (0, 1, 37, 4097):
        for n in CHECK_N:
            for c, (t, d) in enumerate(CFGS):
                dt = getattr(torch, d)
                dy, x = torch.randn(m, n, device="cuda").to(dt), torch.randn(m, n, device="cuda").mul(3).to(dt)
                w = torch.randn(n, device="cuda").to(dt)
                dx, dw = tkreg.call("sw.bw", dy, x, w, cfg=c)
                rdx, rdw = reference.rms_norm_backward(dy, x, w, 1e-6)   # fp32 math, rounded once
                row = dict(m=m, n=n, cfg=c, dx=rel(dx, rdx), dw=rel(dw, rdw), nan=bool(dx.isnan().any() or dw.isnan().any()))
                if m == 0:
                    row["dw_zero"] = bool((dw == 0).all())
                if n in (1024, 4096):   # a HIDDEN size: the shipped static kernel too
                    sdx, sdw = tkreg.ops.rms_norm_backward(dy, x, w, 1e-6)
                    row.update(vs_static_dx=rel(dx, sdx), vs_static_dw=rel(dw, sdw))
                res["checks"].append(row)
    bad = [r for r in res["checks"] if r["nan"] or r["dx"] > 1e-2 or r["dw"] > 1e-2 or r.get("dw_zero") is False]
    print("checks", len(res["checks"]), "bad", bad[:8], "worst dx", max(r["dx"] for r in res["checks"]),
          "worst dw", max(r["dw"] for r in res["checks"]), flush=True)

    comp = compiled(lambda dy, x, w: reference.rms_norm_backward(dy, x, w, 1e-6))
    bf = [c for c, (_, d) in enumerate(CFGS) if d == "bfloat16"]
    for m, n in SHAPES:
        nbytes = 3 * m * n * 2
        sets = rotations(lambda: (torch.randn(m, n, dtype=torch.bfloat16, device="cuda"),
                                  torch.randn(m, n, dtype=torch.bfloat16, device="cuda"),
                                  torch.randn(n, dtype=torch.bfloat16, device="cuda")), nbytes)
        fns = [lambda dy, x, w, c=c: tkreg.call("sw.bw", dy, x, w, cfg=c) for c in bf]
        names = [f"cfg{c}" for c in bf]
        if n in HIDDEN:
            fns.append(lambda dy, x, w: tkreg.ops.rms_norm_backward(dy, x, w, 1e-6))
            names.append("static")
        fns.append(comp)
        names.append("compile")
        ms = queued_ms_paired(fns, sets, reps=20, runs=5)
        copy = copy_ms(nbytes, queued_ms)
        row = dict(shape=[m, n], ms=dict(zip(names, ms)), copy_ms=copy, of_copy={k: copy / v for k, v in zip(names, ms)})
        print(row["shape"], " ".join(f"{k}:{v:.3f}" for k, v in row["of_copy"].items()), flush=True)
        res["rows"].append(row)
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
