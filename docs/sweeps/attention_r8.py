"""Sweep pack: flash attention forward, round 8 (cfg scalar): FlashAttention-4's lazy rescale on
top of round 7's short chains.  The running max stays stale unless a row's max grew by more than
2^lazy (so P <= 2^lazy), and O's rescale (64 FMULs a thread a tile, predicated before) sits behind a
branch taken only when one of the thread's rows moved.  cfg 0: d128 tree 8 (shipped before);
1: + lazy 8; 2: d64 tree 0; 3: d64 tree 8 + lazy 8.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r8.py --namespace sw --arch sm_90a \\
      --out .ab/attn8/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0 2" python3 docs/sweeps/attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

WS = dict(dim=128, varlen=False, block_N=128, stages=2, persistent=True)
CFGS = [("ws", dict(WS, tree=8), W.PASS_CONFIGS), ("ws", dict(WS, tree=8, lazy=8), W.PASS_CONFIGS),
        ("ws", dict(WS, dim=64), W.PASS_CONFIGS), ("ws", dict(WS, dim=64, tree=8, lazy=8), W.PASS_CONFIGS)]
SPECS = (sweep_spec(CFGS),)
