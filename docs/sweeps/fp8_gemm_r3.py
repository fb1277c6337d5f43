"""Sweep pack, round 3: FP8 GEMM with the scale prefetch folded (cfg 0 of each op = the tile the
wheel ships after round 2; round 2 = docs/sweeps/fp8_gemm_r2.py).  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_gemm_r3.py --namespace sw --arch sm_90a --out .ab/fp8sw/pack3
Run: `SMALL_M=1 TKREG_PACKS=pack python3 docs/sweeps/fp8_gemm_r2_run.py OUT.json`.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_gemm_r2 import F, G, _op

L = dict(block_M=192, block_N=128, stages=4, threads=384, splits=1, prefetch=2)
M128 = dict(block_M=128, block_N=128, stages=4, threads=256, splits=1, prefetch=2)
M64 = dict(block_M=64, block_N=128, stages=4, threads=128, splits=1)
S64 = dict(block_M=64, block_N=64, stages=8, threads=128, splits=1)
DENSE = [L, dict(L, stages=3), dict(L, panel=4), dict(L, panel=16), dict(M128, stages=5),
         M64, dict(M64, prefetch=2), dict(M64, stages=6, prefetch=2), S64, dict(S64, prefetch=2)]
MID = dict(block_M=128, block_N=128, stages=4, threads=256)     # grouped_gemm's FP8 tiles when this ran
SMALL = dict(block_M=64, block_N=128, stages=6, threads=128)
GM = dict(MID, layout="contiguous", fp8=True, prefetch=1)
GK = dict(MID, layout="masked", fp8=True, prefetch=1)
GS = dict(SMALL, layout="masked", fp8=True)
GROUPED = [GM, dict(GM, prefetch=2), dict(GM, prefetch=2, stages=5)]
MASKED = [GK, dict(GK, prefetch=2), GS, dict(GS, prefetch=2)]

SPECS = (_op("fp8_gemm", "tkreg.fp8_gemm", F.fp8_gemm_factory, DENSE),
         _op("fp8_grouped_gemm", "tkreg.fp8_grouped_gemm", G.factory, GROUPED),
         _op("fp8_grouped_gemm_masked", "tkreg.fp8_grouped_gemm_masked", G.factory, MASKED))
