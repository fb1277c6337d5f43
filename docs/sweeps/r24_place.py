"""Why one process's same-size rows read 8-11% apart from another's (24th session; the 23rd's
r23_samesize.py ruled out timing order).  Two suspects, both tested here on the installed wheel:
  1. the bench's same-size copy copies `torch.empty` memory: fresh pages hold zeros, reused ones the
     random data of earlier rows, and a copy's DRAM time may depend on the bits it moves;
  2. where the allocator places the buffers (each round allocates new ones, the old kept alive).
For fused_add_rms_norm 4096 x 4096, rms_norm 4096 x 4096 and the bf16 transpose 3000 x 7168 (the
three #17 rows short of their bars), ROUNDS allocation rounds each: tkreg and torch.compile in
turn (queued, as the bench), then copies of the same bytes from empty / zeroed / random buffers.
Run: python3 r24_place.py OUT.json (run it in several fresh processes)
"""
import json
import statistics
import sys

import torch

import tkreg
from tkreg import reference
from tkreg.bench.timing import compiled, queued_ms, queued_ms_paired, rotations

ROUNDS = 4
bf = torch.bfloat16


def copy_sets(nbytes, fill):
    half = nbytes // 2

    def one():
        s = torch.empty(half, dtype=torch.uint8, device="cuda")
        if fill == "zero":
            s.zero_()
        elif fill == "rand":
            s.copy_(torch.randint(0, 256, (half,), dtype=torch.uint8, device="cuda"))
        return s, torch.empty(half, dtype=torch.uint8, device="cuda")
    return rotations(one, nbytes)


def cases():
    m, n = 4096, 4096
    ca, cr, ct = (compiled(reference.fused_add_rms_norm), compiled(reference.rms_norm), compiled(reference.transpose))
    yield ("fused_add 4096x4096", 4 * m * n * 2 + n * 2,
           lambda: (torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(m, n, dtype=bf, device="cuda"),
                    torch.randn(n, dtype=bf, device="cuda")),
           lambda x, r, w: tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6), lambda x, r, w: ca(x, r, w, 1e-6))
    yield ("rms_norm 4096x4096", 2 * m * n * 2 + n * 2,
           lambda: (torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(n, dtype=bf, device="cuda")),
           lambda x, w: tkreg.ops.rms_norm(x, w, 1e-6), lambda x, w: cr(x, w, 1e-6))
    yield ("transpose 3000x7168", 4 * 3000 * 7168, lambda: (torch.randn(3000, 7168, dtype=bf, device="cuda"),),
           tkreg.ops.transpose, ct)


def main(out):
    res, keep = [], []
    for name, nbytes, make, ours, comp in cases():
        for rnd in range(ROUNDS):
            sets = rotations(make, nbytes)
            t, c = queued_ms_paired([ours, comp], sets, reps=50, runs=5)
            row = dict(case=name, round=rnd, tkreg=t, compile=c)
            for fill in ("empty", "zero", "rand"):
                cs = copy_sets(nbytes, fill)
                row[f"copy_{fill}"] = queued_ms(lambda s, d: d.copy_(s), cs)
                keep.append(cs)
            keep.append(sets)
            res.append(row)
            print(name, rnd, " ".join(f"{k}={v * 1e3:.1f}" for k, v in row.items() if isinstance(v, float)),
                  f"| of copy_empty {row['copy_empty'] / t:.3f} zero {row['copy_zero'] / t:.3f} rand {row['copy_rand'] / t:.3f}"
                  f" | vs compile {c / t:.3f}", flush=True)
        rs = [r for r in res if r["case"] == name]
        print(name, "median of-copy", {f: round(statistics.median(r[f"copy_{f}"] / r["tkreg"] for r in rs), 3)
                                       for f in ("empty", "zero", "rand")}, flush=True)
        del keep[:]
        torch.cuda.empty_cache()
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
