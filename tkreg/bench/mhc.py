"""mHC family beside eager and torch.compile of tkreg's reference (TileKernels' semantics) and a
same-size copy (GB/s against the copy ceiling); mhc_pre_norm_fn (and its backward) in TFLOP/s.

Bytes an op must move (m = 4, bf16 rows, fp32 mixes): expand reads T*H and writes T*m*H;
apply_mix reads T*m*H and pre, writes T*H; post reads x, residual, post, comb and writes T*m*H;
sinkhorn reads and writes T*m*m fp32; big_fuse reads the residual once and writes layer_input,
post and comb (its second read of the residual, after the split-K GEMM, is not counted: the bar is
the bytes, not the kernel's choice); the backward ops read grad_out and the forward's inputs and
write each gradient.  mhc_pre_norm_fn: 2 * T * m(m+2) * m*H flops (fp32 FMA), its backward twice
that.  mhc_pre_big_fuse at T = 1 and 64 (decode) is timed queued (kernels of a few µs: events on
an idle stream would time the host), beside the eager and compiled reference chain.
"""
from __future__ import annotations

from .timing import Row, bandwidth_rows, compiled, gpu_ms, need_torch, queued_ms, rotations, same_size_rows, try_ms

M, N = 4, 24
EPS = 1e-6


def _peers(ref_fn, comp_fn, sets, timer=gpu_ms):
    peers = {"eager": try_ms(ref_fn, sets, timer=timer)}
    if comp_fn is not None:
        peers["torch.compile"] = try_ms(comp_fn, sets, timer=timer)
    return peers


def _flops_rows(op, case, flops, ours, peers) -> list:
    peers = {k: v for k, v in peers.items() if v}
    out = [Row(op, case, "tkreg", ours, flops / ours / 1e9, "TFLOP/s", 0.0, {k: v / ours for k, v in peers.items()})]
    return out + [Row(op, case, k, v, flops / v / 1e9, "TFLOP/s") for k, v in peers.items()]


