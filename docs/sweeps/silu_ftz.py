"""Sweep pack + runner: the SwiGLU quant ops with silu / sigmoid on flush-to-zero ex2 / rcp (`fsilu`,
kernels_src/quant.py SILU).  Built without --use_fast_math, __expf and __fdividef carry range
fix-ups (~5 instructions an element around the two MUFU); the SwiGLU + per-channel transpose ran
~47 instructions an element (78-82% of copy in the bench), issue-bound.
cfg  silu_channel (channel_quant_kernel silu=1 transpose=1 cw=64 cs=1): 0 ns 2 minb 2 (shipped)
     1 + fsilu   2 fsilu ns 1   3 fsilu ns 2 no minb
     silu_bwd (silu_backward_quant_kernel): 0 shipped (128 threads, 2 rows)   1 fsilu   2 fsilu 4 rows
Every cfg bit for bit against cfg 0 (odd M, UE8M0 too), then timed in turn in ONE process beside a
device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/silu_ftz.py --namespace sw --arch sm_90a \\
      --out .ab/sftz/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 silu_ftz.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CH = [dict(ns=2, minb=2), dict(ns=2, minb=2, fsilu=1), dict(ns=1, fsilu=1), dict(ns=2, fsilu=1)]
BW = [dict(), dict(fsilu=1), dict(fsilu=1, rows=4)]


def _sweep(Q, name, new, base, cfgs, rule):
    spec = next(s for s in Q.SPECS if s.name == name)
    t = spec.tensors
    x = type(t[0])(t[0].name, t[0].shape, dtypes=("bfloat16",))
    return OpSpec(name=new, doc=spec.doc, tensors=(x,) + t[1:], scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                  factory=spec.factory,
                  variants=tuple(Variant(dict(base, dtype="bfloat16", **c), rule=f"cfg == {i} and {rule}") for i, c in enumerate(cfgs)),
                  archs=("sm_90a",), reference=spec.reference)


def specs():
    from kernels_src import quant as Q
    return (_sweep(Q, "tkreg.silu_and_mul_per_channel_quant_fp8_transpose", "sw.silu_channel",
                   dict(silu=1, transpose=1, cw=64, cs=1), CH, "N % 16 == 0"),
            _sweep(Q, "tkreg.silu_and_mul_backward_quant_fp8", "sw.silu_bwd", {}, BW, "N % 256 == 0"))


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view(torch.int32)


def run(out: str):
    global torch
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for m, i in ((1, 1408), (37, 128), (200, 7168), (4097, 1408), (0, 128)):
        x = (torch.randn(m, 2 * i, device="cuda") * 4).bfloat16()
        dy = torch.randn(m, i, device="cuda").bfloat16()
        for ue in (False, True):
            for op, cfgs, args in (("sw.silu_channel", CH, (x,)), ("sw.silu_bwd", BW, (dy, x))):
                want = tkreg.call(op, *args, ue8m0=ue, cfg=0)
                for c in range(1, len(cfgs)):
                    got = tkreg.call(op, *args, ue8m0=ue, cfg=c)
                    res["checks"].append(dict(op=op, m=m, i=i, ue=ue, cfg=c,
                                              d=sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got, want))))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    for m, i in ((16384, 2048), (16384, 4096), (4096, 7168), (2048, 7168), (8192, 2048)):
        for op, cfgs, nbytes, mk in (
                ("sw.silu_channel", CH, 4 * m * i + m * i + 4 * (-(-m // 128)) * i,
                 lambda: (torch.randn(m, 2 * i, dtype=torch.bfloat16, device="cuda"),)),
                ("sw.silu_bwd", BW, 6 * m * i + 2 * m * i + 4 * m * (2 * i // 128),
                 lambda: (torch.randn(m, i, dtype=torch.bfloat16, device="cuda"), torch.randn(m, 2 * i, dtype=torch.bfloat16, device="cuda")))):
            sets = rotations(mk, 6 * m * i)
            fns = [lambda *a, c=c, op=op: tkreg.call(op, *a, cfg=c) for c in range(len(cfgs))]
            ms = queued_ms_paired(fns, sets, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            names = [f"cfg{c}" for c in range(len(cfgs))]
            row = dict(op=op, shape=[m, i], of_copy={n: copy / t for n, t in zip(names, ms)},
                       gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)}, copy_ms=copy)
            res["rows"].append(row)
            print(op, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
