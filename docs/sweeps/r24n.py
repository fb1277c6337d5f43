"""Sweep pack + runner (24th session): rms_norm and fused_add_rms_norm (bf16) at N = 4096-7168 and
prefill-chunk token counts, where the bench (L2 rotation fixed: tkreg/bench/timing.py rotations)
shows rms_norm 4096 x 4096 at 1.13x torch.compile (bar 1.15x, torch.compile at 0.83 of a copy).
cfg 0: the shipped resident-row kernel (kernels_src/norm.py _static: 256 threads, wpre); cfgs 1-4:
the same with `rows` rows a CTA (every row's loads first, one barrier for all sums), 256 or 128
threads.
Checks: every cfg against the torch reference (max |diff| in output ulps) on odd M and M = 0, then
timed in turn in ONE process beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r24n.py --namespace sw --arch sm_90a \\
      --out .ab/r24n/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r24n.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

NS = (4096, 7168)


def _cfg(i, n):
    """cfg i at hidden size n -> factory params"""
    from kernels_src.norm import _static
    if i == 0:
        return _static(n, "bfloat16", True)
    threads, rows = ((256, 2), (128, 2), (128, 4), (256, 4))[i - 1]
    chunk = threads * 8
    return dict(N=n, dtype="bfloat16", threads=threads, wpre=1, max_n=-(-n // chunk) * chunk, rows=rows)


NCFG = 5
# Results (/work/.device/5 of the 24th session; 40 checks within 1 output ulp, the residual exact).
# rms_norm, of torch.compile at 1024 / 2048 / 3000 / 4096 rows, then 16384 x 4096:
#   N = 4096  cfg0 1.018 1.027 1.145 1.135 1.115 | cfg1 1.128 1.098 1.209 1.175 | cfg2 1.135 1.125 1.205 1.187 1.112
#   N = 7168  cfg0 1.161 1.096 1.040 1.044 | cfg2 1.196 1.075 1.035 1.036 | cfg3 / cfg4 (4 rows) 2-7% behind cfg0
# fused_add_rms_norm, of a same-size copy: N = 4096 cfg0 0.981 1.002 0.985 1.002 0.957, cfg2 1.035
#   0.999 0.986 1.000 0.950; N = 7168 cfg0 0.988-1.003, cfg2 0.905-0.979.
# Ships: cfg 2 (128 threads, two rows a CTA) at N = 4096 for both ops (kernels_src/norm.py TWO_ROWS).
SHAPES = tuple((m, n) for m in (1024, 2048, 3000, 4096) for n in NS) + ((16384, 4096),)


def specs():
    from kernels_src import norm as Nm
    out = []
    for name, short in (("tkreg.rms_norm", "sw.rn"), ("tkreg.fused_add_rms_norm", "sw.fa")):
        spec = next(s for s in Nm.SPECS if s.name == name)
        t = spec.tensors
        x = type(t[0])(t[0].name, t[0].shape, dtypes=("bfloat16",), role=t[0].role)
        out.append(OpSpec(name=short, doc=spec.doc, tensors=(x,) + t[1:], scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                          factory=spec.factory, archs=("sm_90a",), reference=spec.reference,
                          variants=_variants()))
    return tuple(out)


def _variants():
    """one variant per distinct kernel, its rule naming every (cfg, N) it serves"""
    by = {}
    for i in range(NCFG):
        for n in NS:
            by.setdefault(tuple(sorted(_cfg(i, n).items())), []).append(f"(cfg == {i} and N == {n})")
    return tuple(Variant(dict(k), rule=" or ".join(r)) for k, r in by.items())


def run(out: str):
    import torch
    import tkreg
    from tkreg import reference
    from tkreg.bench.timing import compiled
    from sweep_check import sweep_rows   # a sibling module (this folder is on sys.path)
    bf = torch.bfloat16
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)

    def ulps(a, b):
        return int((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max()) if a.numel() else 0

    for m in (0, 1, 37, 4097):
        for n in NS:
            x = torch.randn(m, n, device="cuda").mul(3).to(bf)
            r0 = torch.randn(m, n, device="cuda").to(bf)
            w = torch.randn(n, device="cuda").to(bf)
            ref = reference.rms_norm(x, w)
            rx, rr = x.clone(), r0.clone()
            reference.fused_add_rms_norm(rx, rr, w)
            for c in range(NCFG):
                got = tkreg.call("sw.rn", x, w, cfg=c)
                fx, fr = x.clone(), r0.clone()
                tkreg.call("sw.fa", fx, fr, w, cfg=c)
                res["checks"].append(dict(m=m, n=n, cfg=c, rn=ulps(got, ref), fa_x=ulps(fx, rx), fa_r=ulps(fr, rr)))
    print("checks", len(res["checks"]), "worst", max(max(r["rn"], r["fa_x"], r["fa_r"]) for r in res["checks"]),
          "residual exact", all(r["fa_r"] == 0 for r in res["checks"]), flush=True)
    def rnd(*shape):
        return torch.randn(*shape, dtype=bf, device="cuda")

    for op, ref, make, nb in (("sw.rn", reference.rms_norm, lambda s: (rnd(*s), rnd(s[1])), 4),
                              ("sw.fa", reference.fused_add_rms_norm, lambda s: (rnd(*s), rnd(*s), rnd(s[1])), 8)):
        res["rows"] += [dict(op=op, **r) for r in sweep_rows(op, NCFG, compiled(ref), SHAPES, make,
                                                             lambda s, nb=nb: nb * s[0] * s[1])]
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
