"""Sweep pack + runner: the bf16 FP4 quant (83-84% of copy at 16384 x 7168 / 8192 x 16384 in the bench,
0.77-0.84x a same-size copy at 1024-4096 rows) with its e2m1 lines on packed bf16x2 (`packed`, ~9
instead of ~17 instructions a value: the fp32 kernel was issue-bound).  cfg (threads, unroll, nt, cs, packed):
  0 128 x 4, nt 1 (shipped below 4096 rows)   1 128 x 4, nt 2, cs (shipped from 4096 rows)
  2 packed, nt 1   3 packed, nt 2, cs   4 packed, nt 2   5 packed 256 threads, nt 1   6 packed unroll 2, nt 1
  7 packed, nt 1, cs
Every cfg bit for bit against the reference (odd M, extreme magnitudes), then timed in turn in ONE
process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp4_packed.py --namespace sw --arch sm_90a \\
      --out .ab/fp4/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp4_packed.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CFGS = [dict(), dict(nt=2, cs=1), dict(packed=1), dict(packed=1, nt=2, cs=1), dict(packed=1, nt=2),
        dict(packed=1, threads=256), dict(packed=1, unroll=2), dict(packed=1, cs=1)]


def specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.per_token_group_quant_fp4")
    t = spec.tensors
    x = type(t[0])(t[0].name, t[0].shape, dtypes=("bfloat16",))
    return (OpSpec(name="sw.fp4_quant", doc=spec.doc, tensors=(x,) + t[1:], scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                   factory=spec.factory,
                   variants=tuple(Variant(dict(c, dtype="bfloat16"), rule=f"cfg == {i} and K % 32 == 0")
                                  for i, c in enumerate(CFGS)),
                   archs=("sm_90a",), reference=spec.reference),)



def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    from tkreg.reference.quant import per_token_group_quant_fp4 as ref
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for m, k in ((1, 7168), (37, 4096), (4097, 7168), (200, 16384), (3, 32), (0, 64)):
        x = torch.randn(m, k, device="cuda") * 3
        if m >= 37:   # every group's magnitude across the whole bf16 range, ties and edges included
            x = (x.view(m, k // 32, 32) * torch.pow(2.0, torch.randint(-140, 123, (m, k // 32, 1), device="cuda").float())).view(m, k)
            x[0, :32] = torch.tensor([3.3895e38, -3.3895e38] + [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 4 + [0.0, -0.0])[:32]
        x = x.bfloat16()
        wq, ws = ref(x)
        for c in range(len(CFGS)):
            q, s = tkreg.call("sw.fp4_quant", x, cfg=c)
            res["checks"].append(dict(m=m, k=k, cfg=c, dq=int((q != wq).sum()), ds=int((s != ws).sum())))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["dq"] or r["ds"]], flush=True)
    for m, k in ((16384, 7168), (8192, 16384), (4096, 7168), (2048, 7168), (1024, 7168), (4096, 4096)):
        nbytes = 2 * m * k + m * k // 2 + m * k // 32
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),), 2 * m * k)
        fns = [lambda x, c=c: tkreg.call("sw.fp4_quant", x, cfg=c) for c in range(len(CFGS))]
        ms = queued_ms_paired(fns, sets, reps=30, runs=5)
        copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
        names = [f"cfg{c}" for c in range(len(CFGS))]
        row = dict(shape=[m, k], of_copy={n: copy / t for n, t in zip(names, ms)},
                   gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)}, copy_ms=copy)
        res["rows"].append(row)
        print(row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
