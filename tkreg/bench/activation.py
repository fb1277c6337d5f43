"""Gated activations beside torch eager and torch.compile (GB/s against the copy ceiling).

Bytes per call: x[T, 2I] read once + out[T, I] written once = 6 * T * I (bf16).  "eager" is the
expression a user writes in bf16 (`F.silu(g) * u`: two kernels); "torch.compile" compiles the
fp32 reference (tkreg.reference.activation), which Inductor fuses into one kernel.
"""
from __future__ import annotations

from .timing import (COPY, Row, bandwidth_rows, compiled, copy_ms, gpu_ms, host_us, mid_shapes, need_torch,
                     rotations, same_size_rows, try_ms)


GPT_OSS = (7.0, 1.702, 1.0)   # swiglu limit, alpha, beta


def _eager_silu(x):
    import torch
    i = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :i]) * x[..., i:]


def _eager_swiglu(x, limit, alpha, beta):
    import torch
    i = x.shape[-1] // 2
    g, u = x[..., :i].clamp(max=limit), x[..., i:].clamp(-limit, limit)
    return g * torch.sigmoid(alpha * g) * (u + beta)


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg import reference
    bf16 = torch.bfloat16
    rows = []
    comp_silu, comp_swiglu = compiled(reference.silu_and_mul), compiled(reference.swiglu)
    # (op, tokens, I): Llama-3 8B (14336; 70B at TP2), 7168, DeepSeek-V3 dense MLP (18432), Qwen MoE
    # expert (1408), GPT-OSS expert (2880, with its clamp).
    shapes = [("silu_and_mul", 16384, 14336), ("silu_and_mul", 16384, 7168), ("swiglu", 16384, 2880)]
    if not quick:
        shapes += [("silu_and_mul", 8192, 18432), ("silu_and_mul", 65536, 1408), ("swiglu", 16384, 14336)]
    for op, t, i in shapes:
        nbytes = 6 * t * i
        sets = rotations(lambda: (torch.randn(t, 2 * i, dtype=bf16, device="cuda"),), nbytes)
        case = f"{t}x{i} bf16" + (" gpt-oss clamp" if op == "swiglu" else "")
        if op == "silu_and_mul":
            ours = gpu_ms(tkreg.ops.silu_and_mul, sets)
            peers = {"eager": try_ms(_eager_silu, sets),
                     "torch.compile": comp_silu and try_ms(comp_silu, sets)}
        else:
            ours = gpu_ms(lambda x: tkreg.ops.swiglu(x, *GPT_OSS), sets)
            peers = {"eager": try_ms(lambda x: _eager_swiglu(x, *GPT_OSS), sets),
                     "torch.compile": comp_swiglu and try_ms(lambda x: comp_swiglu(x, *GPT_OSS), sets)}
        rows += bandwidth_rows(op, case, nbytes, ceiling, ours, {**peers, COPY: copy_ms(nbytes)})
        progress()
    for t, i in mid_shapes(quick):   # mid sizes: queued GPU time beside a device copy of the same bytes
        nbytes = 6 * t * i
        sets = rotations(lambda: (torch.randn(t, 2 * i, dtype=bf16, device="cuda"),), nbytes)
        rows += same_size_rows("silu_and_mul", f"{t}x{i} bf16", nbytes, ceiling, tkreg.ops.silu_and_mul, sets,
                               {"torch.compile": comp_silu})
        progress()
    for t in ([1, 64] if quick else [1, 16, 64]):
        i = 14336
        x = torch.randn(t, 2 * i, dtype=bf16, device="cuda")
        ours = host_us(lambda: tkreg.ops.silu_and_mul(x), 5000) / 1e3
        eager = host_us(lambda: _eager_silu(x), 5000) / 1e3
        case = f"{t}x{i} bf16 (per call, loop)"
        rows.append(Row("silu_and_mul", case, "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("silu_and_mul", case, "eager", eager))
        x = torch.randn(t, 2 * 2880, dtype=bf16, device="cuda")
        ours = host_us(lambda: tkreg.ops.swiglu(x, *GPT_OSS), 5000) / 1e3
        eager = host_us(lambda: _eager_swiglu(x, *GPT_OSS), 5000) / 1e3
        case = f"{t}x2880 bf16 gpt-oss clamp (per call, loop)"
        rows.append(Row("swiglu", case, "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("swiglu", case, "eager", eager))
        progress()
    return rows
