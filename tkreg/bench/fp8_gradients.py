"""FP8 Linear-layer gradients (DeepSeek-V3's recipe) beside torch: `python -m tkreg.bench.fp8_gradients [--quick] [--json OUT]`.

wgrad dw[N, K] = dy^T @ x on the transposed per-channel casts (tkreg.fp8_gemm_wgrad, fp32 out, and
into an fp32 main grad); dgrad dx[M, K] = dy @ w on dy's 1x128 cast and the weight's transposed
128x128 blocks (tkreg.fp8_gemm).  Peers in the same process: `torch._scaled_mm` with the same
scaling where this torch offers it (blockwise 1x128 x 1x128 for wgrad, 1x128 x 128x128 for dgrad;
a layout it refuses is printed as skipped and left out), `_scaled_mm` rowwise (one scale a row /
column: not the recipe's math, torch's fastest FP8 path), and bf16 cuBLAS (`torch.matmul` with
the same transposes).  The casts are timed on their own rows (impl "cast"), not in the GEMMs.
Shapes: M = 4096-16384 tokens; (N, K) of a Llama-8B layer: qkv 6144 x 4096, o 4096 x 4096, up
14336 x 4096, down 4096 x 14336.  TFLOP/s = 2 M N K / time; times are queued_ms_paired (calls
queued behind a spin kernel, impls taken in turn), inputs rotated past the L2.
"""
from __future__ import annotations

from .timing import gpu_ms, need_torch, paired_ms, ratio_rows, rotations, standalone, try_ms

LAYERS = [(6144, 4096), (4096, 4096), (14336, 4096), (4096, 14336)]   # (N out, K in)
TOKENS = (4096, 8192, 16384)
QUICK = [(8192, 4096, 4096), (8192, 4096, 14336)]


def shapes(quick: bool) -> list:
    return QUICK if quick else [(m, n, k) for m in TOKENS for n, k in LAYERS]


def _colmajor(s):
    return s.t().contiguous().t()


def _peers_that_run(peers: dict, sets) -> dict:
    """The peers this torch runs at this shape (a refused layout is printed by try_ms)."""
    return {p: f for p, f in peers.items() if try_ms(f, sets[:1], reps=1, warmup=0) is not None}


def wgrad_rows(m, n, k) -> list:
    torch = need_torch()
    import tkreg
    ops, bf, f32 = tkreg.ops, torch.bfloat16, torch.float32

    def make():
        dy, x = torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(m, k, dtype=bf, device="cuda")
        dq, ds = ops.per_channel_quant_fp8(dy, transpose=True)
        xq, xs = ops.per_channel_quant_fp8(x, transpose=True)
        return dy, x, dq, ds, xq, xs, torch.rand(n, 1, device="cuda"), torch.rand(1, k, device="cuda")
    sets = rotations(make, 2 * (m * n + m * k) + 4 * n * k)
    main = torch.zeros(n, k, device="cuda")
    sm = torch._scaled_mm
    peers = {
        "_scaled_mm blockwise 1x128 x 1x128 (fp32 out)":
            lambda dy, x, dq, ds, xq, xs, ra, rb: sm(dq, xq.t(), ds.t(), xs, out_dtype=f32),
        "_scaled_mm blockwise 1x128 x 1x128 (bf16 out)":
            lambda dy, x, dq, ds, xq, xs, ra, rb: sm(dq, xq.t(), ds.t(), xs, out_dtype=bf),
        "_scaled_mm blockwise 1x128 x 1x128, scale_b column-major (bf16 out)":
            lambda dy, x, dq, ds, xq, xs, ra, rb: sm(dq, xq.t(), ds.t(), _colmajor(xs), out_dtype=bf),
        "_scaled_mm rowwise (bf16 out)": lambda dy, x, dq, ds, xq, xs, ra, rb: sm(dq, xq.t(), ra, rb, out_dtype=bf),
        "cuBLAS bf16 (torch.matmul(dy.t(), x))": lambda dy, x, *_: torch.matmul(dy.t(), x),
    }
    peers = _peers_that_run(peers, sets)
    fns = {"tkreg fp8_gemm_wgrad": lambda dy, x, dq, ds, xq, xs, *_: ops.fp8_gemm_wgrad(dq, ds, xq, xs),
           "tkreg fp8_gemm_wgrad main_grad":
               lambda dy, x, dq, ds, xq, xs, *_: ops.fp8_gemm_wgrad(dq, ds, xq, xs, main_grad=main), **peers}
    case = f"M={m} N={n} K={k}"
    rows = ratio_rows("fp8 wgrad", case, paired_ms(fns, sets, reps=10, runs=5), 2 * m * n * k)
    cast = gpu_ms(lambda dy, x, *_: (ops.per_channel_quant_fp8(dy, transpose=True),
                                     ops.per_channel_quant_fp8(x, transpose=True)), sets, reps=10)
    rows += ratio_rows("fp8 wgrad", case, {"cast: per_channel_quant_fp8(transpose) of dy and x": cast})
    del sets
    torch.cuda.empty_cache()
    return rows