def cases(quick, ceiling, progress):
    torch = need_torch()
    from tkreg.ops import mhc as ops
    from tkreg.reference import mhc as ref
    bf16, rows = torch.bfloat16, []
    r = lambda *s: torch.randn(*s, device="cuda").to(bf16)  # noqa: E731
    u = lambda *s: torch.rand(*s, device="cuda")  # noqa: E731

    def pre_set(t, h):
        fn = torch.randn(N, M * h, device="cuda") * 1e-4
        return r(t, M, h), fn, torch.randn(3, device="cuda") * 0.1, torch.randn(N, device="cuda") * 0.1

    big = [(16384, 7168), (16384, 4096)] + ([] if quick else [(4097, 7168)])
    row_ops = (
        ("expand_to_mhc", lambda t, h: (r(t, h),), lambda t, h: 2 * (t * h + t * M * h),
         lambda x: ops.expand_to_mhc(x, M), lambda x: ref.expand_to_mhc(x, M)),
        ("mhc_pre_apply_mix", lambda t, h: (r(t, M, h), u(t, M, 1)), lambda t, h: 2 * (t * M * h + t * h) + 4 * t * M,
         ops.mhc_pre_apply_mix, ref.mhc_pre_apply_mix),
        ("mhc_post", lambda t, h: (r(t, h), r(t, M, h), u(t, M, 1), u(t, M, M)),
         lambda t, h: 2 * (t * h + 2 * t * M * h) + 4 * (t * M + t * M * M), ops.mhc_post, ref.mhc_post),
        ("mhc_pre_apply_mix_backward", lambda t, h: (r(t, h), r(t, M, h), u(t, M, 1)),
         lambda t, h: 2 * (t * h + 2 * t * M * h) + 8 * t * M, ops.mhc_pre_apply_mix_backward,
         ref.mhc_pre_apply_mix_backward),
        ("mhc_post_backward", lambda t, h: (r(t, M, h), r(t, h), r(t, M, h), u(t, M, 1), u(t, M, M)),
         lambda t, h: 2 * (3 * t * M * h + 2 * t * h) + 8 * (t * M + t * M * M), ops.mhc_post_backward,
         ref.mhc_post_backward),
    )
    for name, make, nbytes_of, ours_fn, ref_fn in row_ops:
        comp = compiled(ref_fn)
        for t, h in big:
            nbytes = nbytes_of(t, h)
            sets = rotations(lambda: make(t, h), nbytes)
            rows += bandwidth_rows(name, f"T={t} m={M} H={h} bf16", nbytes, ceiling, gpu_ms(ours_fn, sets),
                                   _peers(ref_fn, comp, sets))
        t, h = 4096, 7168
        nbytes = nbytes_of(t, h)
        rows += same_size_rows(name, f"T={t} m={M} H={h} bf16", nbytes, ceiling, ours_fn,
                               rotations(lambda: make(t, h), nbytes), {"torch.compile": comp})
        progress()

    comp_sk, comp_split = compiled(ref.sinkhorn_normalize), compiled(ref.mhc_pre_split_mixes)
    for t in ([16384] if quick else [4096, 16384, 65536]):
        nbytes = 2 * 4 * t * M * M
        sets = rotations(lambda: (torch.randn(t, M, M, device="cuda"),), nbytes)
        rows += bandwidth_rows("sinkhorn_normalize", f"T={t} m={M} repeat=10", nbytes, ceiling,
                               gpu_ms(lambda c: ops.sinkhorn_normalize(c, 10, EPS), sets),
                               _peers(lambda c: ref.sinkhorn_normalize(c, 10, EPS),
                                      comp_sk and (lambda c: comp_sk(c, 10, EPS)), sets))
        nbytes = 4 * (2 * t * N)
        sets = rotations(lambda: (torch.randn(t, N, device="cuda"), torch.randn(3, device="cuda"),
                                  torch.randn(N, device="cuda")), nbytes)
        rows += bandwidth_rows("mhc_pre_split_mixes", f"T={t} m={M}", nbytes, ceiling,
                               gpu_ms(lambda *a: ops.mhc_pre_split_mixes(*a, M, 1.0, EPS), sets),
                               _peers(lambda *a: ref.mhc_pre_split_mixes(*a, M, 1.0, EPS),
                                      comp_split and (lambda *a: comp_split(*a, M, 1.0, EPS)), sets))
    progress()

    comp_nf = compiled(ref.mhc_pre_norm_fn)
    comp_nfb = compiled(ref.mhc_pre_norm_fn_backward)
    for t, h in [(16384, 7168), (4096, 7168), (16384, 4096)] + ([] if quick else [(256, 7168), (64, 4096)]):
        flops = 2 * t * N * M * h
        sets = rotations(lambda: pre_set(t, h)[:2], 2 * t * M * h)
        ours = gpu_ms(lambda x, f: ops.mhc_pre_norm_fn_fwd(x, f, None, EPS), sets)
        rows += _flops_rows("mhc_pre_norm_fn", f"T={t} m={M} H={h} fp32 FMA", flops, ours,
                            _peers(lambda x, f: ref.mhc_pre_norm_fn(x, f, None, EPS),
                                   comp_nf and (lambda x, f: comp_nf(x, f, None, EPS)), sets))

        def bwd_set():
            x, f = pre_set(t, h)[:2]
            return (torch.randn(t, N, device="cuda"), x, f, None, *ops.mhc_pre_norm_fn_fwd(x, f, None, EPS))
        sets = rotations(bwd_set, 4 * t * M * h)
        rows += _flops_rows("mhc_pre_norm_fn_backward", f"T={t} m={M} H={h} fp32 FMA", 2 * flops,
                            gpu_ms(ops.mhc_pre_norm_fn_backward, sets),
                            _peers(ref.mhc_pre_norm_fn_backward, comp_nfb, sets))
    progress()

    def chain(x, f, s, b):                  # the reference composite TileKernels' mhc_pre runs unfused
        return ref.mhc_pre_big_fuse(x, f, s, b, None, EPS, EPS, EPS, 1.0, 10)
    comp_chain = compiled(chain)
    for t, h in [(1, 7168), (64, 7168), (4096, 7168), (16384, 7168)] + ([] if quick else [(4096, 4096)]):
        nbytes = 2 * (t * M * h + t * h) + 4 * (t * M + t * M * M)
        sets = rotations(lambda: pre_set(t, h), nbytes)
        timer = queued_ms if t <= 64 else gpu_ms
        ours = timer(lambda *a: ops.mhc_pre_big_fuse(*a, EPS, EPS, EPS, 1.0, 10), sets)
        rows += bandwidth_rows("mhc_pre_big_fuse", f"T={t} m={M} H={h}" + (" (queued)" if t <= 64 else ""), nbytes,
                               ceiling, ours, _peers(chain, comp_chain, sets, timer))
        progress()
    return rows
