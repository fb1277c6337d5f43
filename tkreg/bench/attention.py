"""Flash attention beside torch's `scaled_dot_product_attention`: cuDNN backend, then flash.

TFLOP/s = 4 * B * HQ * Sq * Sk * D / time, halved for causal (the masked half is not counted).
SDPA takes [B, H, S, D] (transposed views, no copy) and, for GQA, K/V expanded to HQ heads
beforehand (not timed; torch 2.11's cuDNN backend also runs `enable_gqa=True`, at the speed of the
expanded form).  The varlen row packs 16 sequences of mixed lengths into the token count of the
(8, 4096) row and compares with it.  tkreg and its peers take their runs in turn
(`queued_ms_paired`), as the GEMM benches do: the GPU's clock drifts as it heats, and timed one
after the other the same cubin read 0.85-1.07x of itself between two runs (docs/bench-method.md).
"""
from __future__ import annotations

from .timing import Row, need_torch, queued_ms_paired, try_ms

FULL = [(d, b, s, hq, hk, causal) for d in (128, 64) for b, s in ((8, 4096), (2, 16384))
        for hq, hk in ((32, 8), (32, 32)) for causal in (False, True)]
QUICK = [(128, 8, 4096, 32, 8, False), (128, 8, 4096, 32, 8, True), (64, 2, 16384, 32, 8, True)]
VARLEN_LENS = (8192, 1, 4096, 2500, 17, 3000, 1024, 600, 4000, 2048, 33, 1500, 2750, 3000, 97, 1)


def _flops(b, sq, sk, hq, d, causal):
    return 4 * b * hq * sq * sk * d * (0.5 if causal else 1.0)


def _row(case, impl, ms, flops, vs=None):
    return Row("attention", case, impl, ms, flops / ms / 1e9, "TFLOP/s", 0.0, vs or {})


def _sdpa_peers(torch, q, k, v, causal):
    """name -> callable, for the SDPA backends this torch runs on these inputs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    if g > 1:
        kt, vt = (x.repeat_interleave(g, dim=1) for x in (kt, vt))
    peers = {}
    for name, backend in (("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION), ("SDPA flash", SDPBackend.FLASH_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        if try_ms(run, [()], reps=1, warmup=0) is not None:   # a backend that refuses is left out
            peers[name] = run
    return peers


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    rows, bf16 = [], torch.bfloat16
    for d, b, s, hq, hk, causal in (QUICK if quick else FULL):
        q = torch.randn(b, s, hq, d, dtype=bf16, device="cuda")
        k, v = (torch.randn(b, s, hk, d, dtype=bf16, device="cuda") for _ in range(2))
        reps = 10 if s >= 16384 else 20
        flops = _flops(b, s, s, hq, d, causal)
        peers = _sdpa_peers(torch, q, k, v, causal)
        ours, *theirs = queued_ms_paired([lambda: tkreg.ops.flash_attention(q, k, v, causal=causal)]
                                         + list(peers.values()), [()], reps=reps)
        peers = dict(zip(peers, theirs))
        case = f"B={b} S={s} HQ={hq} HK={hk} D={d}{' causal' if causal else ''}"
        rows.append(_row(case, "tkreg", ours, flops, {p: t / ours for p, t in peers.items()}))
        rows += [_row(case, p, t, flops) for p, t in peers.items()]
        del q, k, v
        progress()
    for causal in (False, True):   # varlen: 16 mixed-length sequences vs the equal-length batch, same tokens
        lens = VARLEN_LENS
        total = sum(lens)
        cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        q = torch.randn(total, 32, 128, dtype=bf16, device="cuda")
        k, v = (torch.randn(total, 8, 128, dtype=bf16, device="cuda") for _ in range(2))
        flops = sum(_flops(1, n, n, 32, 128, causal) for n in lens)
        b = total // 4096
        qe, ke, ve = q[:b * 4096].view(b, 4096, 32, 128), k[:b * 4096].view(b, 4096, 8, 128), v[:b * 4096].view(b, 4096, 8, 128)
        ours, equal = queued_ms_paired(
            [lambda: tkreg.ops.flash_attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal),
             lambda: tkreg.ops.flash_attention(qe, ke, ve, causal=causal)], [()], reps=20)
        eflops = _flops(b, 4096, 4096, 32, 128, causal)
        case = f"varlen 16 seqs {total} tok HQ=32 HK=8 D=128{' causal' if causal else ''}"
        rate, erate = flops / ours, eflops / equal
        rows.append(_row(case, "tkreg", ours, flops, {f"equal-length B={b} S=4096 (TFLOP/s ratio)": rate / erate}))
        rows.append(_row(case, f"tkreg B={b} S=4096", equal, eflops))
        del q, k, v
        progress()
    return rows
