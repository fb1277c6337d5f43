"""Sweep pack + runner: quant_e5m6 (one CTA a token, `vecs` 16-byte vectors a thread held across the
row's amax) at K = 16384, where the shipped vecs = 8 reads 82% of copy against 89-91% for vecs = 4 at
K <= 8192 (docs/quant-tuning.md: half the registers).  cfg (threads x vecs, the K it covers):
  0 256 x 8 (shipped, K <= 16384)   1 512 x 4   2 1024 x 2
  3 256 x 4 (shipped, K <= 8192)    4 512 x 2   5 128 x 8
Every cfg bit for bit against the shipped op (codes and scales, UE8M0 too), then timed in turn in ONE
process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/e5m6_threads.py --namespace sw --arch sm_90a \\
      --out .ab/e5m6/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 e5m6_threads.py OUT.json
Results (2026-12-02, H200; time of a same-size copy / time): 8192 x 16384 0.85 / 0.87 / 0.57 (cfg 0 / 1 / 2),
4096 x 16384 0.83 / 0.87 / 0.56; 16384 x 7168 cfg 3 0.92, cfg 4 0.78, cfg 5 0.97; 4096 x 7168 0.90 / 0.77 /
0.91; every cfg bit for bit.  Ship: cfg 5 for K <= 8192, cfg 1 up to 16384.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

CFGS = [(256, 8, 16384), (512, 4, 16384), (1024, 2, 16384), (256, 4, 8192), (512, 2, 8192), (128, 8, 8192)]


def _specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.quant_e5m6")
    x = spec.tensors[0]
    return (OpSpec(name="sw.quant_e5m6", doc=spec.doc, tensors=(Tensor(x.name, x.shape, dtypes=("bfloat16",)),) + spec.tensors[1:],
                   scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=Q.e5m6_quant_kernel,
                   variants=tuple(Variant(dict(dtype="bfloat16", threads=t, vecs=v), rule=f"cfg == {i} and K % 8 == 0 and K <= {kmax}")
                                  for i, (t, v, kmax) in enumerate(CFGS)),
                   archs=("sm_90a",), reference=spec.reference),)


SPECS = _specs()


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for m, k in ((1, 16384), (37, 16376), (4097, 9000), (5, 8192), (33, 7168), (2, 8)):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") * 3
        for ue in (False, True):
            p, s = tkreg.ops.quant_e5m6(x, ue8m0=ue)
            for c, (_, _, kmax) in enumerate(CFGS):
                if k <= kmax:
                    q, t = tkreg.call("sw.quant_e5m6", x, ue8m0=ue, cfg=c)
                    res["checks"].append(dict(m=m, k=k, ue8m0=ue, cfg=c, diff=int((q != p).sum()) + int((t != s).sum())))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["diff"]], flush=True)
    for m, k in ((8192, 16384), (4096, 16384), (16384, 7168), (4096, 7168)):
        nbytes = m * k * 2 + m * k * 3 // 2 + m * 4
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),), nbytes)
        cfgs = [c for c, (_, _, kmax) in enumerate(CFGS) if k <= kmax]
        fns = [lambda x, c=c: tkreg.call("sw.quant_e5m6", x, cfg=c) for c in cfgs] + [lambda x: tkreg.ops.quant_e5m6(x)]
        ms = queued_ms_paired(fns, sets, reps=30, runs=5)
        copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
        names = [f"cfg{c}" for c in cfgs] + ["shipped"]
        row = dict(shape=[m, k], of_copy={n: copy / t for n, t in zip(names, ms)}, gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)})
        res["rows"].append(row)
        print(row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
