"""Sweep pack + runner: the shared-memory tile transpose for pitches that are not whole 16-byte
vectors (kernels_src/quant.py transpose_tiled_kernel, e.g. an odd token count).  cfg (per dtype):
  0 = 64 x 64 tile, 256 threads, element loads and stores, rows padded by 4 bytes
  1 = 0 with N % (16 / size) == 0 assumed: the loads vectorize (4 bytes, the padded rows' alignment)
  2 = 1 with rows padded by 16 bytes: 16-byte loads, 4-way bank conflicts on the column reads
  3 = 2 with 128-row tiles (256-byte store runs)
  4 = 0 with 128-row tiles
  5 = 1 with 128 threads
Cfgs 1-3 and 5 need N % (16 / size) == 0 (their rule).  Each cfg is checked bit for bit against
x.transpose, then timed in turn in ONE process beside the shipped op and a same-size copy.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/transpose_tiled.py --namespace sw --arch sm_90a \\
      --out .ab/tr/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 transpose_tiled.py OUT.json
Results (2026-12-02, H200, one process; docs/quant-tuning.md): every cfg bit for bit equal; cfg 3
best for 2-byte elements (4097 x 7168: 1415 -> 2448 GB/s) and level with 1 / 2 / 5 for 1-byte ones
(725 -> 1424): it ships for N % (16 / size) == 0, cfg 0 for the rest; the transposed staging for
an aligned M (`vec_m`, 16-byte stores) was added after this run (7168 x 4097 bf16: 34% -> 38% of
copy in the bench).  (That run's copy column timed a copy of half the bytes, so it read ~2x high;
the copy now moves the same bytes as the transpose.)
(Builds at commit f40ae36: transpose_tiled_kernel left the source when the unaligned register transpose
replaced it, docs/sweeps/transpose_unaligned.py.)
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CFGS = [dict(), dict(vec=1), dict(vec=1, pad_bytes=16), dict(vec=1, pad_bytes=16, tile_m=128), dict(tile_m=128),
        dict(vec=1, threads=128)]
SIZE = {"uint8": 1, "float16": 2, "int32": 4}


def specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    vs = []
    for d in SIZE:
        for i, c in enumerate(CFGS):
            c = dict(c)
            vec = c.pop("vec", 0) * (16 // SIZE[d])
            vs.append(Variant(dict(dtype=d, tile=64, **c, **({"vec_n": vec} if vec else {})),
                              rule=f"cfg == {i}" + (f" and N % {vec} == 0" if vec else "")))
    return (OpSpec(name="sw.batched_transpose", doc=spec.doc, tensors=spec.tensors, scalars=(Scalar("cfg", "int32", 0),),
                   factory=Q.transpose_factory, variants=tuple(vs), archs=("sm_90a",), reference=spec.reference),)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "time": []}
    for dt in (torch.uint8, torch.float16, torch.int32):
        for b, m, n in ((1, 37, 5), (2, 4097, 7168), (1, 130, 72), (1, 1, 7168), (3, 65, 4104)):
            x = (torch.randn(b, m, n, device="cuda") * 100).to(dt)
            want = x.transpose(1, 2).contiguous()
            d = []
            for c in range(len(CFGS)):
                try:
                    d.append(int((tkreg.call("sw.batched_transpose", x, cfg=c) != want).sum()))
                except Exception as e:  # a cfg whose rule does not take this N
                    d.append(type(e).__name__)
            res["checks"].append(dict(dt=str(dt), shape=[b, m, n], diffs=d))
    print("checks bad", [r for r in res["checks"] if any(v not in (0, "NoKernelError") for v in r["diffs"])], flush=True)
    for dt in (torch.float16, torch.uint8):
        for m, n in ((4097, 7168), (16383, 7168), (2047, 4096)):
            nb = 2 * m * n * dt.itemsize
            sets = rotations(lambda: ((torch.randn(1, m, n, device="cuda") * 100).to(dt),), nb)
            fns = [lambda x, c=c: tkreg.call("sw.batched_transpose", x, cfg=c) for c in range(len(CFGS))]
            fns += [lambda x: tkreg.ops.batched_transpose(x)]
            ms = queued_ms_paired(fns, sets, reps=20, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nb))   # a copy moving the same bytes
            names = [f"cfg{c}" for c in range(len(CFGS))] + ["shipped", "copy"]
            gbs = {a: nb / t / 1e6 for a, t in zip(names, ms + [copy])}
            res["time"].append(dict(dt=str(dt), shape=[m, n], gbs=gbs))
            print(str(dt), m, n, " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets


if __name__ == "__main__":
    run(sys.argv[1])
