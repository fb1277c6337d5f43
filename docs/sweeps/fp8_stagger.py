"""Sweep pack + runner: staggered consumers on the warp-specialized FP8 tile (kernels_src/fp8_ws.py
`stagger`: consumer 1 runs block 0 alone, so its group boundaries, where its WGMMA chain drains
(wait_group 0), fall one block after consumer 0's, and one consumer's chain is always in flight)
beside the shipped tiles.  Every cfg, the shipped op and torch's peers are timed in ONE process,
their runs taken in turn (queued_ms_paired).  cfg (dense):
  0 = shipped ws-128 (persistent, panel 16, 4 stages)    1 = the same, staggered
  2 = staggered, 5 stages                                3 = staggered grid form (one CTA a tile)
grouped contiguous: 0 = shipped persistent, 1 = staggered, 2 = grid (shipped for K > 4096),
3 = staggered grid; masked: 0 = shipped grid, 1 = staggered.
The `stagger` option was removed from kernels_src/fp8_ws.py after this run: build the pack from
commit ad12ab1 (`git worktree add /tmp/st ad12ab1`).
Each cfg is compared bit for bit with the shipped op (odd block counts, K <= 128, partial K,
edge tiles, column-major scales; grouped: empty experts, partial tiles).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_stagger.py --namespace sw --arch sm_90a \\
      --out .ab/fp8st/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_stagger.py OUT.json (fp8_sweep.run)
Results (2026-12-02, docs/gemm-tuning.md): bit-exact; persistent staggered -4-12%, grid +-4%.
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import grouped_op, sweep_op  # noqa: E402


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    ws = dict(F.CLASSES[[c[0] for c in F.CLASSES].index("ws-128")][1])
    dense = [ws, dict(ws, stagger=True), dict(ws, stagger=True, stages=5), dict(ws, stagger=True, persistent=False, panel=10)]
    gws = dict(G.FP8_WS, fp8=True)
    gp = dict(gws, persistent=True)
    return (sweep_op("fp8_gemm", dense), grouped_op("contiguous", [gp, dict(gp, stagger=True), gws, dict(gws, stagger=True)]),
            grouped_op("masked", [gws, dict(gws, stagger=True)]))


if __name__ == "__main__":
    import fp8_sweep
    fp8_sweep.run(sys.argv[1], nd=4, nc=4, nm=2)
