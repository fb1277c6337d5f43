"""Sweep pack + runner: scales in shared memory (kernels_src/fp8_ws.py `smem_scales`, shipped on the
128-row tiles since docs/sweeps/fp8_ring.py) on the tiles that still load them from global memory:
the swap-AB decode tile (class decode-ws) and the masked 64-row tile (ws-64).  Decode is per-K-block
latency bound (docs/gemm-tuning.md), and the scale's global load sat on that path.  cfg:
  fp8_gemm: 0 = decode-ws (shipped, M <= 16, N >= 8192)   1 = decode-ws + smem_scales
            2 = decode-16 (shipped for N < 8192)          3 = decode-ws + smem_scales, 12 stages
  fp8_grouped_gemm_masked: 0 = ws-64 (shipped, Mmax <= 64)   1 = ws-64 + smem_scales (producer 40 regs)
Every cfg is compared bit for bit with the shipped op, then all are timed in turn in ONE process
(queued_ms_paired), weight GB/s beside a same-size copy.
(Builds at commit 3dec196 or before: the decode-16 class and the pipelined swap-AB tile it names
were removed after docs/sweeps/fp8_decode_split.py.)
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_smem_decode.py --namespace sw --arch sm_90a \\
      --out .ab/fp8sd/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_smem_decode.py OUT.json
Results (2026-12-02, H200): bit-exact; decode-ws +1-3% at N >= 8192, +7-15% at N = 4096 / 7168 (where
the shipped decode-16 tiles are still as fast or faster); ws-64 +2-4%.  Both ship since the 15th
session (docs/sweeps/fp8_ffma.py, fp8_masked_occ.py measured them again).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import decode_times, dense_checks, grouped_op, masked_checks, masked_small_times, sweep_op  # noqa: E402

CHECK = [(1, 8192, 128), (5, 8200, 1152), (16, 8192, 2000), (3, 16384, 7168), (16, 1000, 5248)]


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    cls = {c[0]: dict(c[1]) for c in F.CLASSES}
    R = ("smem_scales", "producer_regs", "consumer_regs")   # the tiles as they shipped before this sweep
    dws, d16 = {k: v for k, v in cls["decode-ws"].items() if k != "smem_scales"}, cls["decode-16"]
    dense = [dws, dict(dws, smem_scales=True), d16, dict(dws, smem_scales=True, stages=12)]
    m64 = {k: v for k, v in dict(G.FP8_WS_64, fp8=True).items() if k not in R}
    masked = [m64, dict(m64, smem_scales=True, producer_regs=40)]
    return sweep_op("fp8_gemm", dense), grouped_op("masked", masked)


def run(out: str):
    import torch
    torch.manual_seed(0)
    res = {"checks": dense_checks(CHECK, 4) + masked_checks(range(2))}
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if any(r["diffs"])], flush=True)
    res["decode"] = decode_times(range(4))
    res["masked"] = masked_small_times(range(2), ((8, 16), (16, 16), (4, 32), (8, 64)))
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
