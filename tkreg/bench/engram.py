"""Engram family beside eager and torch.compile of tkreg's reference (TileKernels' semantics) and
a same-size copy (GB/s against the copy ceiling).

Bytes an op must move: engram_gate reads x, k (T*m*H bf16 each), v (T*H) and the two weights
(m*H), writes out (T*m*H) and the four saved [T, m] fp32; engram_hash reads ids and the small
tables, writes L*T*(n-1)*E int32; engram_gate_backward reads grad_out, x, k, v, the weights and
the four saved [T, m] fp32, writes grad_x, grad_k, grad_v and the two fp32 weight gradients (its
partial rows, T/16 * m * H fp32, are not counted).
"""
from __future__ import annotations

from .timing import bandwidth_rows, compiled, gpu_ms, need_torch, rotations, same_size_rows, try_ms

CLAMP, EPS = 1e-6, 1e-20     # TileKernels' test values


def gate_bytes(t, m, h):
    return 2 * (3 * t * m * h + t * h + 2 * m * h) + 4 * 4 * t * m


def backward_bytes(t, m, h):
    return 2 * (5 * t * m * h + 2 * t * h + 2 * m * h) + 4 * 4 * t * m + 2 * 4 * m * h


def cases(quick, ceiling, progress):
    torch = need_torch()
    from tkreg.ops import engram as ops
    from tkreg.reference import engram as ref
    bf16 = torch.bfloat16
    rows = []
    comp_gate, comp_hash = compiled(ref.engram_gate), compiled(ref.engram_hash)

    def gate_set(t, m, h):
        r = lambda *s: torch.randn(*s, dtype=bf16, device="cuda")  # noqa: E731
        return r(t, m, h), r(t, m, h), r(t, h), r(m, h), r(m, h)

    big = [(16384, 4, 7168), (16384, 4, 4096)] + ([] if quick else [(4097, 4, 7168), (16384, 4, 2048)])
    for t, m, h in big:
        nbytes = gate_bytes(t, m, h)
        sets = rotations(lambda: gate_set(t, m, h), nbytes)
        ours = gpu_ms(lambda *a: ops.engram_gate_fwd(*a, CLAMP, EPS), sets)
        peers = {"eager": try_ms(lambda *a: ref.engram_gate(*a, CLAMP, EPS), sets)}
        if comp_gate is not None:
            peers["torch.compile"] = try_ms(lambda *a: comp_gate(*a, CLAMP, EPS), sets)
        rows += bandwidth_rows("engram_gate", f"T={t} m={m} H={h} bf16", nbytes, ceiling, ours, peers)
        progress()
    for t in ([1024, 4096] if quick else [1, 64, 1024, 4096]):
        m, h = 4, 7168
        nbytes = gate_bytes(t, m, h)
        sets = rotations(lambda: gate_set(t, m, h), nbytes)
        rows += same_size_rows("engram_gate", f"T={t} m={m} H={h} bf16", nbytes, ceiling,
                               lambda *a: ops.engram_gate_fwd(*a, CLAMP, EPS), sets,
                               {"torch.compile": comp_gate and (lambda *a: comp_gate(*a, CLAMP, EPS))})
        progress()

    comp_bwd = compiled(ref.engram_gate_backward)
    for t, m, h in big[:2]:
        nbytes = backward_bytes(t, m, h)

        def bwd_set():
            x, k, v, wh, we = gate_set(t, m, h)
            saved = ops.engram_gate_fwd(x, k, v, wh, we, CLAMP, EPS)[1:]
            return (torch.randn(t, m, h, dtype=bf16, device="cuda"), x, k, v, wh, we, *saved)
        sets = rotations(bwd_set, nbytes)
        ours = gpu_ms(lambda *a: ops.engram_gate_backward(*a, CLAMP), sets)
        peers = {"eager": try_ms(lambda *a: ref.engram_gate_backward(*a, CLAMP), sets)}
        if comp_bwd is not None:
            peers["torch.compile"] = try_ms(lambda *a: comp_bwd(*a, CLAMP), sets)
        rows += bandwidth_rows("engram_gate_backward", f"T={t} m={m} H={h} bf16", nbytes, ceiling, ours, peers)
        progress()

    def hash_set(t, n=3, layers=2, e=8):
        ids = torch.randint(0, 100000, (t, n), dtype=torch.int32, device="cuda")
        mult = torch.randint(0, 100000, (layers, n), dtype=torch.int64, device="cuda")
        vocab = torch.randint(100000, 1000000, (layers, n - 1, e), dtype=torch.int32, device="cuda")
        offsets = (vocab.view(layers, -1).cumsum(1, dtype=torch.int64) - vocab.view(layers, -1)).to(torch.int32)
        return ids, mult, vocab, offsets

    for t in ([16384] if quick else [4096, 16384, 65536]):
        nbytes = t * 3 * 4 + 2 * t * 16 * 4
        sets = rotations(lambda: hash_set(t), nbytes)
        ours = gpu_ms(ops.engram_hash, sets)
        peers = {"eager": try_ms(ref.engram_hash, sets)}
        if comp_hash is not None:
            peers["torch.compile"] = try_ms(comp_hash, sets)
        rows += bandwidth_rows("engram_hash", f"T={t} n=3 L=2 E=8", nbytes, ceiling, ours, peers)
        progress()
    return rows
