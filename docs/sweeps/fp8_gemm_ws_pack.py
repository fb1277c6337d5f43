"""Sweep pack: the warp-specialized FP8 tile (kernels_src/fp8_ws.py) beside the pipelined tiles it
replaced.  cfg 0 = the shipped tile (the reference every cfg is checked against bit for bit),
cfg 1.. = candidates (last run: persistent CTAs, one a SM, looping over tiles so the producer
loads the next tile's blocks under this tile's epilogue; dense ships it, grouped keeps the grid).  (Earlier rounds with this pack: the pipelined
tiles, groups of 4 blocks, a 2-CTA cluster multicasting A: docs/gemm-tuning.md.)  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_gemm_ws_pack.py --namespace sw --arch sm_90a \
      --out .ab/fp8ws/pack --cache /tmp/wscache
Run (cwd outside the repo): `TKREG_PACKS=pack python3 docs/sweeps/fp8_gemm_r2_run.py OUT.json`
and `fp8_gemm_ws_check.py OUT.json` (odd block counts, K <= 128, edge tiles, column-major scales).
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_gemm_r2 import CFG, F, G, _S
from tkreg.spec import OpSpec, Variant

WS = dict(F.CLASSES[[c[0] for c in F.CLASSES].index("ws-128")][1])
# (the shipped tile is persistent with panel 16 since this pack's last run; cfg 1 is the grid form)
DENSE = [WS, dict(WS, persistent=False, panel=10), dict(WS, stages=5), dict(WS, panel=10)]
GWS = dict(G.FP8_WS, fp8=True)
GP = dict(GWS, persistent=True)
GROUPED = {"contiguous": [GWS, GP, dict(GP, stages=5)], "masked": [GWS, GP]}

def _op(name, factory, cfgs, base=None):
    spec = _S[f"tkreg.{name}"]
    vs = tuple(Variant(c, rule=f"cfg == {i}" + (f" and {base}" if base else ""),
                       pass_configs=F.WS_PASS_CONFIGS if c.get("mma") == "ws" else ()) for i, c in enumerate(cfgs))
    return OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                  factory=factory, variants=vs, archs=("sm_90a",), reference=spec.reference, index64=spec.index64)


SPECS = (_op("fp8_gemm", F.fp8_gemm_factory, DENSE),) + tuple(
    _op(name, G.factory, [dict(c, layout=layout) for c in GROUPED[layout]],
        base=f"E <= {2**G.LOG_E - 1} and {G.OUT32[layout]}")
    for name, layout in (("fp8_grouped_gemm", "contiguous"), ("fp8_grouped_gemm_masked", "masked")))
