"""Sweep pack + runner: DeepGEMM's FFMA interleave (build_tools/sass_edit.py, Variant
`sass_edits=("ffma_interleave",)`) on the FP8 warp-specialized tiles, whose promotion FFMA runs
should overlap the other consumer's WGMMAs; plus the scales-in-shared-memory decode / 64-row
tiles measured in docs/sweeps/fp8_smem_decode.py, with and without the edit.  cfg:
  fp8_gemm: 0 = ws-128 (shipped, M > 128)   1 = ws-128 + FFMA interleave
            2 = decode-ws + smem_scales       3 = 2 + FFMA interleave   (M <= 16)
  fp8_grouped_gemm (contiguous): 0 = ws-persistent (shipped)   1 = + FFMA interleave
  fp8_grouped_gemm_masked: 0 = ws (shipped, Mmax > 64)   1 = + FFMA interleave
                           2 = ws-64 + smem_scales (40 producer registers)   3 = 2 + FFMA interleave
                           4 = 2, persistent (one CTA a SM: at Mmax 64 every tile is one expert's
                               rows, so no empty capacity tiles; the next tile's loads under the
                               epilogue, for K = 2048's short tiles)
Every cfg is compared bit for bit with the shipped op (the edit only changes scheduling hints),
then timed in turn in ONE process: fp8_sweep.run for cfgs 0-1, then the decode / Mmax 64 cases for
cfgs 2-3 beside the shipped op and a same-size copy (weight GB/s).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_ffma.py --namespace sw --arch sm_90a \\
      --out .ab/fp8ffma/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_ffma.py OUT.json
Results (2026-12-02, H200, one process; docs/gemm-tuning.md): every cfg bit for bit equal; the edit
changes nothing measurable (dense 8192^3 1035 / 1035 TFLOP/s, every dense, grouped and masked case
within +-1%, decode and Mmax 64 within +-1%): ptxas 13.0 already lets every other FFMA of a
promotion run yield (only the FFMAs with a reuse-cached scale hold the slot), so the edit touches
8 FFMAs in the ws-128 cubin.  Not shipped; build_tools/sass_edit.py and Variant.sass_edits, which
this pack needs, were removed again right after the commit that added them (git log -S sass_edits).
decode-ws + smem_scales (cfg 2) against the shipped decode tiles: +2-3% at N >= 8192, +4-5% at
N = 7168 (decode-16 there), -2% at 4096 x 14336 (decode-16-split): ships for M <= 16, N >= 7168.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parent))
from fp8_sweep import decode_times, dense_checks, grouped_op, masked_checks, masked_small_times, sweep_op  # noqa: E402

FF = dict(sass_edits=("ffma_interleave",))
SMEM = dict(smem_scales=True)
DECODE_CHECK = [(1, 8192, 128), (5, 8200, 1152), (16, 8192, 2000), (3, 16384, 7168)]


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    cls = {c[0]: dict(c[1]) for c in F.CLASSES}
    ws, dws = cls["ws-128"], dict(cls["decode-ws"], **SMEM)
    gws = dict(G.FP8_WS, fp8=True)
    gp = dict(gws, persistent=True)
    m64 = dict(G.FP8_WS_64, fp8=True, smem_scales=True, producer_regs=40)
    return (sweep_op("fp8_gemm", [ws, dict(ws, **FF), dws, dict(dws, **FF)]),
            grouped_op("contiguous", [gp, dict(gp, **FF)]),
            grouped_op("masked", [gws, dict(gws, **FF), m64, dict(m64, **FF), dict(m64, persistent=True)]))


def run_small(out: str, res: dict):
    """cfgs 2-3 (masked 2-4): checks at M <= 16 / Mmax 64, then decode and small masked timings."""
    checks = dense_checks(DECODE_CHECK, 4)
    for r in checks:
        r["diffs"] = r["diffs"][2:]
    res["small_checks"] = checks + masked_checks((2, 3, 4))
    print("small checks", len(res["small_checks"]), "bad", [r for r in res["small_checks"] if any(r["diffs"])], flush=True)
    res["decode"] = decode_times((2, 3), ms=(1, 16))
    res["masked64"] = masked_small_times((2, 3, 4), ((8, 16), (16, 16), (8, 64)))
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    import fp8_sweep
    fp8_sweep.run(sys.argv[1], nd=2, nc=2, nm=2)
    run_small(sys.argv[1], json.load(open(sys.argv[1])))
