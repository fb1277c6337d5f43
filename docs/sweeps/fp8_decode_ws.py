"""Run 2026-12-02 (results: docs/gemm-tuning.md, "WS decode"; cfg 1 ships as class decode-ws for
M <= 16 and N >= 8192): FP8 decode (M <= 16) on the hand-written
warp-specialized tile in swap-AB form (kernels_src/fp8_ws.py `swap_ab=True`: a consumer's 64-row
WGMMA side is weight rows, the 16 tokens its N side; block k+1's WGMMAs are issued before block
k's promotion).  Why: the shipped swap-AB decode tiles are per-K-block latency bound (~340 ns a
block: barrier wait -> WGMMA -> wait -> promotion, one warpgroup a SM; 37-75% of copy), and the
same overlap took the large tiles from 746 to ~1000 TFLOP/s.  cfg 0 = the shipped decode-16 tile
(the reference every cfg is checked against bit for bit; both use m64n16k32 WGMMAs).
(Builds at commit 3dec196 or before: the decode-16 class and the pipelined swap-AB tile it names
were removed after docs/sweeps/fp8_decode_split.py.)
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_decode_ws.py --namespace sw --arch sm_90a \\
      --out .ab/fp8dec/pack --cache /tmp/deccache
Run (cwd outside the repo): `DECODE=1 TKREG_PACKS=pack python3 docs/sweeps/fp8_gemm_r2_run.py OUT.json fp8_gemm`
and `fp8_gemm_ws_check.py OUT.json` (odd block counts, K <= 128, edge tiles, column-major scales).
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_gemm_r2 import CFG, F, _S
from tkreg.spec import OpSpec, Variant

SHIPPED = dict(F.CLASSES[[c[0] for c in F.CLASSES].index("decode-16")][1])
# one consumer of 64 weight rows (N / 64 CTAs, two or more a SM) or two (128 rows); no register
# rebalancing (tiny accumulators: 8 fp32 a thread)
D = dict(mma="ws", swap_ab=True, block_tok=16, block_M=64, consumers=1, producer_regs=0, splits=1)
CANDIDATES = [dict(D, stages=8, unroll=2), dict(D, stages=8, unroll=4), dict(D, stages=12, unroll=4),
              dict(D, stages=6, unroll=4), dict(D, block_M=128, consumers=2, stages=8, unroll=4),
              # 32 / 64 tokens a tile (M = 32 / 64 read the weights once; the shipped mid-64 tile is not swap-AB)
              dict(D, block_tok=32, stages=8, unroll=4), dict(D, block_tok=64, stages=8, unroll=4)]
spec = _S["tkreg.fp8_gemm"]
variants = (Variant(SHIPPED, rule="cfg == 0"),) + tuple(
    Variant(c, rule=f"cfg == {i}", pass_configs=F.WS_PASS_CONFIGS) for i, c in enumerate(CANDIDATES, 1))
SPECS = (OpSpec(name="sw.fp8_gemm", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                factory=F.fp8_gemm_factory, variants=variants, archs=("sm_90a",), reference=spec.reference,
                index64=spec.index64),)
