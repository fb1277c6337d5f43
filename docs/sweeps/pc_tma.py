"""Sweep pack + runner: the per-channel FP8 family on a TMA ring (kernels_src/quant.py
channel_quant_kernel(tma=stages)).  The shipped kernels hold a tile's inputs in registers from the
load to the amax (a 128-token amax must see the whole group), so a CTA has nothing in flight while
it computes and stores; register prefetch cost occupancy (docs/quant-tuning.md, round 3).  Here a
persistent CTA (cps a SM) keeps `tma` tiles in flight through TMA into shared memory and refills a
slot as soon as every thread has read it.
cfg 0: the shipped kernel; then (tma stages, CTAs a SM, minb) as listed in OPS.
Measured slower everywhere (docs/quant-tuning.md), so the `tma` path was removed: this sweep builds
against `git show 9bd44b3:kernels_src/quant.py` (check that file out as kernels_src/quant.py first).
Every cfg bit for bit against cfg 0 (odd M, M = 0, ragged K, UE8M0), then timed in turn in ONE
process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/pc_tma.py --namespace sw --arch sm_90a \\
      --out .ab/pctma/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 pc_tma.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

WS = {"tl.disable_thread_storage_sync": True, "tl.disable_shared_memory_reuse": True}
# sweep op: (tkreg op, rule, cfgs); a cfg: the factory's parameters (cfg 0: the shipped variant's)
OPS = {
    "sw.pc": ("tkreg.per_channel_quant_fp8", "K % 8 == 0",
              [{}, dict(tma=2, cps=2, minb=2), dict(tma=3, cps=2, minb=2), dict(tma=4, cps=1), dict(tma=6, cps=1)]),
    "sw.pct": ("tkreg.per_channel_quant_fp8_transpose", "K % 8 == 0",
               [{}, dict(transpose=1, tma=2, cps=2, minb=2), dict(transpose=1, tma=3, cps=1),
                dict(transpose=1, tma=5, cps=1)]),
    "sw.sct": ("tkreg.silu_and_mul_per_channel_quant_fp8_transpose", "N % 16 == 0",
               [dict(silu=1, transpose=1, cw=64, ns=2, cs=1, minb=2, fsilu=1),
                dict(silu=1, transpose=1, cw=64, cs=1, minb=2, fsilu=1, tma=3, cps=2),
                dict(silu=1, transpose=1, cw=64, cs=1, fsilu=1, tma=4, cps=1),
                dict(silu=1, transpose=1, cw=128, cs=1, fsilu=1, tma=3, cps=1)]),
}


def _factory(shipped):
    def factory(dtype, **kw):
        from kernels_src import quant as Q
        kw.pop("arch", None)
        if kw.get("tma") or shipped is Q.channel_quant_kernel:
            return Q.channel_quant_kernel(dtype, **kw)
        return shipped(dtype, **kw)
    return factory


def specs():
    from kernels_src import quant as Q
    out = []
    for new, (name, rule, cfgs) in OPS.items():
        spec = next(s for s in Q.SPECS if s.name == name)
        t0 = spec.tensors[0]
        x = type(t0)(t0.name, t0.shape, dtypes=("bfloat16",))
        out.append(OpSpec(
            name=new, doc=spec.doc, tensors=(x,) + spec.tensors[1:],
            scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=_factory(spec.factory),
            variants=tuple(Variant(dict(c, dtype="bfloat16"), rule=f"cfg == {i} and {rule}",
                                   pass_configs=WS if c.get("tma") else ()) for i, c in enumerate(cfgs)),
            archs=("sm_90a",), reference=spec.reference))
    return tuple(out)


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.contiguous().view(torch.int32)


def _x(op, m, k):
    return torch.randn(m, 2 * k if op == "sw.sct" else k, dtype=torch.bfloat16, device="cuda") * 3


def run(out: str):
    global torch
    import torch
    import tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for op, (_, _, cfgs) in OPS.items():
        for m, k in ((1, 256), (37, 1408), (200, 7168), (4097, 1408), (1032, 7168), (300, 1096)):          # M = 0: TMA needs sizes > 0 (refused before launch)
            if op == "sw.sct" and k % 8:
                continue
            x = _x(op, m, k)
            for ue in (False, True):
                want = tkreg.call(op, x, ue8m0=ue, cfg=0)
                for c in range(1, len(cfgs)):
                    got = tkreg.call(op, x, ue8m0=ue, cfg=c)
                    res["checks"].append(dict(op=op, m=m, k=k, ue=ue, cfg=c,
                                              d=sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got, want))))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    shapes = {"sw.sct": ((16384, 2048), (16384, 4096), (4096, 7168), (2048, 7168))}
    for op, (_, _, cfgs) in OPS.items():
        for m, k in shapes.get(op, ((16384, 7168), (8192, 16384), (4096, 7168), (2048, 7168))):
            ib = 4 if op == "sw.sct" else 2
            nbytes = (ib + 1) * m * k + 4 * (-(-m // 128)) * k
            sets = rotations(lambda: (_x(op, m, k),), nbytes)
            fns = [lambda *a, c=c: tkreg.call(op, *a, cfg=c) for c in range(len(cfgs))]
            ms = queued_ms_paired(fns, sets, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            names = [f"cfg{c}" for c in range(len(cfgs))]
            row = dict(op=op, shape=[m, k], of_copy={n: copy / t for n, t in zip(names, ms)},
                       gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)}, copy_ms=copy)
            res["rows"].append(row)
            print(op, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
