"""MoE grouped GEMM gradients beside their peers: `python -m tkreg.bench.grouped_gemm_gradients [--quick] [--json OUT]`.

The forward is y rows of expert e = x rows @ w[e]^T (tkreg.grouped_gemm, contiguous layout).  Rows:
- wgrad (k-grouped) dw[e] = dy[seg_e]^T @ x[seg_e]: tkreg.grouped_gemm_wgrad vs a per-expert
  `torch.matmul(dy[seg].t(), x[seg])` loop and vs torch._grouped_mm's backward (autograd through
  `torch._grouped_mm(x, w.transpose(-2, -1), offs=ends)`, the gradient of w only: the k-grouped
  GEMM torch runs for it);
- wgrad into an fp32 main grad: tkreg.grouped_gemm_wgrad(main_grad=) vs the loop's matmul + add_;
- dgrad dx[seg_e] = dy[seg_e] @ w[e]: tkreg.grouped_gemm_dgrad vs a per-expert `torch.matmul` loop
  and vs torch._grouped_mm's backward for x only.
A peer that fails (torch without `_grouped_mm`, or whose `_grouped_mm` is not differentiable) is
left out with a note.  Shapes: DeepSeek-V3 experts (hidden 7168, expert intermediate 2048): the
gate+up GEMM N x K = 4096 x 7168 and the down GEMM 7168 x 2048; 8 and 32 experts x 4096 tokens,
uniform and Zipf(1) segments of the same total.  Segments are padded to 128 rows (the forward's
layout) and every implementation gets that same layout; TFLOP/s = 2 M N K / time over the padded
rows M.  Times: tkreg.bench.timing.queued_ms_paired (implementations taken in turn).
"""
from __future__ import annotations

from .grouped_gemm import padded_offsets, zipf_sizes
from .timing import need_torch, paired_ms, queued_ms, ratio_rows, standalone

SHAPES = ((4096, 7168), (7168, 2048))     # (N, K) of DeepSeek-V3's expert gate_up and down GEMMs
TOKENS = 4096                               # per expert, on average
EXPERTS = (8, 32)


def dists(quick: bool) -> list:
    out = []
    for e in EXPERTS[:1] if quick else EXPERTS:
        out.append((f"{e}x{TOKENS} uniform", [TOKENS] * e))
        if not quick:
            out.append((f"{e}x{TOKENS} zipf", zipf_sizes(TOKENS * e, e)))
    return out


def cases(quick: bool) -> list:
    """(N, K, label, sizes) of every row group (quick: the gate_up shape only)."""
    return [(n, k, label, sizes) for n, k in (SHAPES[:1] if quick else SHAPES) for label, sizes in dists(quick)]


def _grouped_mm_grad(torch, x, w, ends, wrt: str):
    """A closure timing torch._grouped_mm's backward for `wrt` ("w": wgrad, "x": dgrad) only; its
    forward runs once here, its graph kept."""
    xv = x.detach().requires_grad_(wrt == "x")
    wv = w.detach().requires_grad_(wrt == "w")
    y = torch._grouped_mm(xv, wv.transpose(-2, -1), offs=ends)
    target = xv if wrt == "x" else wv

    def run(dy):
        torch.autograd.grad(y, target, dy, retain_graph=True)
    return run


def case_rows(n: int, k: int, label: str, sizes: list, reps: int = 5) -> list:
    """[{op, case, impl, ms, tflops, vs_<peer>}] of wgrad, wgrad into main_grad and dgrad at one case."""
    torch = need_torch()
    import tkreg
    ops = tkreg.ops
    bf = torch.bfloat16
    offs = padded_offsets(sizes)
    m, e = offs[-1], len(sizes)
    segs = [(i, offs[i], offs[i + 1]) for i in range(e) if offs[i + 1] > offs[i]]
    g = torch.tensor(offs, dtype=torch.int32, device="cuda")
    ends = g[1:].contiguous()
    dy = torch.randn(m, n, dtype=bf, device="cuda")
    x = torch.randn(m, k, dtype=bf, device="cuda")
    w = torch.randn(e, n, k, dtype=bf, device="cuda").mul_(0.05)
    main = torch.zeros(e, n, k, device="cuda")
    sets = [()]     # each case moves GBs: far past L2 without rotation
    flops = 2.0 * m * n * k
    case = f"{label} N={n} K={k} (M={m})"

    def wgrad_loop():
        for i, lo, hi in segs:
            torch.matmul(dy[lo:hi].t(), x[lo:hi])

    def wgrad_main_loop():
        for i, lo, hi in segs:
            main[i].add_(torch.matmul(dy[lo:hi].t(), x[lo:hi]))

    def dgrad_loop():
        for i, lo, hi in segs:
            torch.matmul(dy[lo:hi], w[i])

    groups = {
        "grouped_gemm_wgrad": (lambda: ops.grouped_gemm_wgrad(dy, x, g), {"matmul loop": wgrad_loop}, "w"),
        "grouped_gemm_wgrad main_grad": (lambda: ops.grouped_gemm_wgrad(dy, x, g, main_grad=main),
                                         {"matmul loop + add_": wgrad_main_loop}, None),
        "grouped_gemm_dgrad": (lambda: ops.grouped_gemm_dgrad(dy, w, g), {"matmul loop": dgrad_loop}, "x"),
    }
    rows = []
    for op, (ours, peers, wrt) in groups.items():
        times = paired_ms({"tkreg": ours, **peers}, sets, reps=reps)
        if wrt is not None:
            peer = "torch._grouped_mm backward"
            try:
                run = _grouped_mm_grad(torch, x, w, ends, wrt)
                times[peer] = queued_ms(lambda: run(dy), sets, reps=reps)
                del run
            except Exception as exc:   # noqa: BLE001  (a peer torch lacks is reported, not fatal)
                print(f"  note: {peer} skipped for {op} ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
        rows += ratio_rows(op, case, times, flops)
    del dy, x, w, main
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    return standalone("tkreg.bench.grouped_gemm_gradients", __doc__, argv, "8 experts, uniform, the gate_up shape only",
                      "bf16 MoE grouped GEMM gradients (DeepSeek-V3 experts) vs per-expert cuBLAS and "
                      "torch._grouped_mm's backward", cases, case_rows, op=30, case=42, impl=28)


if __name__ == "__main__":
    main()
