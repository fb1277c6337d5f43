"""Sweep pack, round 2 of docs/sweeps/gemm_ws_r1.py (same runner and shapes): the warp-specialized
persistent bf16 tile's N width, so a shape's tile count lands just under a multiple of the SM count
(e.g. N = 7168: 224-wide tiles give 32 a row block, 112 give 64).  cfg:
  0 = 128x256, 4 stages, 128-column epilogue chunks (round 1's cfg 0)
  1 = 128x224, 4 stages, 32-column chunks      2 = 128x224, 3 stages, one 224-column chunk
  3 = 128x112, 6 stages                        4 = 128x56, 8 stages
  5 = 128x128, 6 stages                        6 = 128x64, 8 stages
  7 = 128x32, 8 stages
Build: as round 1 with `--src docs/sweeps/gemm_ws_r2.py --out .ab/gws2/pack`; run:
  TKREG_PACKS=pack python3 gemm_ws_r2.py OUT.json
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gemm_ws_r1 as R  # noqa: E402

B = R.BASE
CFGS = [B, dict(B, block_N=224, epi=32), dict(B, block_N=224, stages=3, epi=224), dict(B, block_N=112, stages=6, epi=112),
        dict(B, block_N=56, stages=8, epi=56), dict(B, block_N=128, stages=6), dict(B, block_N=64, stages=8, epi=64),
        dict(B, block_N=32, stages=8, epi=32)]
SPECS = R.make_specs(CFGS)

if __name__ == "__main__":
    R.main(__file__, len(CFGS))
