"""MoE grouped GEMMs beside their peers, in one process, on DeepSeek-V3 expert shapes.

Peers: `torch._grouped_mm` (bf16; offs = cumulative segment ends, b passed as b.transpose(-2, -1);
the masked layout as its batched 3-D x 3-D form over all Mmax rows), a per-expert `torch.matmul`
loop, and for FP8 a per-expert `torch._scaled_mm` loop (torch's 1x128 / 128x128 blockwise scales
where the installed torch has them, else rowwise).  Peers that fail are skipped with a note.

Contiguous cases: DeepSeek-V3 expert shapes N x K = 4096 x 7168 (gate_up) and 7168 x 2048 (down),
8 and 32 experts x 4096 tokens, and a Zipf(1) distribution of 65536 routed rows over 256 experts.
Every segment is padded to 128 rows and every implementation gets that same padded layout, so
TFLOP/s count the padded rows (the work done).  Masked cases: 256/512/1024 rows per expert (counts
uniform in [0.7, 1.3] x that, Mmax = twice it) x 4/8/16 experts, TFLOP/s over the counted rows;
decode counts (16, 64 rows) report GB/s over the weight bytes and % of the copy bandwidth.
"""
from __future__ import annotations

import random

from .timing import Row, need_torch, queued_ms, rotations, try_ms

SHAPES = ((4096, 7168), (7168, 2048))
ALIGN = 128


def _reps(flops: float) -> int:
    return 5 if flops > 4e12 else 10 if flops > 5e11 else 30


def _row(op, case, impl, ms, flops, wbytes, decode, ceiling, vs=None):
    if decode:
        gbs = wbytes / ms / 1e6
        return Row(op, case, impl, ms, gbs, "GB/s", 100 * gbs / ceiling, vs or {})
    return Row(op, case, impl, ms, flops / ms / 1e9, "TFLOP/s", 0.0, vs or {})


def _rows(op, case, flops, wbytes, ceiling, ours, peers, decode=False) -> list:
    peers = {k: v for k, v in peers.items() if v}
    out = [_row(op, case, "tkreg", ours, flops, wbytes, decode, ceiling, {k: v / ours for k, v in peers.items()})]
    return out + [_row(op, case, k, v, flops, wbytes, decode, ceiling) for k, v in peers.items()]


def zipf_sizes(total: int, experts: int, s: float = 1.0, seed: int = 0) -> list:
    w = [1.0 / (i + 1) ** s for i in range(experts)]
    sizes = [int(total * x / sum(w)) for x in w]
    for i in range(total - sum(sizes)):
        sizes[i % experts] += 1
    random.Random(seed).shuffle(sizes)
    return sizes


