"""Norm family beside torch eager and torch.compile (GB/s against the copy ceiling)."""
from __future__ import annotations

from .timing import Row, bandwidth_rows, compiled, gpu_ms, host_us, mid_shapes, need_torch, rotations, same_size_rows


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg import reference
    F = torch.nn.functional
    rows = []
    # 3584 (Qwen2-7B) and 16384 (Llama-3-405B) run the any-N kernels; the rest have static-N ones;
    # head-dim rows by the million: qk-norm (Qwen3, Gemma 3 normalize q and k per head)
    shapes = [(16384, 7168), (16384, 4096)] + ([] if quick else [(8192, 8192), (4096, 5120), (16384, 3584), (8192, 16384),
                                                                 (1 << 20, 64), (1 << 20, 128), (1 << 22, 128)])

    def label(m, n):
        x = torch.empty(1, n, dtype=torch.bfloat16, device="cuda")
        any_n = tkreg.explain("rms_norm", x, x[0]).chosen.startswith("N=0,")
        return f"{m}x{n} bf16" + (" (any-N kernel)" if any_n else "")

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.bfloat16, device="cuda")

    def big(op, cases_, nbytes_of, make, fn, eager, comp):
        """rows of `op` at each (m, n) beside eager and `comp` (torch.compile of the reference, eps last)"""
        out = []
        for m, n in cases_:
            nbytes = nbytes_of(m, n)
            sets = rotations(lambda: make(m, n), nbytes)
            ours = gpu_ms(fn, sets)
            peers = {"eager": gpu_ms(eager(n), sets)}
            if comp is not None:
                peers["torch.compile"] = gpu_ms(lambda *a: comp(*a, 1e-6), sets)
            out += bandwidth_rows(op, label(m, n), nbytes, ceiling, ours, peers)
            progress()
        return out

    comp, comp_add = compiled(reference.rms_norm), compiled(reference.fused_add_rms_norm)
    rows += big("rms_norm", shapes, lambda m, n: 2 * m * n * 2 + n * 2, lambda m, n: (rnd(m, n), rnd(n)),
                lambda x, w: tkreg.ops.rms_norm(x, w, 1e-6), lambda n: lambda x, w: F.rms_norm(x, (n,), w, 1e-6),
                comp)
    # in place: x and residual read and written, weight read
    rows += big("fused_add_rms_norm", shapes[:2] + ([] if quick else [(16384, 3584)]), lambda m, n: 4 * m * n * 2 + n * 2,
                lambda m, n: (rnd(m, n), rnd(m, n), rnd(n)), lambda x, r, w: tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6),
                lambda n: lambda x, r, w: reference.fused_add_rms_norm(x, r, w, 1e-6), comp_add)
    # dy, x read, dx written; weight read, dw written
    rows += big("rms_norm_backward", [(16384, 4096)] + ([] if quick else [(16384, 7168)]), lambda m, n: 3 * m * n * 2 + 2 * n * 2,
                lambda m, n: (rnd(m, n), rnd(m, n), rnd(n)), lambda dy, x, w: tkreg.ops.rms_norm_backward(dy, x, w, 1e-6),
                lambda n: lambda dy, x, w: reference.rms_norm_backward(dy, x, w, 1e-6), compiled(reference.rms_norm_backward))
    # mid sizes (prefill chunks): queued GPU time beside a device copy of the same bytes
    bf16 = torch.bfloat16
    for m, n in mid_shapes(quick):
        nbytes = 2 * m * n * 2 + n * 2
        sets = rotations(lambda: (torch.randn(m, n, dtype=bf16, device="cuda"), torch.randn(n, dtype=bf16, device="cuda")), nbytes)
        rows += same_size_rows("rms_norm", f"{m}x{n} bf16", nbytes, ceiling, lambda x, w: tkreg.ops.rms_norm(x, w, 1e-6),
                               sets, {"torch.compile": comp and (lambda x, w: comp(x, w, 1e-6))})
        nbytes = 4 * m * n * 2 + n * 2
        sets = rotations(lambda: (torch.randn(m, n, dtype=bf16, device="cuda"), torch.randn(m, n, dtype=bf16, device="cuda"),
                                  torch.randn(n, dtype=bf16, device="cuda")), nbytes)
        rows += same_size_rows("fused_add_rms_norm", f"{m}x{n} bf16", nbytes, ceiling,
                               lambda x, r, w: tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6), sets,
                               {"torch.compile": comp_add and (lambda x, r, w: comp_add(x, r, w, 1e-6))})
        progress()
    for m in ([1, 64] if quick else [1, 16, 64]):
        n = 4096
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, dtype=torch.bfloat16, device="cuda")
        ours = host_us(lambda: tkreg.ops.rms_norm(x, w), 5000) / 1e3
        eager = host_us(lambda: F.rms_norm(x, (n,), w, 1e-6), 5000) / 1e3
        rows.append(Row("rms_norm", f"{m}x{n} bf16 (per call, loop)", "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("rms_norm", f"{m}x{n} bf16 (per call, loop)", "eager", eager))
        r = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        ours = host_us(lambda: tkreg.ops.fused_add_rms_norm(x, r, w), 5000) / 1e3
        eager = host_us(lambda: reference.fused_add_rms_norm(x, r, w, 1e-6), 5000) / 1e3
        rows.append(Row("fused_add_rms_norm", f"{m}x{n} bf16 (per call, loop)", "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("fused_add_rms_norm", f"{m}x{n} bf16 (per call, loop)", "eager", eager))
        progress()
    return rows + qk_norm_rows(quick, ceiling, progress)


def qk_norm_rows(quick, ceiling, progress):
    """qk-norm on the q slice of a fused qkv output (strided [T, H, D]: rms_norm_heads, no copy)
    beside torch.compile of the reference on the same view, the contiguous copy + rms_norm it
    replaces, and a same-size copy (queued GPU time)."""
    torch = need_torch()
    import tkreg
    from tkreg import reference
    comp = compiled(reference.rms_norm)
    bf16 = torch.bfloat16
    rows = []
    shapes = [(4096, 32, 8, 128), (16384, 32, 8, 128)]
    if not quick:
        shapes += [(16384, 64, 8, 64), (4096, 16, 2, 256)]
    for t, hq, hk, d in shapes:
        def make():
            qkv = torch.randn(t, (hq + 2 * hk) * d, dtype=bf16, device="cuda")
            return qkv.view(t, hq + 2 * hk, d)[:, :hq], torch.randn(d, dtype=bf16, device="cuda")
        nbytes = 2 * 2 * t * hq * d + 2 * d               # q read, out written, the weight
        sets = rotations(make, nbytes)
        rows += same_size_rows("rms_norm_heads", f"q of a fused qkv: T={t} HQ={hq} HK={hk} D={d} bf16", nbytes, ceiling,
                               lambda x, w: tkreg.ops.rms_norm(x, w, 1e-6), sets,
                               {"torch.compile": comp and (lambda x, w: comp(x, w, 1e-6)),
                                "copy + rms_norm": lambda x, w: tkreg.ops.rms_norm(x.reshape(-1, d), w, 1e-6)})
        progress()
    return rows
