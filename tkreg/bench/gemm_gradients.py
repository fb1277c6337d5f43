"""A Linear layer's gradient GEMMs beside cuBLAS: `python -m tkreg.bench.gemm_gradients [--quick] [--json OUT]`.

dgrad dx[M, K] = dy[M, N] @ w[N, K] (tkreg.gemm_dgrad vs `torch.matmul(dy, w)`), wgrad
dw[N, K] = dy^T @ x (tkreg.gemm_wgrad vs `torch.matmul(dy.t(), x)`), and wgrad added into an fp32
main grad (tkreg.gemm_wgrad(main_grad=) vs cuBLAS's bf16 wgrad then `main_grad.add_`: torch has no
bf16 x bf16 -> fp32 accumulate-in-place GEMM).  Shapes: issue #52's Llama-8B
training GEMMs, M = 4096-16384 tokens, (N, K) the layer's out / in features (qkv-like 4096 x 4096,
MLP up 14336 x 4096, gate_up 28672 x 4096, down 4096 x 14336).  TFLOP/s = 2 M N K / time; time is
tkreg.bench.timing.gpu_ms (CUDA-event median), inputs rotated through more than the L2.
"""
from __future__ import annotations

from .timing import gpu_ms, need_torch, ratio_rows, rotations, standalone

LAYERS = [(4096, 4096), (14336, 4096), (28672, 4096), (4096, 14336)]   # (N out, K in) of a Llama-8B Linear
TOKENS = (4096, 8192, 16384)
QUICK = [(8192, 4096, 4096), (8192, 4096, 14336)]


def shapes(quick: bool) -> list:
    return QUICK if quick else [(m, n, k) for m in TOKENS for n, k in LAYERS]


def _reps(m, n, k):
    return 10 if m * n * k > 2**39 else 20


def case_rows(m, n, k) -> list:
    """[{op, case, impl, ms, tflops, vs_cublas}] for dgrad, wgrad and wgrad into main_grad at one shape."""
    torch = need_torch()
    import tkreg
    bf = torch.bfloat16

    def make():
        return (torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(n, k, dtype=bf, device="cuda"),
                torch.randn(m, k, dtype=bf, device="cuda"))
    sets = rotations(make, 2 * (m * n + n * k + m * k))
    main = torch.zeros(n, k, device="cuda")
    pairs = {
        "gemm_dgrad": (lambda dy, w, x: tkreg.ops.gemm_dgrad(dy, w), lambda dy, w, x: torch.matmul(dy, w)),
        "gemm_wgrad": (lambda dy, w, x: tkreg.ops.gemm_wgrad(dy, x), lambda dy, w, x: torch.matmul(dy.t(), x)),
        "gemm_wgrad main_grad": (lambda dy, w, x: tkreg.ops.gemm_wgrad(dy, x, main_grad=main),
                                 lambda dy, w, x: main.add_(torch.matmul(dy.t(), x))),
    }
    rows, r = [], _reps(m, n, k)
    for op, (ours, cublas) in pairs.items():
        times = {"tkreg": gpu_ms(ours, sets, reps=r), "cuBLAS (torch.matmul)": gpu_ms(cublas, sets, reps=r)}
        rows += ratio_rows(op, f"M={m} N={n} K={k}", times, 2 * m * n * k, vs=lambda peer: "vs_cublas")
    del sets
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    return standalone("tkreg.bench.gemm_gradients", __doc__, argv, "two shapes only",
                      "bf16 Linear-layer gradient GEMMs vs cuBLAS", shapes, case_rows,
                      op=22, case=24, impl=22, ratio_label=lambda key: "cuBLAS")


if __name__ == "__main__":
    main()
