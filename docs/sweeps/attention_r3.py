"""Sweep pack: flash attention forward, round 3 (cfg scalar), on kernels_src/attention_ws.py (round 2:
128-key tiles, 2 stages, 550-565 TFLOP/s non-causal, 504-552 causal; cuDNN 566-611).  cfg 0 = that
kernel; 1-3 = 144 / 160 / 176-key tiles (they spill 5 / 9 / 25 registers); 4 = the shipped kernel
with fast math and boundary-only masks (round 2's cfg 2).  Four more cfgs ran (causal row blocks
longest first: -5% to +3%, an option since removed from the kernel; and three more (H200, call 2 of 2026-12-02): FA3's order (O rescaled while S = Q K^T runs, before
P V is issued) alone, with 176-key tiles, and with longest-first: 3-8% slower, since ptxas
injects a WGMMA wait there (C7517); the option is gone from the kernel).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r3.py --namespace sw --arch sm_90a \\
      --out .ab/attn3/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS=0 python3 docs/sweeps/attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import A, W, SHIP, sweep_spec  # noqa: E402

WS = dict(dim=128, varlen=False, block_N=128, stages=2)
CFGS = [
    ("ws", WS, W.PASS_CONFIGS),
    ("ws", dict(WS, block_N=144), W.PASS_CONFIGS),
    ("ws", dict(WS, block_N=160), W.PASS_CONFIGS),
    ("ws", dict(WS, block_N=176), W.PASS_CONFIGS),
    ("ship", dict(SHIP, mask="boundary"), A.FAST_EXP),
]
SPECS = (sweep_spec(CFGS),)
