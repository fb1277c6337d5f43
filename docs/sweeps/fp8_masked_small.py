"""Sweep pack: FP8 masked grouped GEMM at small per-expert counts (DeepEP low-latency decode), where
the shipped tiles stream the expert weights at 57-79% of copy (bar: 80%).  cfg 0 = FP8_SMALL (shipped
for Mmax <= 64), cfg 1-3 = its tile / depth variants, cfg 4-5 = the warp-specialized tile with one
64-row consumer, cfg 6 = the shipped 128-row warp-specialized tile (Mmax > 64).  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_masked_small.py --namespace sw --arch sm_90a \\
      --out .ab/msmall/pack --cache /tmp/mscache -j 2
FP8_SMALL and the pipelined FP8 grouped tile left kernels_src after this sweep: build it at commit
b5eb701.  Run (cwd outside the repo): `SMALL_MASKED=1 TKREG_PACKS=pack python3 docs/sweeps/fp8_gemm_r2_run.py OUT.json`.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_gemm_r2 import CFG, F, G, _S
from tkreg.spec import OpSpec, Variant

S = dict(G.FP8_SMALL, fp8=True, layout="masked")
W = dict(G.FP8_WS, fp8=True, layout="masked")
CFGS = [S, dict(S, block_N=64), dict(S, block_N=64, stages=8), dict(S, stages=4),
        dict(W, block_M=64, consumers=1, stages=6), dict(W, block_M=64, consumers=1, stages=8), W]
spec = _S["tkreg.fp8_grouped_gemm_masked"]
base = f"E <= {2**G.LOG_E - 1} and {G.OUT32['masked']}"
variants = tuple(Variant(c, rule=f"cfg == {i} and {base}", pass_configs=F.WS_PASS_CONFIGS if c.get("mma") == "ws" else ())
                 for i, c in enumerate(CFGS))
SPECS = (OpSpec(name="sw.fp8_grouped_gemm_masked", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                factory=G.factory, variants=variants, archs=("sm_90a",), reference=spec.reference, index64=spec.index64),)
