"""Sweep pack + runner: FP8 decode on the warp-specialized swap-AB tile (class decode-ws) with split-K
(kernels_src/fp8_ws.py `splits`: grid z = split, fp32 partials, fp8_gemm.reduce_splits) and with 32 / 64
tokens a tile, for M = 1-64.  docs/gemm-tuning.md: decode-ws is per-K-block latency bound with one CTA
a SM (~340 ns a block); splits put 2-4 CTAs on each SM so their chains overlap.  cfg:
  0 tok16 (shipped decode-ws)  1 tok16 s2  2 tok16 s3 st6  3 tok16 s4 st6
  4 tok32  5 tok32 s2  6 tok32 s3 st6 (3 CTAs a SM)  7 tok64  8 tok64 s2 st6 (2 a SM)  9 tok64 s4 st6
Checks: every cfg against the shipped op (bit for bit where unsplit; split cfgs sum partials in split
order, so their error against a float64 product is reported), then all timed in turn in ONE process
(queued_ms_paired) at M in {1, 8, 16, 32, 64} x the bench's four weights, weight GB/s beside a copy.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_decode_split.py --namespace sw --arch sm_90a \\
      --out .ab/fp8split/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_decode_split.py OUT.json
Results (2026-12-02, H200, docs/gemm-tuning.md "16th session"): unsplit 32 / 64-token tiles bit for bit
equal to the shipped op, split cfgs within its error (1.7e-3 against the float64 product); ship as
decode-ws-32 (cfg 4), decode-ws-64 (cfg 7), decode-ws-split (cfg 2), decode-ws-32-split (cfg 5).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import decode_times, random_operands, sweep_op  # noqa: E402

CHECK = [(1, 8192, 128), (5, 8200, 1152), (16, 8192, 2000), (3, 16384, 7168), (16, 1000, 5248),
         (33, 4096, 14336), (64, 7168, 2048), (40, 1000, 640), (64, 264, 128), (17, 520, 384)]
TOK = {16: 0, 32: 4, 64: 7}


def cfgs():
    from kernels_src import fp8_gemm as F
    d = dict(next(c[1] for c in F.CLASSES if c[0] == "decode-ws"))
    return [d, dict(d, splits=2), dict(d, splits=3, stages=6), dict(d, splits=4, stages=6),
            dict(d, block_tok=32), dict(d, block_tok=32, splits=2), dict(d, block_tok=32, splits=3, stages=6, min_blocks=3),
            dict(d, block_tok=64), dict(d, block_tok=64, splits=2, stages=6, min_blocks=2),
            dict(d, block_tok=64, splits=4, stages=6, min_blocks=2)]


def specs():
    return (sweep_op("fp8_gemm", cfgs()),)


def checks(n_cfg: int) -> list:
    """Each cfg against the shipped op: count of differing bf16 outputs, and the relative Frobenius
    error of both against the float64 product of the (scaled) inputs."""
    import torch, tkreg
    rows = []
    for m, n, k in CHECK:
        qa, sa, qb, sb = random_operands(m, n, k)
        ea = qa.double() * sa.double().repeat_interleave(128, 1)[:, :k]
        eb = qb.double() * sb.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        exact = ea @ eb.t()
        err = lambda o: float((o.double() - exact).norm() / exact.norm().clamp_min(1e-30))
        for s in (sa, sa.t().contiguous().t()):
            ref = tkreg.ops.fp8_gemm(qa, s, qb, sb)
            outs = [tkreg.call("sw.fp8_gemm", qa, s, qb, sb, cfg=c) for c in range(n_cfg)]
            rows.append(dict(shape=[m, n, k], diffs=[int((o.view(torch.int16) != ref.view(torch.int16)).sum()) for o in outs],
                             err=[err(o) for o in outs], shipped_err=err(ref)))
    return rows


def run(out: str):
    import torch
    torch.manual_seed(0)
    n = len(cfgs())
    res = {"checks": checks(n)}
    worst = max(max(r["err"]) for r in res["checks"])
    print("checks", len(res["checks"]), "worst rel err", worst, "shipped worst", max(r["shipped_err"] for r in res["checks"]), flush=True)
    res["decode"] = decode_times(range(n), ms=(1, 8, 16, 32, 64))
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
