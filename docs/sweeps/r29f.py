"""Sweep pack + runner (29th session, staged): the fp16 cubins of the resident-row any-N rms_norm /
fused_add_rms_norm for 2048 < N <= 4096 (kernels_src/norm.py RESIDENT ships that range for bf16
only, its cubins having run on the H200 in r28n.py; fp16 waits for this check).  The same variant
params as the bf16 entry, dtype float16.  Checks only (the kernel's speed is the bf16 one's):
against the torch reference within the GPU tests' fp16 tolerance (rtol = atol = 2e-3), the fused
residual exact, and the fused x equal bit for bit to rms_norm of the new residual, at M = 0, 1, 37,
4097 x N = 2056, 2880, 3584, 4088.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r29f.py --namespace sw --arch sm_90a \\
      --out .ab/r29f/pack --cache build/cache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 r29f.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg

NS = (2056, 2880, 3584, 4088)


def specs():
    from kernels_src import norm as Nm
    from tkreg.spec import OpSpec, Variant
    r = Nm.RESIDENT[0]
    v = Variant(Nm._resident(r, "float16"), rule=f"N % 8 == 0 and N > {r.lo} and N <= {r.hi}")
    out = []
    for name, short in (("tkreg.rms_norm", "sw.rn16"), ("tkreg.fused_add_rms_norm", "sw.fa16")):
        spec = next(s for s in Nm.SPECS if s.name == name)
        t = spec.tensors
        x = type(t[0])(t[0].name, t[0].shape, dtypes=("float16",), role=t[0].role)
        out.append(OpSpec(name=short, doc=spec.doc, tensors=(x,) + t[1:], scalars=spec.scalars, factory=spec.factory,
                          archs=("sm_90a",), reference=spec.reference, variants=(v,)))
    return tuple(out)


def run(out: str):
    import json
    import torch
    import tkreg
    from tkreg import reference
    res = {"checks": []}
    torch.manual_seed(0)
    for m in (0, 1, 37, 4097):
        for n in NS:
            x = torch.randn(m, n, device="cuda").mul(3).half()
            r0 = torch.randn(m, n, device="cuda").half()
            w = torch.randn(n, device="cuda").half()
            got = tkreg.call("sw.rn16", x, w)
            ok_rn = torch.allclose(got.float(), reference.rms_norm(x, w).float(), rtol=2e-3, atol=2e-3)
            fx, fr = x.clone(), r0.clone()
            tkreg.call("sw.fa16", fx, fr, w)
            rx, rr = x.clone(), r0.clone()
            reference.fused_add_rms_norm(rx, rr, w)
            res["checks"].append(dict(
                m=m, n=n, rn=bool(ok_rn), fa_x=bool(torch.allclose(fx.float(), rx.float(), rtol=2e-3, atol=2e-3)),
                fa_r_exact=bool(torch.equal(fr, rr)), fa_x_is_rn=bool(torch.equal(fx, tkreg.call("sw.rn16", fr, w))),
                nan=bool(got.isnan().any() or fx.isnan().any())))
    bad = [c for c in res["checks"] if c["nan"] or not (c["rn"] and c["fa_x"] and c["fa_r_exact"] and c["fa_x_is_rn"])]
    print("checks", len(res["checks"]), "bad", bad, flush=True)
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
