"""GEMMs beside their peers: bf16 vs cuBLAS (`torch.matmul`), FP8 block-scaled vs `torch._scaled_mm`
(rowwise scales; and torch's own 1x128 / 128x128 blockwise path where the installed torch has one),
gemm_swiglu vs the unfused GEMM + silu_and_mul paths.

Compute-bound shapes report TFLOP/s; decode shapes (M <= 64) report GB/s over the weight bytes,
% of the measured copy bandwidth, and a same-size copy beside them.  Every time is `queued_ms`
(calls queued behind a spin kernel), so host launch cost never counts against the faster kernel;
tkreg and its peers take their runs in turn (`queued_ms_paired`), so the clock's drift as the GPU
heats hits all alike.
"""
from __future__ import annotations

from .timing import COPY, Row, compiled, copy_ms, queued_ms, queued_ms_paired, rotations, try_ms, need_torch

PREFILL = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096), (4096, 4096, 14336)]
MID = [(m, n, k) for m in (128, 256, 512, 1024, 2048) for n, k in ((8192, 8192), (7168, 2048), (4096, 14336))]
DECODE = [(m, n, k) for m in (1, 8, 16, 32, 64) for n, k in ((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))]
QUICK = [(8192, 8192, 8192), (256, 8192, 8192), (1, 8192, 8192), (64, 4096, 14336)]


def _reps(m, n, k):
    return 10 if m * n * k > 2**37 else 20 if m * n * k > 2**33 else 50


def _rows(op, case, m, n, k, weight_bytes, ceiling, ours, peers) -> list:
    """tkreg's row and one per peer: TFLOP/s, or for decode GB/s over the weights (% of copy).
    Decode rows also time a device copy moving the weight bytes (half read, half written): at
    small weights launch, fill and drain bound any kernel, and the copy shows by how much."""
    torch = need_torch()
    peers = {p: t for p, t in peers.items() if t}
    decode = m <= 64
    if decode:
        peers[COPY] = copy_ms(weight_bytes, queued_ms)
        torch.cuda.empty_cache()
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
        peers = {"_scaled_mm rowwise": lambda qa, sa, qb, sb, ra, rb, _: torch._scaled_mm(
                     qa, qb.t(), ra, rb, out_dtype=torch.bfloat16),
                 "_scaled_mm blockwise": lambda qa, sa, qb, sb, ra, rb, sa_col: torch._scaled_mm(
                     qa, qb.t(), sa_col, sb.t(), out_dtype=torch.bfloat16)}
        # a peer this torch cannot run (cuBLASLt refuses blockwise at M = 1) is left out
        peers = {p: f for p, f in peers.items() if try_ms(f, sets[:1], reps=1, warmup=0) is not None}
        ours, *theirs = queued_ms_paired([lambda qa, sa, qb, sb, *_: tkreg.ops.fp8_gemm(qa, sa, qb, sb)]
                                         + list(peers.values()), sets, reps=r, runs=5)
        rows += _rows("fp8_gemm", f"M={m} N={n} K={k}", m, n, k, n * k, ceiling, ours, dict(zip(peers, theirs)))
        del sets
        progress()
    return rows


# (M, I, K): an 8B MLP's gate_up projection (Llama-3 / Qwen3 hidden 4096) at decode and prefill
SWIGLU = [(m, 12288, 4096) for m in (1, 32, 4096, 8192)]
SWIGLU_QUICK = [(1, 12288, 4096), (4096, 12288, 4096)]


def swiglu_cases(shapes, ceiling, progress):
    """gemm_swiglu (one kernel, I columns written) beside the unfused paths it replaces: cuBLAS
    then torch.compile's fused silu_and_mul (what Inductor makes of an MLP: it cannot fuse into
    cuBLAS), and tkreg.gemm then tkreg.silu_and_mul.  TFLOP/s over the 2 * M * 2I * K of the GEMM;
    decode shapes GB/s over the packed weight's bytes."""
    torch = need_torch()
    import tkreg
    from tkreg import reference
    comp_silu = compiled(reference.silu_and_mul)
    rows = []
    for m, i, k in shapes:
        def make():
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            g, u = (torch.randn(i, k, dtype=torch.bfloat16, device="cuda") * k ** -0.5 for _ in range(2))
            return a, tkreg.ops.pack_gate_up(g, u), torch.cat([g, u])
        sets = rotations(make, 2 * (m * k + 4 * i * k + 3 * m * i))
        peers = {"cuBLAS + torch.compile silu_and_mul": lambda a, w, wc: comp_silu(torch.matmul(a, wc.t())),
                 "tkreg gemm + silu_and_mul": lambda a, w, wc: tkreg.ops.silu_and_mul(tkreg.ops.gemm(a, wc))}
        if comp_silu is None or try_ms(peers["cuBLAS + torch.compile silu_and_mul"], sets[:1], reps=1, warmup=1) is None:
            peers.pop("cuBLAS + torch.compile silu_and_mul")
        ours, *theirs = queued_ms_paired([lambda a, w, wc: tkreg.ops.gemm_swiglu(a, w)] + list(peers.values()),
                                         sets, reps=_reps(m, 2 * i, k), runs=5)
        rows += _rows("gemm_swiglu", f"M={m} I={i} K={k}", m, 2 * i, k, 4 * i * k, ceiling, ours, dict(zip(peers, theirs)))
        del sets
        progress()
    return rows


def cases(quick, ceiling, progress):
    shapes = QUICK if quick else PREFILL + MID + DECODE
    return (bf16_cases(shapes, ceiling, progress) + fp8_cases(shapes, ceiling, progress)
            + swiglu_cases(SWIGLU_QUICK if quick else SWIGLU, ceiling, progress))
