"""Sweep pack: FP8 GEMM scale prefetch (cfg scalar).  cfg 0 = the shipped tile.  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_gemm_r2.py --namespace sw --arch sm_90a --out .ab/fp8sw/pack
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import kernels_src.fp8_gemm as F
import kernels_src.grouped_gemm as G
from tkreg.spec import OpSpec, Scalar, Variant

CFG = (Scalar("cfg", "int32", 0),)
L = dict(block_M=192, block_N=128, stages=4, threads=384, splits=1)
M128 = dict(block_M=128, block_N=128, stages=4, threads=256, splits=1)
DENSE = [
    L, dict(L, prefetch=1), dict(L, prefetch=2),
    dict(L, stages=5, prefetch=2),
    M128, dict(M128, prefetch=1), dict(M128, prefetch=2), dict(M128, stages=6, prefetch=2),
]
GM = dict(block_M=128, block_N=128, stages=4, threads=256, layout="contiguous", fp8=True)   # shipped when this ran
GK = dict(GM, layout="masked")
GROUPED = [GM, dict(GM, prefetch=1), dict(GM, stages=6, prefetch=1)]
MASKED = [GK, dict(GK, prefetch=1), dict(GK, stages=6, prefetch=1)]
_S = {s.name: s for m in (F, G) for s in m.SPECS}


def _op(name, spec_name, factory, cfgs):
    spec = _S[spec_name]
    # grouped ops keep their size limits (expert count, int32 stores), not their shape-class rules
    base = f"E <= {2**G.LOG_E - 1} and {G.OUT32[cfgs[0]['layout']]}" if "layout" in cfgs[0] else None
    vs = tuple(Variant(c, rule=f"cfg == {i}" + (f" and {base}" if base else "")) for i, c in enumerate(cfgs))
    return OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                  factory=factory, variants=vs, archs=("sm_90a",), reference=spec.reference, index64=spec.index64)


SPECS = (_op("fp8_gemm", "tkreg.fp8_gemm", F.fp8_gemm_factory, DENSE),
         _op("fp8_grouped_gemm", "tkreg.fp8_grouped_gemm", G.factory, GROUPED),
         _op("fp8_grouped_gemm_masked", "tkreg.fp8_grouped_gemm_masked", G.factory, MASKED))
