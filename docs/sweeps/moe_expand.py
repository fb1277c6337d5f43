"""Sweep pack: MoE expand candidates (cfg scalar).  Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/moe_expand.py --namespace sw --arch sm_90a --out /tmp/moe_pack
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kernels_src.moe as M
import moe_expand_cand as C
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

IMPLS = {"ship": M.expand_kernel, "cand": C.expand_cand}


def factory(impl: str, **kw):
    import inspect
    f = IMPLS[impl]
    ok = inspect.signature(f).parameters
    if "arch" not in ok:
        kw.pop("arch", None)
    return f(**kw)


CFG = (Scalar("cfg", "int32", 0),)
A = ("sm_90a",)
F8 = M.FP8
H8 = "H <= 8192"
SWEEP = {
    "expand_bf16": ("tkreg.moe_expand", [
        dict(impl="ship", dtype="bfloat16"),
        (dict(impl="cand", dtype="bfloat16", cs=1, tpb=2), H8),
        (dict(impl="cand", dtype="bfloat16", cs=1, tpb=4), H8),
        (dict(impl="cand", dtype="bfloat16", cs=1, tpb=2, threads=256), H8),
        (dict(impl="cand", dtype="bfloat16", cs=1, tpb=4, threads=256), H8),
        (dict(impl="cand", dtype="bfloat16", cs=1, tpb=8, threads=256), H8),
    ]),
    "expand_row": ("tkreg.moe_expand_fp8", [
        dict(impl="ship", dtype=F8, layout="row"),
        (dict(impl="cand", dtype=F8, layout="row", cs=1, tpb=2), H8),
        (dict(impl="cand", dtype=F8, layout="row", cs=1, tpb=4), H8),
        (dict(impl="cand", dtype=F8, layout="row", cs=1, tpb=8), H8),
    ]),
    "expand_col": ("tkreg.moe_expand_fp8_colmajor", [
        dict(impl="ship", dtype=F8, layout="col"),
        (dict(impl="cand", dtype=F8, layout="col", colmode="merged_all", cs=1, tpb=2, threads=256), H8),
        (dict(impl="cand", dtype=F8, layout="col", colmode="merged_all", cs=1, tpb=4, threads=256), H8),
        (dict(impl="cand", dtype=F8, layout="col", colmode="merged_all", cs=1, tpb=4, threads=128), H8),
    ]),
}
_S = {s.name: s for s in M.SPECS}


def _op(name, spec_name, cfgs):
    spec = _S[spec_name]
    vs = []
    for i, c in enumerate(cfgs):
        c, extra = c if isinstance(c, tuple) else (c, None)
        base = spec.variants[0].rule
        vs.append(Variant(c, rule=f"cfg == {i} and {base}" + (f" and {extra}" if extra else "")))
    return OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + CFG,
                  factory=factory, variants=tuple(vs), archs=A, reference=spec.reference)


SPECS = tuple(_op(n, sn, cf) for n, (sn, cf) in SWEEP.items())
