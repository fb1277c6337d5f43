"""Sweep pack + runner: the register transpose at any pitch (kernels_src/quant.py transpose_kernel
with unaligned=1: funnel-shifted 16-byte loads, stores split at the alignment boundary) against the
shipped op (the shared-memory tiles for unaligned pitches), torch.compile and a copy of the same
bytes.  cfg 0: 256 threads, 1: 128 threads, 2: 512 threads.  Each cfg is checked bit for bit against
x.transpose, then timed in ONE process (queued, inputs rotated past L2).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/transpose_unaligned.py --namespace sw --arch sm_90a \\
      --out .ab/tu/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 transpose_unaligned.py OUT.json
Results (2026-12-03, H200, one process; docs/quant-tuning.md "round 2"): every cfg bit for bit equal;
cfg 1 ships when only M is unaligned (1- and 2-byte elements: 4097 x 7168 fp8 2148 GB/s, bf16 2984,
against the shared-memory tile's 1433 / 2471 and torch.compile's 2073 / 2460), cfg 0 for the rest
(7168 x 4097 bf16 3240 against 1626 / 2565).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

THREADS = (256, 128, 512)


def specs():
    from kernels_src import quant as Q
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    vs = tuple(Variant(dict(dtype=d, rows=r, cols=c, threads=t, unaligned=1), rule=f"cfg == {i} and B <= 65535")
               for d, r, c in Q.TRANSPOSE.values() for i, t in enumerate(THREADS))
    return (OpSpec(name="sw.batched_transpose", doc=spec.doc, tensors=spec.tensors, scalars=(Scalar("cfg", "int32", 0),),
                   factory=Q.transpose_kernel, variants=vs, archs=("sm_90a",), reference=spec.reference),)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "time": []}
    n_cfg = len(THREADS)
    for dt in (torch.uint8, torch.float16, torch.int32):
        for b, m, n in ((1, 37, 5), (2, 4097, 7168), (1, 130, 72), (1, 1, 7168), (3, 65, 4104), (2, 7168, 4097),
                        (1, 4097, 4099), (1, 1000, 1), (1, 1, 1), (2, 300, 333), (1, 64, 64), (1, 0, 5), (3, 257, 129)):
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
    for dt in (torch.float8_e4m3fn, torch.uint8, torch.bfloat16, torch.int32):
        for m, n in ((4097, 7168), (7168, 4097), (4097, 4099), (16384, 7168), (16383, 7167)):
            nb = 2 * m * n * dt.itemsize
            sets = rotations(lambda: ((torch.randn(1, m, n, device="cuda") * 100).to(dt),), nb)
            kind = {1: torch.uint8, 2: torch.float16, 4: torch.int32}[dt.itemsize]
            fns = [lambda x, c=c: tkreg.call("sw.batched_transpose", x.view(kind), cfg=c) for c in range(n_cfg)]
            fns += [lambda x: tkreg.ops.batched_transpose(x), tc]
            ms = queued_ms_paired(fns, sets, reps=20, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nb))   # a copy moving the same bytes
            names = [f"cfg{c}" for c in range(n_cfg)] + ["shipped", "compile", "copy"]
            gbs = {a: nb / t / 1e6 for a, t in zip(names, ms + [copy])}
            res["time"].append(dict(dt=str(dt), shape=[m, n], gbs=gbs))
            print(str(dt), m, n, " ".join(f"{a}:{v:.0f}" for a, v in gbs.items()), flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets


if __name__ == "__main__":
    run(sys.argv[1])
