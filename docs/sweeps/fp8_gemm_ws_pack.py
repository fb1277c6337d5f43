"""Sweep pack: the hand-written warp-specialized FP8 GEMM (docs/sweeps/fp8_gemm_ws.py) against the
shipped `large` tile.  cfg 0 = kernels_src/fp8_gemm.py CLASSES "large" (the reference every cfg is
checked against bit for bit), cfg 1.. = WS candidates (128x128, two consumer warpgroups):
  1-3 = stages 4/5/6 with unroll 2, 4-6 = stages 4/5/6 with unroll 4; 192x128 (three consumers,
  split-half parts): 7 = stages 4 unroll 2, 8 = stages 4 unroll 4, 9 = stages 3 unroll 2.  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_gemm_ws_pack.py --namespace sw --arch sm_90a \
      --out .ab/fp8ws/pack --cache /tmp/wscache
Run (cwd outside the repo): `TKREG_PACKS=pack python3 docs/sweeps/fp8_gemm_r2_run.py OUT.json fp8_gemm`.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_gemm_r2 import CFG, F, _S
from fp8_gemm_ws import PASS_CONFIGS, factory
from tkreg.spec import OpSpec, Variant

LARGE = dict(next(p for name, p, *_ in F.CLASSES if name == "large"))
WS = dict(handwritten=True, block_M=128, block_N=128, stages=4, consumers=2, splits=1)
# stages x unroll (blocks per group: the WGMMA pipe drains once per group, see fp8_gemm_ws.py).
# (producer 40 / consumer 232 registers spilled 8 bytes: not a candidate.)
CANDIDATES = [dict(WS, stages=s, unroll=u) for u in (2, 4) for s in (4, 5, 6)]
# the shipped 192x128 tile (three consumers at 160 registers) with split-half parts
H = dict(WS, block_M=192, consumers=3, halves=True, consumer_regs=160)
# (stages 3 with unroll 4 spilled 148 bytes in ptxas: not a candidate)
CANDIDATES += [dict(H, stages=4, unroll=2), dict(H, stages=4, unroll=4), dict(H, stages=3, unroll=2)]

spec = _S["tkreg.fp8_gemm"]
variants = (Variant(LARGE, rule="cfg == 0"),) + tuple(
    Variant(c, rule=f"cfg == {i}", pass_configs=PASS_CONFIGS) for i, c in enumerate(CANDIDATES, 1))
SPECS = (OpSpec(name="sw.fp8_gemm", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                factory=factory, variants=variants, archs=("sm_90a",), reference=spec.reference,
                index64=spec.index64),)
