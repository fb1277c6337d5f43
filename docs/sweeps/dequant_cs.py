"""Sweep pack + runner: the FP4 and per-channel FP8 dequants (86% / 87% of copy at 16384 x 7168 in the
bench, 80% of their bytes written) with evict-first stores (`cs`: st.global.cs, +0.5-1 point on the
MoE expand), and threads / unroll around the shipped ones.  cfg (threads, unroll, cs):
  fp4_dequant      0 256 x 8 (shipped)  1 256 x 8 cs  2 128 x 8 cs  3 512 x 8 cs  4 256 x 4 cs  5 128 x 16
  channel_dequant  0 256 x 2 (shipped)  1 256 x 2 cs  2 256 x 4 cs  3 128 x 4 cs  4 512 x 2 cs  5 256 x 4
Every cfg bit for bit against the shipped op, then timed in turn in ONE process beside a device copy
of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/dequant_cs.py --namespace sw --arch sm_90a \\
      --out .ab/dequant/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 dequant_cs.py OUT.json
Results (2026-12-03, H200, /work/.device/5; time of a same-size copy / time at 16384 x 7168, 8192 x 16384,
4096 x 7168; every cfg bit for bit):
  fp4_dequant      shipped 0.875 0.875 0.897; cfg1 0.883 0.882 0.912; cfg2 0.885 0.883 0.912; cfg3 0.886 0.885 0.914;
                   cfg4 0.882 0.887 0.920; cfg5 0.881 0.869 0.876.  Ship cfg1 (evict-first stores, the rest as before).
  channel_dequant  shipped 0.911 0.914 0.919; cfg1 0.907 0.912 0.910; cfg2 0.919 0.916 0.916; cfg3 0.918 0.915 0.915;
                   cfg4 0.882 0.881 0.892; cfg5 0.923 0.922 0.928.  Ship cfg5 (unroll 4, plain stores).
The shipped kernels before this sweep are cfg 0 of each, byte for byte.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

FP4 = [(256, 8, 0), (256, 8, 1), (128, 8, 1), (512, 8, 1), (256, 4, 1), (128, 16, 0)]
CHANNEL = [(256, 2, 0), (256, 2, 1), (256, 4, 1), (128, 4, 1), (512, 2, 1), (256, 4, 0)]


def _sweep(name, new, cfgs, extra, rule):
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == name)
    return OpSpec(name=new, doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                  factory=spec.factory,
                  variants=tuple(Variant(dict(extra, threads=t, unroll=u, cs=c), rule=f"cfg == {i} and {rule}")
                                 for i, (t, u, c) in enumerate(cfgs)),
                  archs=("sm_90a",), reference=spec.reference)


SPECS = (_sweep("tkreg.per_token_group_dequant_fp4", "sw.fp4_dequant", FP4, {}, "H % 16 == 0"),
         _sweep("tkreg.per_channel_dequant_fp8", "sw.channel_dequant", CHANNEL, dict(layout="channel"), "C % 8 == 0"))


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    ops = tkreg.ops
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for m, k in ((1, 7168), (37, 4096), (4097, 7168), (200, 16384), (3, 32)):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") * 3
        q4, s4 = ops.per_token_group_quant_fp4(x)
        want4 = ops.per_token_group_dequant_fp4(q4, s4)
        qc, sc = ops.per_channel_quant_fp8(x)
        wantc = ops.dequant_fp8(qc, sc, layout="channel")
        for c in range(len(FP4)):
            got = tkreg.call("sw.fp4_dequant", q4, s4, cfg=c)
            res["checks"].append(dict(op="fp4", m=m, k=k, cfg=c, diff=int((got.view(torch.int16) != want4.view(torch.int16)).sum())))
        for c in range(len(CHANNEL)):
            got = tkreg.call("sw.channel_dequant", qc, sc, cfg=c)
            res["checks"].append(dict(op="channel", m=m, k=k, cfg=c, diff=int((got.view(torch.int16) != wantc.view(torch.int16)).sum())))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["diff"]], flush=True)
    for m, k in ((16384, 7168), (8192, 16384), (4096, 7168)):
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),), m * k * 3)
        for op, cfgs, nbytes, prep, shipped in (
                ("fp4_dequant", FP4, m * k // 2 + m * k // 32 + 2 * m * k, ops.per_token_group_quant_fp4,
                 ops.per_token_group_dequant_fp4),
                ("channel_dequant", CHANNEL, m * k * 3 + 4 * (-(-m // 128)) * k, ops.per_channel_quant_fp8,
                 lambda q, s: ops.dequant_fp8(q, s, layout="channel"))):
            ins = [prep(x) for (x,) in sets]
            fns = [lambda q, s, c=c: tkreg.call(f"sw.{op}", q, s, cfg=c) for c in range(len(cfgs))] + [shipped]
            ms = queued_ms_paired(fns, ins, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            names = [f"cfg{c}" for c in range(len(cfgs))] + ["shipped"]
            row = dict(op=op, shape=[m, k], of_copy={n: copy / t for n, t in zip(names, ms)},
                       gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)})
            res["rows"].append(row)
            print(op, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del ins
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
