"""Rotary embedding beside torch eager and torch.compile (GB/s against the copy ceiling).

In place on q and k.  Bytes per call: q and k read and written once (2 * 2 * T * (HQ + HK) * D
for bf16), positions read (8 * T), and each distinct cache row touched read once (2 * D per
row; positions are 0..T-1, one prefill sequence).  "eager" runs the torch reference
(tkreg.reference.rotary, fp32 math, in place); "torch.compile" compiles that reference.
"""
from __future__ import annotations

from .timing import Row, bandwidth_rows, compiled, gpu_ms, host_us, need_torch, rotations, try_ms



MAX_POS = 32768


def _inputs(torch, t, hq, hk, d):
    bf16 = torch.bfloat16
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device="cuda") / d))
    f = torch.outer(torch.arange(MAX_POS, dtype=torch.float32, device="cuda"), inv)
    cache = torch.cat((f.cos(), f.sin()), dim=-1).to(bf16)
    pos = torch.arange(t, dtype=torch.int64, device="cuda") % MAX_POS
    return (pos, torch.randn(t, hq * d, dtype=bf16, device="cuda"),
            torch.randn(t, hk * d, dtype=bf16, device="cuda"), cache)


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg import reference
    rows = []
    comp = compiled(reference.rotary_embedding)
    # (tokens, HQ, HK, D, neox): Llama-3 8B and 70B, GPT-OSS (D=64), a GPT-J-style (interleaved) run.
    shapes = [(16384, 32, 8, 128, True), (16384, 64, 8, 64, True)]
    if not quick:
        shapes += [(16384, 64, 8, 128, True), (16384, 32, 8, 128, False), (4096, 8, 1, 128, True)]
    for t, hq, hk, d, neox in shapes:
        nbytes = 4 * t * (hq + hk) * d + 8 * t + 2 * d * min(t, MAX_POS)
        sets = rotations(lambda: _inputs(torch, t, hq, hk, d), nbytes)
        case = f"T={t} HQ={hq} HK={hk} D={d} {'neox' if neox else 'gptj'} bf16"
        ours = gpu_ms(lambda p, q, k, c: tkreg.ops.rotary_embedding(p, q, k, c, neox), sets)
        peers = {"eager": try_ms(lambda p, q, k, c: reference.rotary_embedding(p, q, k, c, neox), sets, reps=20),
                 "torch.compile": comp and try_ms(lambda p, q, k, c: comp(p, q, k, c, neox), sets)}
        rows += bandwidth_rows("rotary", case, nbytes, ceiling, ours, peers)
        progress()
    for t in ([1, 64] if quick else [1, 16, 64]):
        p, q, k, c = _inputs(torch, t, 32, 8, 128)
        ours = host_us(lambda: tkreg.ops.rotary_embedding(p, q, k, c, True), 5000) / 1e3
        eager = host_us(lambda: reference.rotary_embedding(p, q, k, c, True), 2000) / 1e3
        case = f"T={t} HQ=32 HK=8 D=128 neox bf16 (per call, loop)"
        rows.append(Row("rotary", case, "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("rotary", case, "eager", eager))
        progress()
    return rows
