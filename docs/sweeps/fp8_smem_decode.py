"""Sweep pack + runner: scales in shared memory (kernels_src/fp8_ws.py `smem_scales`, shipped on the
128-row tiles since docs/sweeps/fp8_ring.py) on the tiles that still load them from global memory:
the swap-AB decode tile (class decode-ws) and the masked 64-row tile (ws-64).  Decode is per-K-block
latency bound (docs/gemm-tuning.md), and the scale's global load sat on that path.  cfg:
  fp8_gemm: 0 = decode-ws (shipped, M <= 16, N >= 8192)   1 = decode-ws + smem_scales
            2 = decode-16 (shipped for N < 8192)          3 = decode-ws + smem_scales, 12 stages
  fp8_grouped_gemm_masked: 0 = ws-64 (shipped, Mmax <= 64)   1 = ws-64 + smem_scales (producer 40 regs)
Every cfg is compared bit for bit with the shipped op, then all are timed in turn in ONE process
(queued_ms_paired), weight GB/s beside a same-size copy.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_smem_decode.py --namespace sw --arch sm_90a \\
      --out .ab/fp8sd/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_smem_decode.py OUT.json
Results (2026-12-02, H200): bit-exact; decode-ws +1-3% at N >= 8192, +7-15% at N = 4096 / 7168 (where
the shipped decode-16 tiles are still as fast or faster); ws-64 +2-4%.  Not shipped yet (docs/gemm-tuning.md).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import dense_checks, grouped_op, masked_inputs, sweep_op  # noqa: E402

WEIGHTS = ((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))
CHECK = [(1, 8192, 128), (5, 8200, 1152), (16, 8192, 2000), (3, 16384, 7168), (16, 1000, 5248)]


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    cls = {c[0]: dict(c[1]) for c in F.CLASSES}
    dws, d16 = cls["decode-ws"], cls["decode-16"]
    dense = [dws, dict(dws, smem_scales=True), d16, dict(dws, smem_scales=True, stages=12)]
    m64 = dict(G.FP8_WS_64, fp8=True)
    masked = [m64, dict(m64, smem_scales=True, producer_regs=40)]
    return sweep_op("fp8_gemm", dense), grouped_op("masked", masked)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    ops, f8, res = tkreg.ops, torch.float8_e4m3fn, {"checks": [], "decode": [], "masked": []}
    torch.manual_seed(0)
    res["checks"] += dense_checks(CHECK, 4)
    for e, mmax, n, k in ((8, 64, 4096, 7168), (5, 64, 1000, 1152)):
        counts = torch.tensor([(i * 13) % (mmax + 1) for i in range(e)], dtype=torch.int32, device="cuda")
        qm = (torch.randn(e, mmax, k, device="cuda") * 0.5).to(f8)
        sm = torch.rand(e, mmax, -(-k // 128), device="cuda") + 0.5
        qb = (torch.randn(e, n, k, device="cuda") * 0.5).to(f8)
        sb = torch.rand(e, -(-n // 128), -(-k // 128), device="cuda") + 0.5
        ref = ops.fp8_grouped_gemm_masked(qm, sm, qb, sb, counts)
        keep = (torch.arange(mmax, device="cuda")[None, :] < counts[:, None])[..., None]
        d = [int(((tkreg.call("sw.fp8_grouped_gemm_masked", qm, sm, qb, sb, counts, cfg=c).view(torch.int16)
                   != ref.view(torch.int16)) & keep).sum()) for c in range(2)]
        res["checks"].append(dict(op="masked", shape=[e, mmax, n, k], diffs=d))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if any(r["diffs"])], flush=True)

    for m in (1, 8, 16):
        for n, k in WEIGHTS:
            def make():
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
                return (*ops.per_token_group_quant_fp8(x), *ops.per_block_quant_fp8(w))
            sets = rotations(make, m * k + n * k + 2 * m * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=c) for c in range(4)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_gemm(qa, sa, qb, sb)]
            ms = queued_ms_paired(fns, sets, reps=50, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(n * k))
            gbs = {nm: n * k / t / 1e6 for nm, t in zip(["cfg0", "cfg1", "cfg2", "cfg3", "shipped", "copy"], ms + [copy])}
            res["decode"].append(dict(shape=[m, n, k], gbs=gbs))
            print([m, n, k], " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets
    for e, per in ((8, 16), (16, 16), (4, 32), (8, 64)):
        for n, k in ((4096, 7168), (7168, 2048)):
            mmax = 64
            counts = torch.tensor([max(1, int(per * (0.7 + 0.6 * ((i * 37) % 11) / 10))) for i in range(e)],
                                  dtype=torch.int32, device="cuda").clamp_(max=mmax)

            sets = rotations(masked_inputs(e, mmax, n, k), e * mmax * k + e * n * k + 2 * e * mmax * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_grouped_gemm_masked", qa, sa, qb, sb, counts, cfg=c)
                   for c in range(2)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, counts)]
            ms = queued_ms_paired(fns, sets, reps=40, runs=5)
            gbs = {nm: e * n * k / t / 1e6 for nm, t in zip(["cfg0", "cfg1", "shipped"], ms)}
            res["masked"].append(dict(case=f"{e}e ~{per} N={n} K={k}", gbs=gbs))
            print(res["masked"][-1]["case"], " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets


if __name__ == "__main__":
    run(sys.argv[1])
