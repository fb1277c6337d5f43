"""Sweep pack + runner: the MoE combine (kernels_src/moe.py combine_kernel) by loads in flight
(`unroll` chunks a thread), the k it is built for (`kmax`: registers), threads and evict-first
stores, against the shipped op and torch.compile of the reference, timed queued (inputs rotated
past L2) in ONE process.  cfg i = CFGS[i]; each cfg checked bit for bit against the shipped op.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/moe_combine.py --namespace sw --arch sm_90a \\
      --out .ab/mc/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 moe_combine.py OUT.json
Results (2026-12-03, H200; docs/quant-tuning.md "MoE combine"): every cfg bit for bit equal; cfg 3
ships for k <= 8 (16384 x 7168: 3947 -> 4419 GB/s, torch.compile 4306), cfg 5 up to 128 tokens
(64 tokens: 808 -> 1232).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CFGS = [dict(), dict(kmax=8), dict(kmax=8, unroll=2), dict(kmax=8, cs=1), dict(kmax=8, unroll=2, cs=1),
        dict(kmax=8, threads=256), dict(kmax=8, unroll=4), dict(kmax=8, threads=64, unroll=2)]


def specs():
    from kernels_src import moe as Mo
    spec = next(s for s in Mo.SPECS if s.name == "tkreg.moe_combine")
    vs = tuple(Variant(c, rule=f"cfg == {i} and K <= {c.get('kmax', 16)}") for i, c in enumerate(CFGS))
    return (OpSpec(name="sw.moe_combine", doc=spec.doc, tensors=spec.tensors, scalars=(Scalar("cfg", "int32", 0),),
                   factory=Mo.combine_kernel, variants=vs, archs=("sm_90a",), reference=spec.reference),)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import compiled, copy_sets, queued_ms, queued_ms_paired, rotations
    from tkreg.reference import moe as ref
    ops = tkreg.ops
    res = {"checks": [], "time": []}
    c_co = compiled(ref.moe_combine)
    for t, h in ((16384, 7168), (4096, 7168), (16384, 4096), (64, 7168)):
        e, k, a = 256, 8, 128
        idx = torch.rand(t, e, device="cuda").topk(k, -1).indices.to(torch.int32)
        m = ops.moe_mapping(idx, e, a)
        used = int(m.expert_offsets[-1])
        w = torch.rand(t, k, device="cuda")
        y = torch.randn(used, h, device="cuda").to(torch.bfloat16)
        want = ops.moe_combine(y, m, w)
        d = [int((tkreg.call("sw.moe_combine", y, m.row_of_slot, w, None, cfg=c) != want).sum()) for c in range(len(CFGS))]
        sh = torch.randn(t, h, device="cuda").to(torch.bfloat16)
        want = ops.moe_combine(y, m, w, shared=sh) if "shared" in ops.moe_combine.__code__.co_varnames else None
        if want is not None:
            d += [int((tkreg.call("sw.moe_combine", y, m.row_of_slot, w, sh, cfg=c) != want).sum()) for c in range(len(CFGS))]
        res["checks"].append(dict(shape=[t, h], diffs=d))
        print("check", t, h, d, flush=True)
        nbytes = t * k * h * 2 + t * h * 2 + 8 * t * k
        sets = rotations(lambda: (torch.randn(used, h, device="cuda").to(torch.bfloat16),), nbytes)
        fns = [lambda y, c=c: tkreg.call("sw.moe_combine", y, m.row_of_slot, w, None, cfg=c) for c in range(len(CFGS))]
        fns += [lambda y: ops.moe_combine(y, m, w), lambda y: c_co(y, m.row_of_slot, w)]
        ms = queued_ms_paired(fns, sets, reps=20, runs=5)
        copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
        names = [f"cfg{c}" for c in range(len(CFGS))] + ["shipped", "compile", "copy"]
        gbs = {a: nbytes / x / 1e6 for a, x in zip(names, ms + [copy])}
        res["time"].append(dict(shape=[t, h], gbs=gbs, us={a: x * 1e3 for a, x in zip(names, ms + [copy])}))
        print(t, h, " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
        json.dump(res, open(out, "w"), indent=1)
        del sets


if __name__ == "__main__":
    run(sys.argv[1])
