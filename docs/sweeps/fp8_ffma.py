"""Sweep pack + runner: DeepGEMM's FFMA interleave (build_tools/sass_edit.py, Variant
`sass_edits=("ffma_interleave",)`) on the FP8 warp-specialized tiles, whose promotion FFMA runs
should overlap the other consumer's WGMMAs; plus the scales-in-shared-memory decode / 64-row
tiles measured in docs/sweeps/fp8_smem_decode.py, with and without the edit.  cfg:
  fp8_gemm: 0 = ws-128 (shipped, M > 128)   1 = ws-128 + FFMA interleave
            2 = decode-ws + smem_scales       3 = 2 + FFMA interleave   (M <= 16)
  fp8_grouped_gemm (contiguous): 0 = ws-persistent (shipped)   1 = + FFMA interleave
  fp8_grouped_gemm_masked: 0 = ws (shipped, Mmax > 64)   1 = + FFMA interleave
                           2 = ws-64 + smem_scales (40 producer registers)   3 = 2 + FFMA interleave
                           4 = 2, persistent (one CTA a SM: at Mmax 64 every tile is one expert's
                               rows, so no empty capacity tiles; the next tile's loads under the
                               epilogue, for K = 2048's short tiles)
Every cfg is compared bit for bit with the shipped op (the edit only changes scheduling hints),
then timed in turn in ONE process: fp8_sweep.run for cfgs 0-1, then the decode / Mmax 64 cases for
cfgs 2-3 beside the shipped op and a same-size copy (weight GB/s).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_ffma.py --namespace sw --arch sm_90a \\
      --out .ab/fp8ffma/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_ffma.py OUT.json
Results (2026-12-02, H200, one process; docs/gemm-tuning.md): every cfg bit for bit equal; the edit
changes nothing measurable (dense 8192^3 1035 / 1035 TFLOP/s, every dense, grouped and masked case
within +-1%, decode and Mmax 64 within +-1%): ptxas 13.0 already lets every other FFMA of a
promotion run yield (only the FFMAs with a reuse-cached scale hold the slot), so the edit touches
8 FFMAs in the ws-128 cubin.  Not shipped; build_tools/sass_edit.py and Variant.sass_edits, which
this pack needs, were removed again right after the commit that added them (git log -S sass_edits).
decode-ws + smem_scales (cfg 2) against the shipped decode tiles: +2-3% at N >= 8192, +4-5% at
N = 7168 (decode-16 there), -2% at 4096 x 14336 (decode-16-split): ships for M <= 16, N >= 7168.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import dense_checks, grouped_op, masked_inputs, sweep_op  # noqa: E402

FF = dict(sass_edits=("ffma_interleave",))
SMEM = dict(smem_scales=True)
DECODE_CHECK = [(1, 8192, 128), (5, 8200, 1152), (16, 8192, 2000), (3, 16384, 7168)]
WEIGHTS = ((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    cls = {c[0]: dict(c[1]) for c in F.CLASSES}
    ws, dws = cls["ws-128"], dict(cls["decode-ws"], **SMEM)
    gws = dict(G.FP8_WS, fp8=True)
    gp = dict(gws, persistent=True)
    m64 = dict(G.FP8_WS_64, fp8=True, smem_scales=True, producer_regs=40)
    return (sweep_op("fp8_gemm", [ws, dict(ws, **FF), dws, dict(dws, **FF)]),
            grouped_op("contiguous", [gp, dict(gp, **FF)]),
            grouped_op("masked", [gws, dict(gws, **FF), m64, dict(m64, **FF), dict(m64, persistent=True)]))


def run_small(out: str, res: dict):
    """cfgs 2-3 (masked 2-4): checks at M <= 16 / Mmax 64, then decode and small masked timings."""
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    ops, f8 = tkreg.ops, torch.float8_e4m3fn
    checks = [r for r in dense_checks(DECODE_CHECK, 4)]
    for r in checks:
        r["diffs"] = r["diffs"][2:]
    for e, mmax, n, k in ((8, 64, 4096, 7168), (5, 64, 1000, 1152)):
        counts = torch.tensor([(i * 13) % (mmax + 1) for i in range(e)], dtype=torch.int32, device="cuda")
        qm = (torch.randn(e, mmax, k, device="cuda") * 0.5).to(f8)
        sm = torch.rand(e, mmax, -(-k // 128), device="cuda") + 0.5
        qb = (torch.randn(e, n, k, device="cuda") * 0.5).to(f8)
        sb = torch.rand(e, -(-n // 128), -(-k // 128), device="cuda") + 0.5
        ref = ops.fp8_grouped_gemm_masked(qm, sm, qb, sb, counts)
        keep = (torch.arange(mmax, device="cuda")[None, :] < counts[:, None])[..., None]
        d = [int(((tkreg.call("sw.fp8_grouped_gemm_masked", qm, sm, qb, sb, counts, cfg=c).view(torch.int16)
                   != ref.view(torch.int16)) & keep).sum()) for c in (2, 3, 4)]
        checks.append(dict(op="masked-64", shape=[e, mmax, n, k], diffs=d))
    res["small_checks"] = checks
    print("small checks", len(checks), "bad", [r for r in checks if any(r["diffs"])], flush=True)
    res["decode"], res["masked64"] = [], []
    for m in (1, 16):
        for n, k in WEIGHTS:
            def make():
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
                return (*ops.per_token_group_quant_fp8(x), *ops.per_block_quant_fp8(w))
            sets = rotations(make, m * k + n * k + 2 * m * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=c) for c in (2, 3)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_gemm(qa, sa, qb, sb)]
            ms = queued_ms_paired(fns, sets, reps=50, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(n * k))
            gbs = {nm: n * k / t / 1e6 for nm, t in zip(["cfg2", "cfg3", "shipped", "copy"], ms + [copy])}
            res["decode"].append(dict(shape=[m, n, k], gbs=gbs))
            print([m, n, k], " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            del sets
    for e, per in ((8, 16), (16, 16), (8, 64)):
        for n, k in ((4096, 7168), (7168, 2048)):
            mmax = 64
            counts = torch.tensor([max(1, int(per * (0.7 + 0.6 * ((i * 37) % 11) / 10))) for i in range(e)],
                                  dtype=torch.int32, device="cuda").clamp_(max=mmax)
            sets = rotations(masked_inputs(e, mmax, n, k), e * mmax * k + e * n * k + 2 * e * mmax * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_grouped_gemm_masked", qa, sa, qb, sb, counts, cfg=c)
                   for c in (2, 3, 4)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, counts)]
            ms = queued_ms_paired(fns, sets, reps=40, runs=5)
            gbs = {nm: e * n * k / t / 1e6 for nm, t in zip(["cfg2", "cfg3", "cfg4", "shipped"], ms)}
            res["masked64"].append(dict(case=f"{e}e ~{per} N={n} K={k}", gbs=gbs))
            print(res["masked64"][-1]["case"], " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    import fp8_sweep
    fp8_sweep.run(sys.argv[1], nd=2, nc=2, nm=2)
    run_small(sys.argv[1], json.load(open(sys.argv[1])))
