"""Sweep pack: flash attention forward, round 7 (cfg scalar): the row max and row sum as `tree`
independent chains a row (column classes j % tree) instead of tilelang's reduce (one chain of 32
dependent FMNMX / FADD a row and thread, and the sum's quad shuffles every tile); the sum's
shuffles move to the epilogue.  Persistent kernel (what ships).  cfg 0-3: d128, tree 0 / 8 / 16 /
32; cfg 4-6: d64, tree 0 / 16 / 32.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r7.py --namespace sw --arch sm_90a \\
      --out .ab/attn7/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0 4" python3 docs/sweeps/attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

WS = dict(dim=128, varlen=False, block_N=128, stages=2, persistent=True)
CFGS = [("ws", dict(WS, tree=t), W.PASS_CONFIGS) for t in (0, 8, 16, 32)] + \
       [("ws", dict(WS, dim=64, tree=t), W.PASS_CONFIGS) for t in (0, 16, 32)]
SPECS = (sweep_spec(CFGS),)
