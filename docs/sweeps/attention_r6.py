"""Sweep pack: flash attention forward, round 6 (cfg scalar): the persistent kernel walking
row-block pairs (row block p, then nmb - 1 - p: every work item costs the same under a causal
mask).  As first measured (round 4), it walked single row blocks at a stride of 132 CTAs: with 32
row blocks (S = 4096) CTA bx got row blocks bx % 4 + 4k, so some CTAs had 20% more causal work
than others.  cfg 0 = the grid form, 1 = persistent (pairs), 2-3 = the same at d64.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r6.py --namespace sw --arch sm_90a \\
      --out .ab/attn6/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0 2" python3 docs/sweeps/attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

WS = dict(dim=128, varlen=False, block_N=128, stages=2)
CFGS = [("ws", kw, W.PASS_CONFIGS) for kw in (
    WS, dict(WS, persistent=True), dict(WS, dim=64), dict(WS, dim=64, persistent=True))]
SPECS = (sweep_spec(CFGS),)
