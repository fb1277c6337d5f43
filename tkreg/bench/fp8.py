"""FP8 family beside torch eager and torch.compile of the references (GB/s against the copy ceiling).

Bytes per call = every input read once + every output written once:
  group quant      M*K*e (x) + M*K (q) + 4*M*K/128 (s)             e = 2 for bf16
  silu_and_mul     M*2I*e (x) + M*I (q) + 4*M*I/128 (s)
  block quant      N*K*e (w) + N*K (q) + 4*ceil(N/128)*ceil(K/128) (s)
  dequant          M*K (q) + 4*(scales) + 2*M*K (bf16 out)
"""
from __future__ import annotations

from .timing import (Row, bandwidth_rows, compiled, gpu_ms, host_us, mid_shapes, need_torch, rotations,
                     same_size_rows, try_ms)


def _time_peers(fn_eager, fn_comp, sets):
    return {"eager": gpu_ms(fn_eager, sets), "torch.compile": fn_comp and try_ms(fn_comp, sets)}


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg.reference import quant as ref
    ops = tkreg.ops
    BF16 = torch.bfloat16
    rows = []

    def rnd(*shape):
        return lambda: (torch.randn(*shape, dtype=BF16, device="cuda"),)

    # per-token-group quant: (M, K, ue8m0, column-major scales)
    quant = [(16384, 7168, False, False), (16384, 4096, False, False), (16384, 7168, True, True)]
    if not quick:
        quant += [(8192, 8192, False, False), (4096, 5120, False, False), (16384, 2048, False, False)]
    comp_q, comp_qc = compiled(ref.per_token_group_quant_fp8), compiled(ref.per_token_group_quant_fp8_colmajor)
    for m, k, ue, col in quant:
        nbytes = m * k * 2 + m * k + 4 * m * (k // 128)
        sets = rotations(rnd(m, k), nbytes)
        r, c = (ref.per_token_group_quant_fp8_colmajor, comp_qc) if col else (ref.per_token_group_quant_fp8, comp_q)
        ours = gpu_ms(lambda x: ops.per_token_group_quant_fp8(x, ue8m0=ue, column_major_scales=col), sets)
        peers = _time_peers(lambda x: r(x, ue), c and (lambda x: c(x, ue)), sets)
        case = f"{m}x{k} bf16" + (" ue8m0" if ue else "") + (" colmajor" if col else "")
        rows += bandwidth_rows("fp8_quant", case, nbytes, ceiling, ours, peers)
        progress()

    # fused SwiGLU + quant: x[M, 2I]
    silu = [(16384, 2048), (16384, 4096)] + ([] if quick else [(4096, 14336), (4096, 18432)])
    comp_s = compiled(ref.silu_and_mul_quant_fp8)
    for m, i in silu:
        nbytes = m * 2 * i * 2 + m * i + 4 * m * (i // 128)
        sets = rotations(rnd(m, 2 * i), nbytes)
        ours = gpu_ms(lambda x: ops.silu_and_mul_quant_fp8(x), sets)
        peers = _time_peers(lambda x: ref.silu_and_mul_quant_fp8(x), comp_s, sets)
        rows += bandwidth_rows("silu_mul_fp8", f"{m}x2*{i} bf16", nbytes, ceiling, ours, peers)
        progress()

    # mid sizes (prefill chunks): queued GPU time beside a device copy of the same bytes
    for m, k in mid_shapes(quick):
        nbytes = m * k * 2 + m * k + 4 * m * (k // 128)
        sets = rotations(rnd(m, k), nbytes)
        rows += same_size_rows("fp8_quant", f"{m}x{k} bf16", nbytes, ceiling,
                               lambda x: ops.per_token_group_quant_fp8(x), sets, {"torch.compile": comp_q})
        nbytes = m * 2 * k * 2 + m * k + 4 * m * (k // 128)
        sets = rotations(rnd(m, 2 * k), nbytes)
        rows += same_size_rows("silu_mul_fp8", f"{m}x2*{k} bf16", nbytes, ceiling,
                               lambda x: ops.silu_and_mul_quant_fp8(x), sets, {"torch.compile": comp_s})
        progress()

    # 128x128 block quant of weights
    blocks = [(7168, 7168), (18432, 7168)] + ([] if quick else [(4096, 14336), (2112, 7168)])
    comp_b = compiled(ref.per_block_quant_fp8)
    for n, k in blocks:
        nbytes = n * k * 2 + n * k + 4 * (-(-n // 128)) * (-(-k // 128))
        sets = rotations(rnd(n, k), nbytes)
        ours = gpu_ms(lambda w: ops.per_block_quant_fp8(w), sets)
        peers = _time_peers(lambda w: ref.per_block_quant_fp8(w), comp_b, sets)
        rows += bandwidth_rows("fp8_block_quant", f"{n}x{k} bf16", nbytes, ceiling, ours, peers)
        progress()

    # cast back
    comp_d, comp_bd = compiled(ref.per_token_group_dequant), compiled(ref.per_block_dequant)
    for m, k in [(16384, 7168)] + ([] if quick else [(4096, 4096)]):
        nbytes = m * k + 4 * m * (k // 128) + 2 * m * k
        sets = rotations(lambda: ops.per_token_group_quant_fp8(torch.randn(m, k, dtype=BF16, device="cuda")), nbytes)
        ours = gpu_ms(lambda q, s: ops.per_token_group_dequant(q, s), sets)
        peers = _time_peers(lambda q, s: ref.per_token_group_dequant(q, s), comp_d, sets)
        rows += bandwidth_rows("fp8_dequant", f"{m}x{k} -> bf16", nbytes, ceiling, ours, peers)
    for n, k in [(7168, 7168)] + ([] if quick else [(18432, 7168)]):
        nbytes = n * k + 4 * (-(-n // 128)) * (-(-k // 128)) + 2 * n * k
        sets = rotations(lambda: ops.per_block_quant_fp8(torch.randn(n, k, dtype=BF16, device="cuda")), nbytes)
        ours = gpu_ms(lambda q, s: ops.per_block_dequant(q, s), sets)
        peers = _time_peers(lambda q, s: ref.per_block_dequant(q, s), comp_bd, sets)
        rows += bandwidth_rows("fp8_block_dequant", f"{n}x{k} -> bf16", nbytes, ceiling, ours, peers)
    progress()

    # decode sizes: per-call wall time of a loop (host-bound), against the eager reference
    for m in ([1, 64] if quick else [1, 16, 64]):
        x = torch.randn(m, 7168, dtype=BF16, device="cuda")
        h = torch.randn(m, 2 * 2048, dtype=BF16, device="cuda")
        for op, case, mine, peer in (
                ("fp8_quant", f"{m}x7168 bf16 (per call, loop)",
                 lambda: ops.per_token_group_quant_fp8(x), lambda: ref.per_token_group_quant_fp8(x)),
                ("silu_mul_fp8", f"{m}x2*2048 bf16 (per call, loop)",
                 lambda: ops.silu_and_mul_quant_fp8(h), lambda: ref.silu_and_mul_quant_fp8(h))):
            ours = host_us(mine, 5000) / 1e3
            eager = host_us(peer, 2000) / 1e3
            rows.append(Row(op, case, "tkreg", ours, vs={"eager": eager / ours}))
            rows.append(Row(op, case, "eager", eager))
        q, s = ops.per_token_group_quant_fp8(x)
        ours = host_us(lambda: ops.per_token_group_dequant(q, s), 5000) / 1e3
        eager = host_us(lambda: ref.per_token_group_dequant(q, s), 2000) / 1e3
        rows.append(Row("fp8_dequant", f"{m}x7168 -> bf16 (per call, loop)", "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("fp8_dequant", f"{m}x7168 -> bf16 (per call, loop)", "eager", eager))
        # GPU time alone (events), for the "not slower than eager" bar at small sizes
        sets = [(x,)]
        ours = gpu_ms(lambda x: ops.per_token_group_quant_fp8(x), sets)
        eager = gpu_ms(lambda x: ref.per_token_group_quant_fp8(x), sets)
        rows.append(Row("fp8_quant", f"{m}x7168 bf16 (events)", "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("fp8_quant", f"{m}x7168 bf16 (events)", "eager", eager))
        progress()
    return rows
