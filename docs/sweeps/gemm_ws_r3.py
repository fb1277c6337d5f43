"""Sweep pack, round 3 of docs/sweeps/gemm_ws_r1.py: ping-pong consumers (kernels_src/gemm_ws.py
`pingpong`: the two consumer warpgroups take the CTA's tiles in turn, each a whole 128-row tile,
so one's epilogue runs under the other's WGMMAs) beside the cooperative tiles that ship.  All cfgs,
the shipped op and cuBLAS are timed in ONE process, their runs taken in turn per shape
(tkreg.bench.timing.queued_ms_paired): the clock drifts as the GPU heats, and separate processes
read the same cubin 5-14% apart (rounds 1-2).  cfg:
  0 = cooperative 128x256, 4 stages (class large)      1 = cooperative 128x224 (large-224)
  2 = cooperative 128x128, 6 stages (mid-128)          3 = ping-pong 128x128, 4 stages, 64-column chunks
  4 = ping-pong 128x128, 6 stages, 32-column chunks    5 = ping-pong 128x192, 4 stages
  6 = ping-pong 64x256, 4 stages
cfgs 3-6 need the ping-pong body, removed from kernels_src/gemm_ws.py after this round: build this
pack from commit 62dfcbc (`git worktree add /tmp/r3 62dfcbc`).
Build: as round 1 with `--src docs/sweeps/gemm_ws_r3.py --out .ab/gws3/pack`; run:
  TKREG_PACKS=pack python3 gemm_ws_r3.py OUT.json
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gemm_ws_r1 as R  # noqa: E402

B = R.BASE
P = dict(B, pingpong=True)
CFGS = [B, dict(B, block_N=224, epi=32), dict(B, block_N=128, stages=6), dict(P, block_N=128, epi=64),
        dict(P, block_N=128, stages=6, epi=32), dict(P, block_N=192, epi=64), dict(P, block_M=64, epi=128)]
SPECS = R.make_specs(CFGS)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired, rotations
    res = {"checks": [r for c in range(len(CFGS)) for r in R.checks(c)], "rows": []}
    bad = [r for r in res["checks"] if r["rel"] > 3e-3 or r["nan"]]
    print("checks", len(res["checks"]), "bad", bad, flush=True)
    names = [f"cfg{c}" for c in range(len(CFGS))] + ["shipped", "cuBLAS"]
    for m, n, k in R.PREFILL + R.MID:
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                                  torch.randn(n, k, dtype=torch.bfloat16, device="cuda")), 2 * (m * k + n * k + m * n))
        fns = [lambda a, b, c=c: tkreg.call("sw.gemm", a, b, cfg=c) for c in range(len(CFGS))]
        fns += [tkreg.ops.gemm, lambda a, b: torch.matmul(a, b.t())]
        ref = tkreg.ops.gemm(*sets[0])
        diffs = [int((f(*sets[0]).view(torch.int16) != ref.view(torch.int16)).sum()) for f in fns[:len(CFGS)]]
        r = max(5, min(40, int(1.5e13 / (2 * m * n * k))))
        ms = queued_ms_paired(fns, sets, reps=r, runs=5)
        tf = {nm: 2 * m * n * k / t / 1e9 for nm, t in zip(names, ms)}
        res["rows"].append(dict(shape=[m, n, k], tflops=tf, bitdiff_vs_shipped=diffs,
                                shipped=tkreg.explain("gemm", *sets[0]).chosen))
        print([m, n, k], " ".join(f"{nm}:{v:.0f}" for nm, v in tf.items()), "diffs", diffs, flush=True)
        json.dump(res, open(out, "w"), indent=1)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    run(sys.argv[1])
