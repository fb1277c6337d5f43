"""Sweep pack + runner: the bf16 masked grouped GEMM on the dense op's warp-specialized persistent tile
(kernels_src/gemm_ws.py with E: all experts' tiles in one list, empty ones skipped) beside the
shipped tkreg.grouped_gemm_masked (tilelang's pipelined 128x256 / 64x128 tiles, one CTA a tile and
expert), a per-expert torch.matmul loop and torch._grouped_mm over all Mmax rows.  Why: the bench
had the shipped op below the matmul loop on most masked cases (4 experts x ~256 rows: 0.69x).
cfg:  0 LARGE (shipped, Mmax > 64)   1 SMALL (shipped, Mmax <= 64)   2 WS 128x256, 4 stages
      3 WS 128x128, 6 stages   4 WS 64x256, 4 stages   5 WS 64x128, 6 stages
The bench's cases (issue #16: 4/8/16 experts x ~1024/512/256 rows, Mmax = 2x; 8 experts x ~64 / ~16
rows), every cfg checked against the float64 product per expert (counts 0, 1, odd, = Mmax) and bit
for bit against the shipped op on the counted rows, then all timed in turn in ONE process.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/grouped_masked_ws.py --namespace sw --arch sm_90a \\
      --out .ab/gmws/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 grouped_masked_ws.py OUT.json
Results (2026-12-02, H200; docs/gemm-tuning.md "Grouped GEMM"): every cfg within the shipped op's error
and bit for bit equal to it on the counted rows, rows past the counts untouched; the persistent WS
tiles 20-40% *slower* than the shipped grid (4e ~1024, N=4096: 382 / 478 TFLOP/s against 635), so
nothing ships and the masked WS code lives only in this record's commit (9b9e745): it builds there.
"""
import json
import pathlib
import random
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

WS = dict(mma="ws", block_K=64, panel=10)


def cfgs():
    from kernels_src import grouped_gemm as G
    return [G.LARGE, G.SMALL, dict(WS, block_M=128, block_N=256, stages=4, epi=128),
            dict(WS, block_M=128, block_N=128, stages=6, epi=128), dict(WS, block_M=64, block_N=256, stages=4, epi=128),
            dict(WS, block_M=64, block_N=128, stages=6, epi=128)]


def _specs():
    from kernels_src import grouped_gemm as G
    from kernels_src.gemm_ws import PASS_CONFIGS
    spec = next(s for s in G.SPECS if s.name == "tkreg.grouped_gemm_masked")
    a = spec.tensors[0]
    return (OpSpec(name="sw.grouped_gemm_masked", doc=spec.doc,
                   tensors=(Tensor(a.name, a.shape, dtypes=("bfloat16",)),) + spec.tensors[1:],
                   scalars=(Scalar("cfg", "int32", 0),), factory=G.factory,
                   variants=tuple(Variant(dict(c, layout="masked", fp8=False, dtype="bfloat16", shape_class=f"cfg{i}"),
                                          rule=f"cfg == {i} and E <= 4095 and {G.OUT32['masked']}",
                                          pass_configs=PASS_CONFIGS if c.get("mma") == "ws" else ())
                                  for i, c in enumerate(cfgs())),
                   archs=("sm_90a",), reference=spec.reference, index64=True),)


SPECS = _specs()
SHAPES = ((4096, 7168), (7168, 2048))


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired, rotations
    bf, res, nc = torch.bfloat16, {"checks": [], "rows": []}, len(cfgs())
    torch.manual_seed(0)
    for counts, mmax, n, k in (([0, 1, 300, 512, 129], 512, 520, 264), ([64, 0, 17], 64, 4096, 7168),
                               ([200, 77, 1000, 3], 1024, 7168, 2048)):
        e = len(counts)
        a, b = torch.randn(e, mmax, k, dtype=bf, device="cuda"), torch.randn(e, n, k, dtype=bf, device="cuda")
        c = torch.tensor(counts, dtype=torch.int32, device="cuda")
        ref = tkreg.ops.grouped_gemm_masked(a, b, c)
        for cfg in range(nc):
            o = torch.full((e, mmax, n), float("nan"), dtype=bf, device="cuda")
            tkreg.call("sw.grouped_gemm_masked", a, b, c, out=o, cfg=cfg)
            worst, diff, untouched = 0.0, 0, True
            for i, cnt in enumerate(counts):
                if cnt:
                    want = a[i, :cnt].double() @ b[i].double().t()
                    worst = max(worst, float((o[i, :cnt].double() - want).norm() / want.norm()))
                    diff += int((o[i, :cnt].view(torch.int16) != ref[i, :cnt].view(torch.int16)).sum())
                untouched &= bool(o[i, cnt:].isnan().all())
            res["checks"].append(dict(counts=counts, n=n, k=k, cfg=cfg, rel=worst, diff=diff, untouched=untouched))
    print("checks", [(x["cfg"], round(x["rel"], 5), x["diff"], x["untouched"]) for x in res["checks"]], flush=True)
    names = [f"cfg{c}" for c in range(nc)] + ["shipped", "matmul loop", "_grouped_mm"]
    for n, k in SHAPES:
        for per in (1024, 512, 256, 64, 16):
            for e in (4, 8, 16) if per >= 256 else (8,):
                rng = random.Random(per * 131 + e)          # the bench's counts
                mmax = -(-2 * per // 64) * 64
                counts = [min(mmax, int(per * rng.uniform(0.7, 1.3))) for _ in range(e)]
                c = torch.tensor(counts, dtype=torch.int32, device="cuda")
                flops = 2.0 * sum(counts) * n * k
                sets = rotations(lambda: (torch.randn(e, mmax, k, dtype=bf, device="cuda"),
                                          torch.randn(e, n, k, dtype=bf, device="cuda")),
                                 2 * (e * mmax * k + e * n * k + e * mmax * n))

                def loop(a, b):
                    for i, cnt in enumerate(counts):
                        if cnt:
                            torch.matmul(a[i, :cnt], b[i].t())
                fns = [lambda a, b, cfg=cfg: tkreg.call("sw.grouped_gemm_masked", a, b, c, cfg=cfg) for cfg in range(nc)]
                fns += [lambda a, b: tkreg.ops.grouped_gemm_masked(a, b, c), loop,
                        lambda a, b: torch._grouped_mm(a, b.transpose(-2, -1))]
                ms = queued_ms_paired(fns, sets, reps=max(5, min(40, int(1e13 / flops))), runs=5)
                tf = {nm: flops / t / 1e9 for nm, t in zip(names, ms)}
                res["rows"].append(dict(case=f"{e}e ~{per} (Mmax {mmax}) N={n} K={k}", tflops=tf,
                                        weight_gbs={nm: 2 * e * n * k / t / 1e6 for nm, t in zip(names, ms)}))
                print(res["rows"][-1]["case"], " ".join(f"{nm}:{v:.0f}" for nm, v in tf.items()), flush=True)
                json.dump(res, open(out, "w"), indent=1)
                del sets
                torch.cuda.empty_cache()


if __name__ == "__main__":
    run(sys.argv[1])
