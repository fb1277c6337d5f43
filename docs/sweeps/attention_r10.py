"""Sweep pack: flash attention forward at head dim 64, round 10 (cfg scalar): FlashAttention-3's
192-row tile for d64 (`consumers=3`: three 64-row consumer warpgroups at 160 registers taking the
WGMMA turn in a ring), so two consumers' matmuls run under each one's softmax, not one.
cfg 0: d64 as shipped (two consumers); 1: three consumers, 2 stages; 2: 3 stages; 3: 2 stages
without the lazy rescale; 4: neither lazy rescale nor short chains (fewest registers).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r10.py --namespace sw --arch sm_90a \\
      --out .ab/attn10/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack PEERS="0" python3 attention_r2_run.py OUT.json`.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

D64 = dict(dim=64, varlen=False, block_N=128, stages=2, persistent=True, tree=8, lazy=8)
C3 = dict(D64, consumers=3)
CFGS = [("ws", D64, W.PASS_CONFIGS), ("ws", C3, W.PASS_CONFIGS), ("ws", dict(C3, stages=3), W.PASS_CONFIGS),
        ("ws", dict(C3, lazy=0), W.PASS_CONFIGS), ("ws", dict(C3, lazy=0, tree=0), W.PASS_CONFIGS)]
SPECS = (sweep_spec(CFGS),)
