"""Does a mid-size row's time depend on where its buffers sit relative to each other? (24th session:
in the bench's own process the same-size copy at 4096 x 4096 read 32.2 µs and fused_add 36.9 µs;
on fresh buffers in the same process 34.5 and 33.4: r24_ctx.py.)  Carves the operands out of one
big allocation at chosen byte distances and times, queued: fused_add_rms_norm 4096 x 4096 with the
residual d bytes after x, and a 67 MB copy with dst d bytes after src.
Run: python3 r24_off.py OUT.json
"""
import json
import sys

import torch

import tkreg
from tkreg.bench.timing import queued_ms

MB = 2**20
bf = torch.bfloat16


def view(big, off, n, dtype):
    return big[off:off + n * dtype.itemsize].view(dtype)


def main(out):
    big = torch.empty(2048 * MB, dtype=torch.uint8, device="cuda")
    big.view(torch.int16)[:].random_(-100, 100)
    res = []
    m = n = 4096
    nb = m * n * 2                        # 32 MB an operand
    w = torch.randn(n, dtype=bf, device="cuda")
    # x at `base`, residual at base + d; rotation over 3 bases 600 MB apart (past L2)
    for d in (nb, nb + 8192, nb + 2 * MB, nb + 4 * MB, nb + 8 * MB, 48 * MB, 64 * MB, 96 * MB, 128 * MB, 160 * MB,
              nb + 1 * MB, nb + 64 * 1024, nb + 256 * 1024):
        sets = []
        for base in (0, 600 * MB, 1200 * MB):
            x = view(big, base, m * n, bf).view(m, n)
            r = view(big, base + d, m * n, bf).view(m, n)
            x.copy_(torch.randn(m, n, device="cuda"))
            r.copy_(torch.randn(m, n, device="cuda"))
            sets.append((x, r, w))
        t = queued_ms(lambda x, r, w: tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6), sets)
        res.append(dict(kind="fused_add", d=d, us=t * 1e3))
        print("fused_add d=%.4f MB %.1f us" % (d / MB, t * 1e3), flush=True)
    half = 4 * m * n  # 64 MB copied (the bench's 134 MB fused_add row, read + write)
    for d in (half, half + 8192, half + 2 * MB, half + 4 * MB, half + 16 * MB, 96 * MB, 128 * MB, 192 * MB, 256 * MB,
              half + 1 * MB, half + 64 * 1024):
        sets = [(big[b:b + half], big[b + d:b + d + half]) for b in (0, 600 * MB, 1200 * MB)]
        t = queued_ms(lambda s, dd: dd.copy_(s), sets)
        res.append(dict(kind="copy", d=d, us=t * 1e3))
        print("copy d=%.4f MB %.1f us" % (d / MB, t * 1e3), flush=True)
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
