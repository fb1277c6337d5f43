"""What an H200 streams when reads and writes are not half and half: a Triton kernel that reads R
and writes W 4-byte words per element of a 512 MiB-class stream (coalesced, 16 bytes a thread),
queued, beside torch's device copy.  The quant and dequant ops are not copies: FP4 quant reads
~4 bytes per byte written, FP4 dequant writes ~4 per byte read, so "% of copy bandwidth" is
bounded by the same read/write mix streamed with no computation at all.
Run (cwd anywhere, no pack): python3 bw_mix.py OUT.json
Results (2026-12-03, H200, /work/.device/7; torch's queued copy 4224 GB/s), GB/s and fraction of it:
  read 1 : write 0  4464  1.057      read 4 : write 1  4362  1.033      read 1 : write 1  4070  0.963
  read 0 : write 1  4524  1.071      read 3 : write 1  4392  1.040      read 1 : write 2  3926  0.929
                                     read 2 : write 1  4316  1.022      read 1 : write 3  3919  0.928
                                     read 3 : write 2  4235  1.003      read 1 : write 4  3912  0.926
Read-heavy streams (the quants: FP4 ~4 : 1, FP8 2 : 1, E5M6 ~4 : 3) run above a copy; write-heavy ones
(the dequants: FP4 ~1 : 3.6, FP8 1 : 2) top out 7% below it, turnarounds on the bus.
"""
import json
import sys


def run(out: str):
    import torch
    import triton
    import triton.language as tl
    from tkreg.bench.timing import copy_sets, queued_ms

    @triton.jit
    def rw(src, dst, sink, R: tl.constexpr, W: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.int32)
        for i in tl.static_range(R):
            acc += tl.load(src + (pid * R + i) * BLOCK + offs)
        for i in tl.static_range(W):
            tl.store(dst + (pid * W + i) * BLOCK + offs, acc + i)
        if W == 0:
            tl.store(sink + pid, tl.sum(acc, 0))

    BLOCK = 2048
    units = 1 << 16                              # programs: 64 Ki x BLOCK x 4 B = 512 MiB per R or W
    res = {"rows": []}
    copy = None
    for r, w in ((1, 1), (1, 0), (0, 1), (4, 1), (3, 1), (2, 1), (3, 2), (1, 2), (1, 3), (1, 4)):
        sets = [(torch.empty(max(r, 1) * units * BLOCK, dtype=torch.int32, device="cuda"),
                 torch.empty(max(w, 1) * units * BLOCK, dtype=torch.int32, device="cuda"),
                 torch.empty(units, dtype=torch.int32, device="cuda"))]
        sets[0][0].zero_()
        fn = lambda s, d, k, r=r, w=w: rw[(units,)](s, d, k, R=r, W=w, BLOCK=BLOCK, num_warps=4)
        ms = queued_ms(fn, sets, reps=20)
        nbytes = (r + w) * units * BLOCK * 4
        if copy is None:
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            copy_gbs = nbytes / copy / 1e6
        gbs = nbytes / ms / 1e6
        res["rows"].append(dict(read=r, write=w, gbs=gbs, of_copy=gbs / copy_gbs))
        print(f"read {r} : write {w}  {gbs:7.0f} GB/s  {gbs / copy_gbs:5.3f} of torch's copy ({copy_gbs:.0f} GB/s)", flush=True)
        del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
