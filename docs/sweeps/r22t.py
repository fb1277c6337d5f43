"""Sweep pack + runner (22nd session): the 2-byte transpose at prefill-chunk sizes (1024-4096 x
4096-7168 bf16), where BENCHMARKS.md (torch.compile peer fixed) shows 0.80-0.97x torch.compile:
smaller CTA tiles (threads, lanes) and grid order.  cfg 0: the shipped aligned 2-byte variant.
Every cfg bit for bit against cfg 0 (odd and aligned M, N; B > 1), then timed in turn in ONE process
beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r22t.py --namespace sw --arch sm_90a \\
      --out .ab/r22t/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r22t.py OUT.json
Results (/work/.device/7 of the 22nd session, 40 checks): cfg 3 (lanes 4, 128 threads) ships for
B * M * N <= 22 * 2^20; the table is in docs/quant-tuning.md.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

BASE = dict(dtype="float16", rows=8, cols=8)
CFGS = [dict(lanes=8), dict(lanes=8, threads=128), dict(lanes=8, threads=64), dict(lanes=4, threads=128),
        dict(lanes=4, threads=64), dict(lanes=8, raster="flat"), dict(lanes=8, threads=128, raster="flat"),
        dict(lanes=2, threads=128)]
SHAPES = ((1024, 4096), (1024, 7168), (2048, 4096), (2048, 7168), (3000, 4096), (3000, 7168), (4096, 4096),
          (4096, 7168), (16384, 7168), (8192, 16384))


def specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    t = spec.tensors
    x = type(t[0])(t[0].name, t[0].shape, dtypes=("float16",))
    return (OpSpec(name="sw.tr2", doc=spec.doc, tensors=(x,) + t[1:], scalars=(Scalar("cfg", "int32", 0),),
                   factory=spec.factory, archs=("sm_90a",), reference=spec.reference,
                   variants=tuple(Variant(dict(BASE, **c), rule=f"cfg == {i} and M % 8 == 0 and N % 8 == 0")
                                  for i, c in enumerate(CFGS))),)


def run(out: str):
    import torch
    import tkreg
    from tkreg import reference
    from tkreg.bench.timing import compiled, rotations
    from sweep_check import cfg_row   # a sibling module (this folder is on sys.path)
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for b, m, n in ((1, 8, 8), (1, 40, 1416), (3, 3000, 264), (1, 4104, 2056), (2, 1024, 7168)):
        x = torch.randn(b, m, n, device="cuda").half()
        want = tkreg.call("sw.tr2", x, cfg=0)
        res["checks"].append(dict(m=m, n=n, cfg=0, d=int((want != x.transpose(1, 2)).sum())))
        for c in range(1, len(CFGS)):
            got = tkreg.call("sw.tr2", x, cfg=c)
            res["checks"].append(dict(m=m, n=n, cfg=c, d=int((got.view(torch.int16) != want.view(torch.int16)).sum())))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    comp = compiled(reference.batched_transpose)
    for m, n in SHAPES:
        nbytes = 4 * m * n
        sets = rotations(lambda: (torch.randn(1, m, n, device="cuda").half(),), nbytes)
        res["rows"].append(cfg_row("sw.tr2", len(CFGS), comp, sets, nbytes, (m, n)))
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