def pad4(n: int) -> int:
    return -(-n // 4) * 4


def padded_offsets(sizes) -> list:
    out = [0]
    for s in sizes:
        out.append(out[-1] + -(-s // ALIGN) * ALIGN)
    return out


def contiguous_cases(quick, ceiling, progress, fp8: bool):
    torch = need_torch()
    import tkreg
    ops = tkreg.ops
    dists = [(f"{e}x4096", [4096] * e) for e in (8, 32)] + ([] if quick else [("zipf 256e 65536 rows", zipf_sizes(65536, 256))])
    rows = []
    for n, k in SHAPES[:1] if quick else SHAPES:
        for label, sizes in dists:
            offs = padded_offsets(sizes)
            m, e = offs[-1], len(sizes)
            segs = [(i, offs[i], offs[i + 1]) for i in range(e) if offs[i + 1] > offs[i]]
            flops = 2.0 * m * n * k
            g = torch.tensor(offs, dtype=torch.int32, device="cuda")
            ends = g[1:].contiguous()
            if fp8:
                def make():
                    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                    qa, sa = ops.per_token_group_quant_fp8(x)
                    del x
                    qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(torch.float8_e4m3fn)
                    sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                    # torch's blockwise layout per expert: column-major a scales, sb[e].t()
                    cols = [sa[lo:hi].t().contiguous().t() for _, lo, hi in segs]
                    return qa, sa, qb, sb, cols
                sets = rotations(make, m * k + e * n * k + 2 * m * n)
                r = _reps(flops)
                ours = queued_ms(lambda qa, sa, qb, sb, _: ops.fp8_grouped_gemm(qa, sa, qb, sb, g), sets, reps=r)

                def scaled_loop(qa, sa, qb, sb, cols, blockwise=True):
                    for j, (i, lo, hi) in enumerate(segs):
                        if blockwise:
                            torch._scaled_mm(qa[lo:hi], qb[i].t(), cols[j], sb[i].t(), out_dtype=torch.bfloat16)
                        else:
                            torch._scaled_mm(qa[lo:hi], qb[i].t(), sa[lo:hi, :1].contiguous(), sb[i, :1, :1].expand(1, n).contiguous(),
                                             out_dtype=torch.bfloat16)
                peers = {"_scaled_mm blockwise loop": try_ms(scaled_loop, sets, reps=r, timer=queued_ms)}
                if not peers["_scaled_mm blockwise loop"]:
                    peers["_scaled_mm rowwise loop"] = try_ms(lambda *t: scaled_loop(*t, blockwise=False), sets, reps=r,
                                                              timer=queued_ms)
                op = "fp8_grouped_gemm"
            else:
                sets = rotations(lambda: (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                                          torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")),
                                 2 * (m * k + e * n * k + m * n))
                r = _reps(flops)
                ours = queued_ms(lambda a, b: ops.grouped_gemm(a, b, g), sets, reps=r)

                def loop(a, b):
                    for i, lo, hi in segs:
                        torch.matmul(a[lo:hi], b[i].t())
                peers = {"torch._grouped_mm": try_ms(lambda a, b: torch._grouped_mm(a, b.transpose(-2, -1), offs=ends),
                                                     sets, reps=r, timer=queued_ms),
                         "matmul loop": queued_ms(loop, sets, reps=r)}
                op = "grouped_gemm"
            rows += _rows(op, f"{label} N={n} K={k}", flops, 0, ceiling, ours, peers)
            del sets
            torch.cuda.empty_cache()
            progress()
    return rows


def masked_cases(quick, ceiling, progress, fp8: bool):
    torch = need_torch()
    import tkreg
    ops = tkreg.ops
    counts_per = (1024, 256) if quick else (1024, 512, 256, 64, 16)
    experts = (8,) if quick else (4, 8, 16)
    rows = []
    for n, k in SHAPES[:1] if quick else SHAPES:
        for per in counts_per:
            for e in experts if per >= 256 else (8,):
                rng = random.Random(per * 131 + e)
                mmax = -(-2 * per // 64) * 64
                counts = [min(mmax, int(per * rng.uniform(0.7, 1.3))) for _ in range(e)]
                c = torch.tensor(counts, dtype=torch.int32, device="cuda")
                flops = 2.0 * sum(counts) * n * k
                decode = per <= 64
                wbytes = e * n * k * (1 if fp8 else 2)
                if fp8:
                    def make():
                        x = torch.randn(e * mmax, k, dtype=torch.bfloat16, device="cuda")
                        qa, sa = ops.per_token_group_quant_fp8(x)
                        qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(torch.float8_e4m3fn)
                        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                        # cuBLASLt refuses the masked cases (CUBLAS_STATUS_NOT_SUPPORTED) and takes
                        # the 128-row contiguous segments; M % 4 != 0 is the suspect, so the peer runs
                        # each expert's rows rounded up to 4 (unconfirmed on a GPU).
                        cols = [sa[i * mmax:i * mmax + pad4(cnt)].t().contiguous().t() for i, cnt in enumerate(counts)]
                        return qa.view(e, mmax, k), sa.view(e, mmax, k // 128), qb, sb, cols
                    sets = rotations(make, e * mmax * k + e * n * k + 2 * e * mmax * n)
                    r = _reps(flops)
                    ours = queued_ms(lambda qa, sa, qb, sb, _: ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, c), sets, reps=r)

                    def scaled_loop(qa, sa, qb, sb, cols):
                        for i, cnt in enumerate(counts):
                            if cnt:
                                torch._scaled_mm(qa[i, :pad4(cnt)], qb[i].t(), cols[i], sb[i].t(), out_dtype=torch.bfloat16)
                    peers = {"_scaled_mm blockwise loop": try_ms(scaled_loop, sets, reps=r, timer=queued_ms)}
                    op = "fp8_grouped_gemm_masked"
                else:
                    sets = rotations(lambda: (torch.randn(e, mmax, k, dtype=torch.bfloat16, device="cuda"),
                                              torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")),
                                     2 * (e * mmax * k + e * n * k + e * mmax * n))
                    r = _reps(flops)
                    ours = queued_ms(lambda a, b: ops.grouped_gemm_masked(a, b, c), sets, reps=r)

                    def loop(a, b):
                        for i, cnt in enumerate(counts):
                            if cnt:
                                torch.matmul(a[i, :cnt], b[i].t())
                    peers = {"torch._grouped_mm (all Mmax rows)": try_ms(
                                 lambda a, b: torch._grouped_mm(a, b.transpose(-2, -1)), sets, reps=r, timer=queued_ms),
                             "matmul loop": queued_ms(loop, sets, reps=r)}
                    op = "grouped_gemm_masked"
                case = f"{e}e ~{per} rows (Mmax {mmax}) N={n} K={k}"
                rows += _rows(op, case, flops, wbytes, ceiling, ours, peers, decode)
                del sets
                torch.cuda.empty_cache()
                progress()
    return rows


def cases(quick, ceiling, progress):
    return (contiguous_cases(quick, ceiling, progress, False) + contiguous_cases(quick, ceiling, progress, True)
            + masked_cases(quick, ceiling, progress, False) + masked_cases(quick, ceiling, progress, True))
