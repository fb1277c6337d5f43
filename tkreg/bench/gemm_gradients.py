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

import argparse
import json
import time

from .timing import gpu_ms, need_torch, rotations

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
    rows, flops, r = [], 2 * m * n * k, _reps(m, n, k)
    for op, (ours, cublas) in pairs.items():
        t_ours, t_cublas = gpu_ms(ours, sets, reps=r), gpu_ms(cublas, sets, reps=r)
        case = f"M={m} N={n} K={k}"
        rows.append(dict(op=op, case=case, impl="tkreg", ms=t_ours, tflops=flops / t_ours / 1e9,
                         vs_cublas=t_cublas / t_ours))
        rows.append(dict(op=op, case=case, impl="cuBLAS (torch.matmul)", ms=t_cublas, tflops=flops / t_cublas / 1e9))
    del sets
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two shapes only")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args(argv)
    torch = need_torch()
    import tkreg
    rows = []
    for m, n, k in shapes(a.quick):
        got = case_rows(m, n, k)
        for r in got:
            print(f"{r['op']:22s} {r['case']:24s} {r['impl']:22s} {r['ms']:8.3f} ms {r['tflops']:7.1f} TFLOP/s"
                  + (f"  {r['vs_cublas']:.2f}x cuBLAS" if "vs_cublas" in r else ""), flush=True)
        rows += got
    table = dict(title="bf16 Linear-layer gradient GEMMs vs cuBLAS", date=time.strftime("%Y-%m-%d"),
                 gpu=torch.cuda.get_device_name(), torch=torch.__version__, tkreg=tkreg.__version__, rows=rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return table


if __name__ == "__main__":
    main()
