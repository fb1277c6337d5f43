"""Sweep pack: flash attention forward, round 4 (cfg scalar): the persistent form of
kernels_src/attention_ws.py (min(tiles, SM_COUNT) CTAs; the next tile's K/V and Q load under this
tile's epilogue; O staged in its own buffers).  cfg 0 = the grid form (round 3's cfg 0), 1 =
persistent, 2-3 = the same at d64.  (Run on the H200 as measured, the persistent form walked single
row blocks at a fixed stride, and two more cfgs put causal row blocks longest first; both since
replaced by row-block pairs: docs/sweeps/attention_r6.py.)
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r4.py --namespace sw --arch sm_90a \\
      --out .ab/attn4/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0 2" python3 docs/sweeps/attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

WS = dict(dim=128, varlen=False, block_N=128, stages=2)
WS64 = dict(WS, dim=64)
CFGS = [(kind, kw, W.PASS_CONFIGS) for kind, kw in (
    ("ws", WS), ("ws", dict(WS, persistent=True)), ("ws", WS64), ("ws", dict(WS64, persistent=True)))]
SPECS = (sweep_spec(CFGS),)
