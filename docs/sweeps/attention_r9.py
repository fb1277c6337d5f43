"""Sweep pack: flash attention forward at head dim 64, round 9 (cfg scalar).  d64 is bound by the
softmax (as many MUFU.EX2 cycles as WGMMA cycles a tile), and its per-tile fixed costs (ring
barriers, row-stat shuffles, O's rescale) are shared by fewer FLOPs than at d128; wider key tiles
amortise them.  cfg 0: d64 as shipped (128 keys, 2 stages, tree 8, lazy 8); 1-2: 192 keys, 2 / 3
stages; 3: 256 keys, 2 stages; 4: 128 keys, 3 stages; 5: d128 as shipped (a control).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r9.py --namespace sw --arch sm_90a \\
      --out .ab/attn9/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0 5" python3 attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

D64 = dict(dim=64, varlen=False, block_N=128, stages=2, persistent=True, tree=8, lazy=8)
CFGS = [("ws", D64, W.PASS_CONFIGS),
        ("ws", dict(D64, block_N=192), W.PASS_CONFIGS),
        ("ws", dict(D64, block_N=192, stages=3), W.PASS_CONFIGS),
        ("ws", dict(D64, block_N=256), W.PASS_CONFIGS),
        ("ws", dict(D64, stages=3), W.PASS_CONFIGS),
        ("ws", dict(D64, dim=128, lazy=0), W.PASS_CONFIGS)]
SPECS = (sweep_spec(CFGS),)