def dgrad_rows(m, n, k) -> list:
    torch = need_torch()
    import tkreg
    ops, bf = tkreg.ops, torch.bfloat16

    def make():
        dy, w = torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(n, k, dtype=bf, device="cuda")
        dq, ds = ops.per_token_group_quant_fp8(dy)
        wt, wst = ops.fp8_transpose_blocks(*ops.per_block_quant_fp8(w))
        return dy, w, dq, ds, _colmajor(ds), wt, wst, torch.rand(m, 1, device="cuda"), torch.rand(1, k, device="cuda")
    sets = rotations(make, 2 * (m * n + n * k + m * k))
    sm = torch._scaled_mm
    peers = {
        "_scaled_mm blockwise 1x128 x 128x128 (bf16 out)":
            lambda dy, w, dq, ds, dsc, wt, wst, ra, rb: sm(dq, wt.t(), dsc, wst.t(), out_dtype=bf),
        "_scaled_mm rowwise (bf16 out)": lambda dy, w, dq, ds, dsc, wt, wst, ra, rb: sm(dq, wt.t(), ra, rb, out_dtype=bf),
        "cuBLAS bf16 (torch.matmul(dy, w))": lambda dy, w, *_: torch.matmul(dy, w),
    }
    peers = _peers_that_run(peers, sets)
    fns = {"tkreg fp8_gemm (transposed blocks)": lambda dy, w, dq, ds, dsc, wt, wst, *_: ops.fp8_gemm(dq, ds, wt, wst),
           **peers}
    case = f"M={m} N={n} K={k}"
    rows = ratio_rows("fp8 dgrad", case, paired_ms(fns, sets, reps=10, runs=5), 2 * m * n * k)
    casts = {"cast: per_token_group_quant_fp8(dy)": lambda dy, *_: ops.per_token_group_quant_fp8(dy),
             "cast: per_block_quant_fp8(w)": lambda dy, w, *_: ops.per_block_quant_fp8(w),
             "fp8_transpose_blocks(w_q, w_s)":
                 lambda dy, w, dq, ds, dsc, wt, wst, *_: ops.fp8_transpose_blocks(wt, wst)}
    rows += ratio_rows("fp8 dgrad", case, {impl: gpu_ms(f, sets, reps=10) for impl, f in casts.items()})
    del sets
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    return standalone("tkreg.bench.fp8_gradients", __doc__, argv, "two shapes only",
                      "FP8 Linear-layer gradients (DeepSeek-V3 recipe) vs torch._scaled_mm and bf16 cuBLAS",
                      lambda quick: [(rows, m, n, k) for m, n, k in shapes(quick) for rows in (wgrad_rows, dgrad_rows)],
                      lambda rows, m, n, k: rows(m, n, k), op=10, case=24, impl=60)


if __name__ == "__main__":
    main()
