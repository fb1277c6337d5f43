"""Sweep pack: silu_and_mul_quant_fp8 at prefill-chunk sizes (issue #17's mid-size bar: >= 90% of a
same-size copy; the shipped kernel read 0.83x at 1024 x 2*4096).  cfg 0 = the shipped variant
(kernels_src/fp8.py: 128 threads, 4 groups of 128 a lane pair, min 8 CTAs a SM); cfg 1.. fewer
groups a warp (more, shorter CTAs: a second wave overlaps the first's SwiGLU and stores).  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/silu_fp8_mid.py --namespace sw5 --arch sm_90a \\
      --out .ab/silu/pack --cache /tmp/silucache
Run (cwd outside the repo): `TKREG_PACKS=pack python3 docs/sweeps/silu_fp8_mid_run.py OUT.json`.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import kernels_src.fp8 as F
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

SHIPPED = dict(dtype="bfloat16", layout="row", silu=1)
CFGS = [SHIPPED, dict(SHIPPED, unroll=2), dict(SHIPPED, unroll=1), dict(SHIPPED, unroll=2, threads=256, min_blocks=4),
        dict(SHIPPED, unroll=2, min_blocks=16)]
spec = next(s for s in F.SPECS if s.name == "tkreg.silu_and_mul_quant_fp8")
SPECS = (OpSpec(name="sw5.silu_and_mul_quant_fp8", doc=spec.doc,
                tensors=(Tensor("x", ("M", "N"), dtypes=("bfloat16",)),) + spec.tensors[1:],
                scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=spec.factory,
                variants=tuple(Variant(c, rule=f"cfg == {i} and N % 256 == 0 and M <= {F.MAX_Y * 4}")
                               for i, c in enumerate(CFGS)),
                archs=("sm_90a",), reference=spec.reference),)
