"""Round-2 sweep pack for issue #17: cfg 0 of every op = the kernel kernels_src/quant.py shipped when it ran
(after the round-1 fold; the three that round 2 replaced are kept in docs/sweeps/quant_r1.py); the rest come
from docs/sweeps/quant_r2_cand.py (now folded into quant.py) or are re-parameterised shipped factories.
Build (sm_90a only):
  .venv/bin/python -m build_tools build --src docs/sweeps/quant_r2.py --namespace sw2 --arch sm_90a --out /tmp/pack2
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kernels_src.quant as Q
import quant_r1 as R1
import quant_r2_cand as C
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

IMPLS = {
    "transpose": Q.transpose_kernel,
    "channel": R1.channel_quant_kernel, "channel_t": R1.channel_quant_t_kernel, "channel_lean": C.channel_lean_kernel,
    "fp4q": R1.fp4_quant_kernel, "fp4q_h2": C.fp4_quant_h2_kernel,
    "fp4dq": Q.fp4_dequant_kernel,
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

# op -> (shipped spec, dtype of the first tensor, [params or (params, extra rule)]); cfg i = list index
SWEEP = {
    "batched_transpose": ("tkreg.batched_transpose", "uint8", [
        dict(impl="transpose", dtype="uint8", rows=8, cols=16),
        dict(impl="transpose", dtype="uint8", rows=8, cols=16, threads=128),
        dict(impl="transpose", dtype="uint8", rows=8, cols=16, threads=512),
    ]),
    "per_channel_quant_fp8": ("tkreg.per_channel_quant_fp8", "bfloat16", [
        dict(impl="channel", **BF),
        dict(impl="channel_lean", rpt=8, **BF),
        dict(impl="channel_lean", rpt=8, minb=3, **BF),
        dict(impl="channel_lean", rpt=4, **BF),
    ]),
    "per_channel_quant_fp8_transpose": ("tkreg.per_channel_quant_fp8_transpose", "bfloat16", [
        dict(impl="channel_t", **BF),
        dict(impl="channel_lean", transpose=1, rpt=8, **BF),
        dict(impl="channel_lean", transpose=1, rpt=4, **BF),
    ]),
    "silu_and_mul_per_channel_quant_fp8_transpose": ("tkreg.silu_and_mul_per_channel_quant_fp8_transpose", "bfloat16", [
        dict(impl="channel_t", silu=1, **BF),
        dict(impl="channel_lean", transpose=1, silu=1, rpt=8, **BF),
        dict(impl="channel_lean", transpose=1, silu=1, rpt=4, **BF),
    ]),
    "per_token_group_quant_fp4": ("tkreg.per_token_group_quant_fp4", "bfloat16", [
        dict(impl="fp4q", **BF),
        dict(impl="fp4q_h2", unroll=4, **BF),
        dict(impl="fp4q_h2", unroll=8, **BF),
        dict(impl="fp4q_h2", unroll=4, threads=256, **BF),
    ]),
    "per_token_group_dequant_fp4": ("tkreg.per_token_group_dequant_fp4", "uint8", [
        dict(impl="fp4dq"),
        dict(impl="fp4dq", threads=128, unroll=8),
        dict(impl="fp4dq", threads=512, unroll=8),
        dict(impl="fp4dq", threads=256, unroll=16),
    ]),
}
NCFG = {k: len(v[2]) for k, v in SWEEP.items()}

_S = {s.name: s for s in Q.SPECS}


def _op(name, spec_name, dt, cfgs):
    spec = _S[spec_name]
    t0 = spec.tensors[0]
    t0 = Tensor(t0.name, t0.shape, dtypes=(dt,))
    vs = []
    for i, c in enumerate(cfgs):
        c, extra = c if isinstance(c, tuple) else (c, None)
        vs.append(Variant(c, rule=f"cfg == {i}" + (f" and {extra}" if extra else "")))
    return OpSpec(name=f"sw2.{name}", doc=spec.doc, tensors=(t0,) + spec.tensors[1:], scalars=spec.scalars + CFG,
                  factory=factory, variants=tuple(vs), archs=A, reference=spec.reference)


SPECS = tuple(_op(n, sn, dt, cf) for n, (sn, dt, cf) in SWEEP.items())
