"""Sweep pack + runner: scales in shared memory on the warp-specialized FP8 tile
(kernels_src/fp8_ws.py `smem_scales`, "ring" below, its name when this ran: the producer stages
each K block's a / b scales in its ring slot beside the tiles, and a consumer reads block b's
scales after waiting for the slot).  Why: ncu on the shipped tile at 8192^3 (tensor pipe 66%
busy, against 94% for the bf16 tile and 80% for torch's blockwise _scaled_mm) put the consumers'
top stall on the b-scale's global load (R2UR right after its LDG, long scoreboard), on the path
to the next block's WGMMA issue.  Runner: fp8_sweep.run (every cfg bit for bit against the
shipped op, then all timed in turn in ONE process).  Ships since: dense ws-128, grouped FP8_WS.
cfg (dense):
  0 = shipped ws-128 (persistent, panel 16, 4 stages, 24 / 240 registers)
  1 = ring (40 / 232 registers: the producer holds the loaded scales)   2 = ring, 5 stages
  3 = ring, grid form (one CTA a tile)                                  4 = shipped at 40 / 232
grouped contiguous: 0 = shipped persistent, 1 = ring persistent, 2 = grid, 3 = ring grid;
masked: 0 = shipped grid, 1 = ring grid.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_ring.py --namespace sw --arch sm_90a \\
      --out .ab/fp8ring/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_ring.py OUT.json
Results (2026-12-02, H200, one process; docs/gemm-tuning.md): every cfg bit for bit equal; ring
dense +5-16% (8192^3 976 -> 1076 TFLOP/s), contiguous +3-11%, masked +4-8%; 5 stages and the
grid form no better; the register split alone (cfg 4) +-4%; ncu tensor pipe busy 67% -> 76%.
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import grouped_op, sweep_op  # noqa: E402

R = dict(smem_scales=True, producer_regs=40, consumer_regs=232)


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    ws = dict(F.CLASSES[[c[0] for c in F.CLASSES].index("ws-128")][1])
    ws = {k: v for k, v in ws.items() if k not in R}   # the tile as it shipped before this sweep
    dense = [ws, dict(ws, **R), dict(ws, **R, stages=5), dict(ws, **R, persistent=False, panel=10),
             dict(ws, producer_regs=40, consumer_regs=232)]
    gws = {k: v for k, v in dict(G.FP8_WS, fp8=True).items() if k not in R}
    gp = dict(gws, persistent=True)
    return (sweep_op("fp8_gemm", dense), grouped_op("contiguous", [gp, dict(gp, **R), gws, dict(gws, **R)]),
            grouped_op("masked", [gws, dict(gws, **R)]))


if __name__ == "__main__":
    import fp8_sweep
    fp8_sweep.run(sys.argv[1], nd=5, nc=4, nm=2)
