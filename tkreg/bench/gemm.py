"""GEMM beside cuBLAS (torch.matmul), TFLOP/s."""
from __future__ import annotations

from .timing import Row, gpu_ms, need_torch, rotations


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    rows = []
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096), (64, 8192, 8192), (1, 8192, 8192)]
    if not quick:
        shapes += [(16, 8192, 8192), (256, 8192, 8192), (2048, 7168, 2048)]
    for m, n, k in shapes:
        flops = 2 * m * n * k
        nbytes = 2 * (m * k + n * k + m * n)
        sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                                  torch.randn(n, k, dtype=torch.bfloat16, device="cuda")), nbytes)
        ours = gpu_ms(tkreg.ops.gemm, sets, reps=30)
        cublas = gpu_ms(lambda a, b: torch.matmul(a, b.t()), sets, reps=30)
        case = f"M={m} N={n} K={k}"
        rows.append(Row("gemm", case, "tkreg", ours, flops / ours / 1e9, "TFLOP/s", vs={"cuBLAS": cublas / ours}))
        rows.append(Row("gemm", case, "cuBLAS", cublas, flops / cublas / 1e9, "TFLOP/s"))
        progress()
    return rows
