"""Round-3 sweep pack for issue #17: cfg 0 of every op = the kernel kernels_src/quant.py shipped when it ran; cfg 1..
the prefetch / evict-first-store / occupancy candidates of docs/sweeps/quant_r3_cand.py (bit-exact by construction).
Folded (docs/quant-tuning.md, round 3): SwiGLU cfg 4 and FP4 cfg 3 (M >= 4096) ship; channel_cand and
fp4_quant_cand moved into quant.py as channel_quant_kernel and fp4_quant_kernel, whose defaults are still the
cfg-0 kernels, so this pack still builds what it measured: all 29 sm_90a cubins byte-identical to the run's pack.
Build (sm_90a only, bf16 only; one compile at a time on the 2-core build box; since 2026-12-02 the cache key also
covers quant.py and quant_r3_cand.py, which this file imports):
  .venv/bin/python -m build_tools build --src docs/sweeps/quant_r3.py --namespace sw3 --arch sm_90a --out .ab/pack3 -j 1
Run on the GPU: docs/sweeps/quant_r3_run.py (its NCFG must match this file's).
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kernels_src.quant as Q
import quant_r3_cand as C
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

IMPLS = {
    "transpose": Q.transpose_kernel, "transpose_c": C.transpose_cand,
    "channel": Q.channel_quant_kernel, "channel_c": C.channel_cand,
    # removed in the 20th session (its cfg needs `git show 3a6112f:kernels_src/quant.py`)
    "channel_t": getattr(Q, "channel_quant_t_kernel", None), "channel_t_c": C.channel_t_cand,
    "fp4q": Q.fp4_quant_kernel, "fp4q_c": C.fp4_quant_cand,
}


def factory(impl: str, **kw):
    import inspect
    f = IMPLS[impl]
    ok = inspect.signature(f).parameters
    kw.pop("arch", None)
    bad = set(kw) - set(ok)
    assert not bad, (impl, bad)
    return f(**kw)


CFG = (Scalar("cfg", "int32", 0),)
A = ("sm_90a",)
BF = dict(dtype="bfloat16")
TR = dict(dtype="uint8", rows=8, cols=16)
ST = dict(silu=1, transpose=1, **BF)

# op -> (shipped spec, dtype of the first tensor, [params]); cfg i = list index, cfg 0 = shipped
SWEEP = {
    "silu_and_mul_per_channel_quant_fp8_transpose": ("tkreg.silu_and_mul_per_channel_quant_fp8_transpose", "bfloat16", [
        dict(impl="channel", **ST),                                   # shipped: rpt 4, 128 ch, 512 threads
        dict(impl="channel_c", cw=64, **ST),                          # 256 threads: 2 CTAs/SM
        dict(impl="channel_c", cw=32, **ST),                          # 128 threads: 4 CTAs/SM
        dict(impl="channel_c", cw=64, ns=2, cs=1, **ST),              # + next slab's loads first (144 regs: 1 CTA/SM)
        dict(impl="channel_c", cw=64, ns=2, cs=1, minb=2, **ST),      # the same held to 126 regs, no spill: 2 CTAs/SM
        dict(impl="channel_c", cw=32, ns=2, cs=1, **ST),              # 139 regs, 3 CTAs/SM
    ]),
    "per_token_group_quant_fp4": ("tkreg.per_token_group_quant_fp4", "bfloat16", [
        dict(impl="fp4q", **BF),                                      # shipped: 128 threads, unroll 4
        dict(impl="fp4q_c", cs=1, **BF),
        dict(impl="fp4q_c", nt=2, **BF),
        dict(impl="fp4q_c", nt=2, cs=1, **BF),
        dict(impl="fp4q_c", nt=2, cs=1, minb=8, **BF),                # 64 regs (12 B spill)
        dict(impl="fp4q_c", nt=4, cs=1, **BF),
        dict(impl="fp4q_c", nt=2, cs=1, threads=256, **BF),
    ]),
    "batched_transpose": ("tkreg.batched_transpose", "uint8", [
        dict(impl="transpose", **TR),                                 # shipped: 8 x 16 B a thread, 256 threads
        dict(impl="transpose_c", cs=1, **TR),
        dict(impl="transpose_c", nb=2, cs=1, **TR),                   # 106 regs: 2 CTAs/SM (shipped 48: 5)
        dict(impl="transpose_c", nb=2, cs=1, minb=3, **TR),           # 80 regs, 64 B spill: 3 CTAs/SM
        dict(impl="transpose_c", nb=2, **TR),                         # prefetch without cs (minb 4 spilled 328 B)
        dict(impl="transpose_c", dtype="uint8", rows=16, cols=16, cs=1),   # 16-byte stores, 256-row tile
    ]),
    "per_channel_quant_fp8_transpose": ("tkreg.per_channel_quant_fp8_transpose", "bfloat16", [
        dict(impl="channel_t", **BF),                                 # shipped: warp-local, 4 warps
        dict(impl="channel_t_c", cs=1, y32=0, **BF),
        dict(impl="channel_t_c", ns=2, cs=1, y32=0, **BF),            # 210 regs: 2 CTAs/SM (shipped 96: 5)
        dict(impl="channel_t_c", ns=2, cs=1, y32=0, minb=4, **BF),    # held to 128 regs (8 B spill): 4 CTAs/SM
        dict(impl="channel_c", transpose=1, ns=2, cs=1, **BF),        # smem q^T tile, 512 threads, prefetch
    ]),
    "per_channel_quant_fp8": ("tkreg.per_channel_quant_fp8", "bfloat16", [
        dict(impl="channel", **BF),                                   # shipped: rpt 4, 512 threads
        dict(impl="channel_c", cs=1, **BF),
        dict(impl="channel_c", ns=2, cs=1, **BF),                     # 87 regs: 1 CTA/SM (shipped 64: 2)
        dict(impl="channel_c", ns=2, cs=1, minb=2, **BF),             # held to 64 regs (40 B spill)
        dict(impl="channel_c", cw=64, ns=2, cs=1, **BF),
    ]),
}
NCFG = {k: len(v[2]) for k, v in SWEEP.items()}

_S = {s.name: s for s in Q.SPECS}


def _op(name, spec_name, dt, cfgs):
    spec = _S[spec_name]
    t0 = spec.tensors[0]
    t0 = Tensor(t0.name, t0.shape, dtypes=(dt,))
    shipped_rule = next(v.rule for v in spec.variants if dict(v.params).get("dtype", dt) == dt)
    vs = tuple(Variant(c, rule=f"cfg == {i}" + (f" and {shipped_rule}" if shipped_rule else ""))
               for i, c in enumerate(cfgs))
    return OpSpec(name=f"sw3.{name}", doc=spec.doc, tensors=(t0,) + spec.tensors[1:], scalars=spec.scalars + CFG,
                  factory=factory, variants=vs, archs=A, reference=spec.reference)


SPECS = tuple(_op(n, sn, dt, cf) for n, (sn, dt, cf) in SWEEP.items())
