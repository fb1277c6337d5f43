"""Quant family beside torch eager and torch.compile of the references (GB/s against the copy ceiling).

Bytes per call = every input read once + every output written once (bf16 in, e = 2):
  transpose            2 * numel * element size
  per_channel (+T)     M*K*e + M*K (q) + 4*ceil(M/128)*K (s)
  silu per-channel T   M*2I*e + M*I + 4*ceil(M/128)*I
  silu backward quant  M*2I*e (x) + M*I*e (dy) + M*2I (q) + 4*M*2I/128 (s)
  fp4 quant / dequant  M*K*e + M*K/2 + M*K/32   /   M*K/2 + M*K/32 + 2*M*K
  e5m6 quant / dequant M*K*e + 1.5*M*K + 4*M    /   1.5*M*K + 4*M + 2*M*K
  fp8 dequant channel  M*K + 4*ceil(M/128)*K + 2*M*K
  rms_norm -> fp8      M*N*e + N*e + M*N (q) + 4*M*N/128 (s); the fused-add form + 2*M*N*e (residual)
Every row queues its calls behind a spin kernel (timing.queued_ms): events around one call would
also time the host's launch work, which for kernels of tens of µs read FP4 quant at 0.56 of its
queued rate (docs/bench-method.md).  Every row also carries a same-size device copy
(timing.copy_ms): where torch.compile is near it, no kernel can lead torch.compile by much.
"""
from __future__ import annotations

from .timing import (COPY, bandwidth_rows, compiled, copy_ms, mid_shapes, need_torch, queued_ms, rotations,
                     same_size_rows, try_ms)


