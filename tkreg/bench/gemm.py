"""GEMMs beside their peers: bf16 vs cuBLAS (`torch.matmul`), FP8 block-scaled vs `torch._scaled_mm`
(rowwise scales; and torch's own 1x128 / 128x128 blockwise path where the installed torch has one).

Compute-bound shapes report TFLOP/s; decode shapes (M <= 64) report GB/s over the weight bytes
and % of the measured copy bandwidth.  Every time is `queued_ms` (calls queued behind a spin
kernel), so host launch cost never counts against the faster kernel; bf16 and cuBLAS take their
runs in turn (`queued_ms_paired`), so the clock's drift as the GPU heats hits both alike.
"""
from __future__ import annotations

from .timing import Row, queued_ms, queued_ms_paired, rotations, try_ms, need_torch

PREFILL = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096), (4096, 4096, 14336)]
MID = [(m, n, k) for m in (128, 256, 512, 1024, 2048) for n, k in ((8192, 8192), (7168, 2048), (4096, 14336))]
DECODE = [(m, n, k) for m in (1, 8, 16, 32, 64) for n, k in ((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))]
QUICK = [(8192, 8192, 8192), (256, 8192, 8192), (1, 8192, 8192), (64, 4096, 14336)]


def _reps(m, n, k):
    return 10 if m * n * k > 2**37 else 20 if m * n * k > 2**33 else 50


def _rows(op, case, m, n, k, weight_bytes, ceiling, ours, peers) -> list:
    """tkreg's row and one per peer: TFLOP/s, or for decode GB/s over the weights (% of copy)."""
    peers = {p: t for p, t in peers.items() if t}
    decode = m <= 64
    def row(impl, ms, vs=None):
        metric = weight_bytes / ms / 1e6 if decode else 2 * m * n * k / ms / 1e9
        pct = 100 * metric / ceiling if decode else 0.0
        return Row(op, case, impl, ms, metric, "GB/s" if decode else "TFLOP/s", pct, vs or {})
    return [row("tkreg", ours, {p: t / ours for p, t in peers.items()})] + [row(p, t) for p, t in peers.items()]


def bf16_cases(shapes, ceiling, progress):
    torch = need_torch()
    import tkreg
    rows = []
    for m, n, k in shapes:
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                                  torch.randn(n, k, dtype=torch.bfloat16, device="cuda")), 2 * (m * k + n * k + m * n))
        r = _reps(m, n, k)
        ours, cublas = queued_ms_paired([tkreg.ops.gemm, lambda a, b: torch.matmul(a, b.t())], sets, reps=r, runs=5)
        rows += _rows("gemm", f"M={m} N={n} K={k}", m, n, k, 2 * n * k, ceiling, ours, {"cuBLAS": cublas})
        del sets
        progress()
    return rows


def fp8_cases(shapes, ceiling, progress):
    torch = need_torch()
    import tkreg
    rows = []
    for m, n, k in shapes:
        def make():
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
            qa, sa = tkreg.ops.per_token_group_quant_fp8(x)
            qb, sb = tkreg.ops.per_block_quant_fp8(w)
            ra = torch.rand(m, 1, device="cuda") + 0.5
            rb = torch.rand(1, n, device="cuda") + 0.5
            return qa, sa, qb, sb, ra, rb, sa.t().contiguous().t()   # the last: torch's blockwise layout
        sets = rotations(make, m * k + n * k + 2 * m * n)
        r = _reps(m, n, k)
        ours = queued_ms(lambda qa, sa, qb, sb, *_: tkreg.ops.fp8_gemm(qa, sa, qb, sb), sets, reps=r)
        rowwise = try_ms(lambda qa, sa, qb, sb, ra, rb, _: torch._scaled_mm(qa, qb.t(), ra, rb, out_dtype=torch.bfloat16),
                         sets, reps=r, timer=queued_ms)
        blockwise = try_ms(lambda qa, sa, qb, sb, ra, rb, sa_col: torch._scaled_mm(
            qa, qb.t(), sa_col, sb.t(), out_dtype=torch.bfloat16), sets, reps=r, timer=queued_ms)
        rows += _rows("fp8_gemm", f"M={m} N={n} K={k}", m, n, k, n * k, ceiling, ours,
                      {"_scaled_mm rowwise": rowwise, "_scaled_mm blockwise": blockwise})
        del sets
        progress()
    return rows


def cases(quick, ceiling, progress):
    shapes = QUICK if quick else PREFILL + MID + DECODE
    return bf16_cases(shapes, ceiling, progress) + fp8_cases(shapes, ceiling, progress)
