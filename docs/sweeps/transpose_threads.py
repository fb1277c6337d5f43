"""Sweep pack + runner: the aligned-pitch register transpose (kernels_src/quant.py transpose_kernel)
by CTA size, against the shipped op (256 threads), torch.compile and a copy of the same bytes.
cfg 0: 128 threads, 1: 512 threads, 2: 64 threads.  Each cfg is checked bit for bit against
x.transpose, then timed in ONE process (queued, inputs rotated past L2).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/transpose_threads.py --namespace sw --arch sm_90a \\
      --out .ab/tt/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 transpose_threads.py OUT.json
Results (2026-12-03, H200, /work/.device/14 of the 18th session): every cfg bit for bit equal; no CTA
size beats the shipped 256 threads by more than noise (fp8 16384 x 7168: 512 threads 3570 GB/s,
shipped 3549, 128 threads 3430; bf16 32 x 2048 x 7168: 3882 / 3925 / 3777).  Nothing changed.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

THREADS = (128, 512, 64)


def specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    vs = tuple(Variant(dict(dtype=d, rows=r, cols=c, threads=t), rule=f"cfg == {i} and B <= 65535 and M % {r} == 0 and N % {c} == 0")
               for d, r, c in Q.TRANSPOSE.values() for i, t in enumerate(THREADS))
    return (OpSpec(name="sw.batched_transpose", doc=spec.doc, tensors=spec.tensors, scalars=(Scalar("cfg", "int32", 0),),
                   factory=Q.transpose_kernel, variants=vs, archs=("sm_90a",), reference=spec.reference),)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "time": []}
    n_cfg = len(THREADS)
    for dt in (torch.uint8, torch.float16, torch.int32):
        for b, m, n in ((1, 64, 64), (2, 4096, 7168), (1, 136, 80), (3, 16, 16), (1, 0, 16)):
            x = (torch.randn(b, m, n, device="cuda") * 100).to(dt)
            want = x.transpose(1, 2).contiguous()
            d = []
            for c in range(n_cfg):
                try:
                    d.append(int((tkreg.call("sw.batched_transpose", x, cfg=c) != want).sum()))
                except Exception as e:
                    d.append(f"{type(e).__name__}: {e}"[:200])
            res["checks"].append(dict(dt=str(dt), shape=[b, m, n], diffs=d))
    print("checks bad", [r for r in res["checks"] if any(v != 0 for v in r["diffs"])], flush=True)
    tc = torch.compile(lambda x: x.transpose(1, 2).contiguous())
    for dt in (torch.float8_e4m3fn, torch.bfloat16, torch.float32):
        for b, m, n in ((1, 16384, 7168), (1, 8192, 16384), (32, 2048, 7168), (1, 8192, 4096)):
            nb = 2 * b * m * n * dt.itemsize
            sets = rotations(lambda: ((torch.randn(b, m, n, device="cuda") * 100).to(dt),), nb)
            kind = {1: torch.uint8, 2: torch.float16, 4: torch.int32}[dt.itemsize]
            fns = [lambda x, c=c: tkreg.call("sw.batched_transpose", x.view(kind), cfg=c) for c in range(n_cfg)]
            fns += [lambda x: tkreg.ops.batched_transpose(x), tc]
            ms = queued_ms_paired(fns, sets, reps=20, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nb))   # a copy moving the same bytes
            names = [f"cfg{c}" for c in range(n_cfg)] + ["shipped", "compile", "copy"]
            gbs = {a: nb / t / 1e6 for a, t in zip(names, ms + [copy])}
            res["time"].append(dict(dt=str(dt), shape=[b, m, n], gbs=gbs))
            print(str(dt), b, m, n, " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets


if __name__ == "__main__":
    run(sys.argv[1])