def _rows(name, case, nbytes, ceiling, sets, ours, ref_fn, more=None):
    comp = compiled(ref_fn)
    peers = {"eager": try_ms(ref_fn, sets, queued_ms), "torch.compile": comp and try_ms(comp, sets, queued_ms),
             COPY: copy_ms(nbytes, queued_ms), **{k: try_ms(f, sets, queued_ms) for k, f in (more or {}).items()}}
    return bandwidth_rows(name, case, nbytes, ceiling, queued_ms(ours, sets), peers)


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg.reference import quant as ref
    ops = tkreg.ops
    bf16 = torch.bfloat16
    rows = []

    def rnd(*shape, dt=bf16):
        return lambda: ((torch.randn(*shape, device="cuda") * 3).to(dt),)

    # transpose: (B, M, N, dtype)
    tr = [(1, 16384, 7168, bf16), (1, 8192, 16384, bf16), (1, 16384, 7168, torch.float8_e4m3fn)]
    if not quick:
        tr += [(1, 8192, 4096, torch.float32), (32, 2048, 7168, bf16), (1, 4097, 7168, bf16),
               (1, 4097, 7168, torch.float8_e4m3fn), (1, 7168, 4097, bf16)]
    for b, m, n, dt in tr:
        nbytes = 2 * b * m * n * dt.itemsize
        sets = rotations(rnd(b, m, n, dt=dt), nbytes)
        case = f"{b}x{m}x{n} {str(dt)[6:]}"
        rows += _rows("batched_transpose", case, nbytes, ceiling, sets, ops.batched_transpose,
                      ref.batched_transpose if dt != torch.float8_e4m3fn else
                      (lambda x: ref.batched_transpose(x.view(torch.uint8)).view(x.dtype)))
        progress()

    shapes = [(16384, 7168)] + ([] if quick else [(8192, 16384), (4096, 7168)])
    for m, k in shapes:
        cb = 4 * (-(-m // 128)) * k
        sets = rotations(rnd(m, k), m * k * 3)
        for name, tr_ in (("per_channel_quant_fp8", False), ("per_channel_quant_fp8_transpose", True)):
            rows += _rows(name, f"{m}x{k} bf16", m * k * 3 + cb, ceiling, sets,
                          lambda x: ops.per_channel_quant_fp8(x, transpose=tr_), getattr(ref, name))
        rows += _rows("fp4_quant", f"{m}x{k} bf16", m * k * 2 + m * k // 2 + m * k // 32, ceiling, sets,
                      ops.per_token_group_quant_fp4, ref.per_token_group_quant_fp4)
        rows += _rows("e5m6_quant", f"{m}x{k} bf16", m * k * 2 + m * k * 3 // 2 + 4 * m, ceiling, sets,
                      ops.quant_e5m6, ref.quant_e5m6)
        q4 = [ops.per_token_group_quant_fp4(x) for (x,) in sets]
        rows += _rows("fp4_dequant", f"{m}x{k} -> bf16", m * k // 2 + m * k // 32 + 2 * m * k, ceiling, q4,
                      ops.per_token_group_dequant_fp4, ref.per_token_group_dequant_fp4)
        p6 = [ops.quant_e5m6(x) for (x,) in sets]
        rows += _rows("e5m6_dequant", f"{m}x{k} -> bf16", m * k * 3 // 2 + 4 * m + 2 * m * k, ceiling, p6,
                      ops.dequant_e5m6, ref.dequant_e5m6)
        qc = [ops.per_channel_quant_fp8(x) for (x,) in sets]
        rows += _rows("fp8_dequant_channel", f"{m}x{k} -> bf16", m * k * 3 + cb, ceiling, qc,
                      lambda q, s: ops.dequant_fp8(q, s, layout="channel"), ref.per_channel_dequant_fp8)
        del q4, p6, qc
        progress()

    for m, i in [(16384, 2048)] + ([] if quick else [(16384, 4096), (4096, 7168)]):
        cb = 4 * (-(-m // 128)) * i
        sets = rotations(rnd(m, 2 * i), m * i * 5)
        rows += _rows("silu_mul_per_channel_fp8_t", f"{m}x2*{i} bf16", m * i * 5 + cb, ceiling, sets,
                      ops.silu_and_mul_per_channel_quant_fp8_transpose, ref.silu_and_mul_per_channel_quant_fp8_transpose)
        nbytes = m * 2 * i * 2 + m * i * 2 + m * 2 * i + 4 * m * 2 * i // 128
        sets = rotations(lambda: (torch.randn(m, i, dtype=bf16, device="cuda"),
                                  (torch.randn(m, 2 * i, device="cuda") * 3).to(bf16)), nbytes)
        rows += _rows("silu_mul_backward_fp8", f"{m}x2*{i} bf16", nbytes, ceiling, sets,
                      ops.silu_and_mul_backward_quant_fp8, ref.silu_and_mul_backward_quant_fp8)
        progress()

    # mid sizes: queued GPU time beside a same-size device copy
    for m, k in mid_shapes(quick):
        sets = rotations(rnd(m, k), m * k * 3)
        comp = compiled(ref.per_token_group_quant_fp4)
        rows += same_size_rows("fp4_quant", f"{m}x{k} bf16", m * k * 2 + m * k // 2 + m * k // 32, ceiling,
                               ops.per_token_group_quant_fp4, sets, {"torch.compile": comp})
        rows += same_size_rows("batched_transpose", f"1x{m}x{k} bf16", 4 * m * k, ceiling,
                               ops.transpose, sets, {"torch.compile": compiled(ref.transpose)})
        progress()
    return rows + rms_norm_fp8_cases(quick, ceiling, progress)


UNFUSED = "tkreg unfused"       # rms_norm (or fused_add_rms_norm), then per_token_group_quant_fp8


def rms_norm_fp8_cases(quick, ceiling, progress):
    """rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8 beside torch eager and torch.compile of the
    same math (the reference: rms_norm rounded to bf16, then the 1x128 group quant) and tkreg's
    unfused pair ((fused_add_)rms_norm, then per_token_group_quant_fp8: two launches)."""
    torch = need_torch()
    import tkreg
    from tkreg.ops import quant as qops
    from tkreg.reference import quant as ref
    ops = tkreg.ops
    bf16 = torch.bfloat16
    rows = []

    def pair(x, w):
        return ops.per_token_group_quant_fp8(ops.rms_norm(x, w))

    def add_pair(x, r, w):
        return ops.per_token_group_quant_fp8(ops.fused_add_rms_norm(x, r, w)[0])     # x overwritten, as in a model

    shapes = [(16384, 4096), (16384, 7168), (4096, 4096)]
    if not quick:
        shapes += [(4096, 2048), (4096, 5120), (4096, 8192), (128, 4096), (16384, 8192)]
    for m, n in shapes:
        out = m * n + 4 * m * n // 128
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(bf16)
        sets = rotations(lambda: ((torch.randn(m, n, device="cuda") * 3).to(bf16), w), m * n * 3)
        rows += _rows("rms_norm_quant_fp8", f"{m}x{n} bf16", m * n * 2 + n * 2 + out, ceiling, sets,
                      qops.rms_norm_quant_fp8, ref.rms_norm_quant_fp8, {UNFUSED: pair})
        sets = rotations(lambda: (torch.randn(m, n, device="cuda").to(bf16), torch.randn(m, n, device="cuda").to(bf16),
                                  w), m * n * 7)
        rows += _rows("fused_add_rms_norm_quant_fp8", f"{m}x{n} bf16", m * n * 6 + n * 2 + out, ceiling, sets,
                      qops.fused_add_rms_norm_quant_fp8, ref.fused_add_rms_norm_quant_fp8, {UNFUSED: add_pair})
        progress()
    return rows

