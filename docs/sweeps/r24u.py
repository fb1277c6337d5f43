"""Sweep pack + runner (24th session): 1- and 2-byte transposes at token counts whose output pitch
is no whole number of 32-byte sectors (any M; N a whole number of 16-byte vectors), where
BENCHMARKS.md shows 4097 x 7168 fp8 at 48% of copy (torch.compile 49%) and r24s.py showed what
half-sector pitches cost the 2-byte tile.  cfg 0: the shipped register kernel for unaligned M
(kernels_src/quant.py transpose_kernel, unaligned=1, 128 threads); cfgs 1-3: the sector-aligned
shared-memory tile (_tile_transpose_any) at bm x bn = 64 x 64, 64 x 128, 128 x 64 on 256 threads;
1-byte cfg 4: the shipped aligned 1-byte register kernel (M % 16 == 0 only).
The factory as swept took `esize` (1 or 2); the shipped one is 1-byte only, so this file builds
against commit 334dd42 (`git worktree add /tmp/r24u 334dd42`, build from there).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r24u.py --namespace sw --arch sm_90a \\
      --out .ab/r24u/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r24u.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

# Results (/work/.device/7 of the 24th session, 81 checks bit-exact), of a same-size copy / of torch.compile:
#   1-byte  4097 x 7168  cfg0 0.701/1.036  cfg1 0.641  cfg2 0.724/1.071  cfg3 0.487   (torch.compile 0.676)
#           4104 x 7168  cfg0 0.750/1.175  cfg1 0.338  cfg2 0.371  cfg3 0.226        (M % 16 == 8: bank conflicts)
#           3000 x 7168  cfg0 0.778/1.190  cfg2 0.380
#           4095 x 4096  cfg0 0.483/0.759  cfg2 0.660/1.036
#           1001 x 7168  cfg0 0.720/0.751  cfg2 0.841/0.877  (torch.compile 0.959 of a copy)
#          16385 x 7168  cfg0 0.632/1.095  cfg2 0.670/1.161
#           4112 x 7168  cfg0 0.802/1.194  cfg2 0.590  cfg4 (the shipped aligned kernel) 0.537/0.800
#   2-byte  cfg0 ahead everywhere but 4095 x 4096 (0.694 / 0.716): 4097 x 7168 0.831 / 0.781, 16385 x 7168 0.793 / 0.768
# The tile's column gathers conflict where every output row's shift is a multiple of 8 (all rows of
# a warp then read one bank group); at odd M the shifts take every residue.  Ships: cfg 2 for 1-byte
# elements at odd M (kernels_src/quant.py any_m); the 1-byte aligned kernel at M % 32 == 16 (0.537,
# 4112 rows) and M % 16 == 8 stay as they were: the next lever there.
TILES = [dict(bm=64, bn=64), dict(bm=64, bn=128), dict(bm=128, bn=64)]
CFGS = {1: [dict(kind="reg", dtype="uint8", rows=8, cols=16, threads=128, unaligned=1)]
        + [dict(kind="any", esize=1, threads=256, **t) for t in TILES]
        + [dict(kind="reg", dtype="uint8", rows=16, cols=16, lanes=8, threads=128)],
        2: [dict(kind="reg", dtype="float16", rows=8, cols=8, threads=128, unaligned=1)]
        + [dict(kind="any", esize=2, threads=256, **t) for t in TILES]}
RULES = {1: ["N % 16 == 0"] * 4 + ["M % 16 == 0 and N % 16 == 0"], 2: ["N % 8 == 0"] * 4}
SHAPES = {1: ((4097, 7168), (4104, 7168), (3000, 7168), (4095, 4096), (1001, 7168), (16385, 7168), (4112, 7168)),
          2: ((4097, 7168), (3001, 4096), (1001, 7168), (16385, 7168), (4095, 4096))}
CASES = ((1, 1, 16), (1, 37, 32), (3, 3000, 272), (1, 4097, 2064), (2, 1001, 7168), (5, 33, 48), (1, 31, 16),
         (1, 100, 128), (2, 65, 16), (1, 4112, 64))


def factory(kind, **kw):
    kw.pop("arch", None)          # (the build passes it to factories taking **kw)
    from kernels_src.quant import _tile_transpose_any, transpose_kernel
    return transpose_kernel(**kw) if kind == "reg" else _tile_transpose_any(**kw)


def specs():
    from kernels_src import quant as Q
    from tkreg.spec import OpSpec, Scalar, Variant
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    out = []
    for es, dt in ((1, "uint8"), (2, "float16")):
        t = spec.tensors
        x = type(t[0])(t[0].name, t[0].shape, dtypes=(dt,), role=t[0].role)
        out.append(OpSpec(name=f"sw.t{es}", doc=spec.doc, tensors=(x,) + t[1:], scalars=(Scalar("cfg", "int32", 0),),
                          factory=factory, archs=("sm_90a",), reference=spec.reference,
                          variants=tuple(Variant(c, rule=f"cfg == {i} and B <= 65535 and {r}")
                                         for i, (c, r) in enumerate(zip(CFGS[es], RULES[es])))))
    return tuple(out)


def run(out: str):
    import json
    import torch
    import tkreg
    from tkreg import reference
    from tkreg.bench.timing import compiled
    from sweep_check import diff, sweep_rows
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)

    def make(es, *shape):
        return (torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda") if es == 1
                else torch.randn(*shape, device="cuda").half())

    for es in (1, 2):
        for b, m, n in CASES:
            x = make(es, b, m, n)
            want = x.transpose(1, 2).contiguous()
            for c, r in enumerate(RULES[es]):
                if "M % 16" in r and m % 16:
                    continue
                res["checks"].append(dict(es=es, b=b, m=m, n=n, cfg=c, d=diff(tkreg.call(f"sw.t{es}", x, cfg=c), want)))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    comp = compiled(reference.batched_transpose)
    for es in (1, 2):
        for m, n in SHAPES[es]:
            ncfg = len(CFGS[es]) if m % 16 == 0 or es == 2 else len(CFGS[es]) - 1
            res["rows"] += [dict(es=es, **r) for r in sweep_rows(f"sw.t{es}", ncfg, comp, [(m, n)],
                                                                 lambda s: (make(es, 1, *s),), lambda s: 2 * es * s[0] * s[1])]
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
