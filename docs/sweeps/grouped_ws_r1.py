"""Sweep pack + runner: the bf16 contiguous grouped GEMM on the dense op's warp-specialized persistent
tile (kernels_src/gemm_ws.py with `expert_of`: each 128-row tile finds its expert) beside the shipped
tkreg.grouped_gemm (tilelang's pipelined tiles) and torch._grouped_mm, issue #16's contiguous cases
(DeepSeek-V3 gate_up 4096 x 7168 and down 7168 x 2048; 8 / 32 experts x 4096 rows; Zipf over 256
experts, 65536 rows).  All timed in ONE process, runs taken in turn (queued_ms_paired).  cfg:
  0 = WS 128x256, 4 stages      1 = WS 128x224, 32-column chunks      2 = WS 128x128, 6 stages
  3 = the pipelined 128x256 tile that shipped before (grouped_gemm.LARGE)
Cases also include the MoE layer's (4096 tokens x top-8 over 256 experts, ~128 rows an expert: two
128-row tiles each, the second mostly empty; the output sized for the routing's capacity).
Every cfg is checked against the float64 product per expert (empty experts, a one-row expert, an
unaligned total) and compared bit for bit with the shipped op at the timed cases.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/grouped_ws_r1.py --namespace sw --arch sm_90a \\
      --out .ab/ggws/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 grouped_ws_r1.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

WS = dict(mma="ws", block_M=128, block_K=64, panel=10)
CFGS = [dict(WS, block_N=256, stages=4, epi=128), dict(WS, block_N=224, stages=4, epi=32),
        dict(WS, block_N=128, stages=6, epi=128),
        dict(block_M=128, block_N=256, block_K=64, stages=4, threads=256)]


def _specs():
    from kernels_src import grouped_gemm as G
    from kernels_src.gemm_ws import PASS_CONFIGS
    spec = next(s for s in G.SPECS if s.name == "tkreg.grouped_gemm")
    a = spec.tensors[0]
    return (OpSpec(name="sw.grouped_gemm", doc=spec.doc, tensors=(Tensor(a.name, a.shape, dtypes=("bfloat16",)),) + spec.tensors[1:],
                   scalars=(Scalar("cfg", "int32", 0),), factory=G.factory,
                   variants=tuple(Variant(dict(c, layout="contiguous", fp8=False, dtype="bfloat16", shape_class=f"cfg{i}"),
                                          rule=f"cfg == {i} and E <= 4095",
                                          pass_configs=PASS_CONFIGS if c.get("mma") == "ws" else ())
                                  for i, c in enumerate(CFGS)),
                   archs=("sm_90a",), reference=spec.reference, index64=True),)


SPECS = _specs()


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired, rotations
    from tkreg.bench.grouped_gemm import padded_offsets, zipf_sizes
    bf, res = torch.bfloat16, {"checks": [], "rows": []}
    # checks: empty experts, a one-row expert, an unaligned total, edge N
    for sizes, n, k in (([0, 1, 300, 0, 129], 520, 264), ([4096, 0, 77], 4096, 7168), ([5] * 40, 7168, 2048)):
        offs = padded_offsets(sizes)
        offs[-1] = offs[-2] + sizes[-1]          # the last segment may end anywhere
        m, e = offs[-1], len(sizes)
        a, b = torch.randn(m, k, dtype=bf, device="cuda"), torch.randn(e, n, k, dtype=bf, device="cuda")
        g = torch.tensor(offs, dtype=torch.int32, device="cuda")
        for c in range(len(CFGS)):
            o = torch.full((m, n), float("nan"), dtype=bf, device="cuda")
            tkreg.call("sw.grouped_gemm", a, b, g, out=o, cfg=c)
            worst = 0.0
            for i in range(e):
                lo, hi = offs[i], offs[i] + sizes[i]
                if hi > lo:
                    want = a[lo:hi].double() @ b[i].double().t()
                    worst = max(worst, float((o[lo:hi].double() - want).norm() / want.norm()))
            res["checks"].append(dict(sizes=sizes[:6], n=n, k=k, cfg=c, rel=worst))
    print("checks", [round(x["rel"], 5) for x in res["checks"]], flush=True)
    names = [f"cfg{c}" for c in range(len(CFGS))] + ["shipped", "_grouped_mm"]
    for n, k in ((4096, 7168), (7168, 2048)):
        gen = torch.Generator().manual_seed(0)
        layer = torch.bincount(torch.randint(0, 256, (4096 * 8,), generator=gen), minlength=256).tolist()
        for label, sizes in [(f"{e}x4096", [4096] * e) for e in (8, 32)] + [("zipf256", zipf_sizes(65536, 256)),
                                                                         ("layer T=4096", layer)]:
            offs = padded_offsets(sizes)
            m, e = offs[-1] + (256 * 127 if label.startswith("layer") else 0), len(sizes)
            g = torch.tensor(offs, dtype=torch.int32, device="cuda")
            ends = g[1:].contiguous()
            sets = rotations(lambda: (torch.randn(m, k, dtype=bf, device="cuda"), torch.randn(e, n, k, dtype=bf, device="cuda")),
                             2 * (m * k + e * n * k + m * n))
            fns = [lambda a, b, c=c: tkreg.call("sw.grouped_gemm", a, b, g, cfg=c) for c in range(len(CFGS))]
            fns += [lambda a, b: tkreg.ops.grouped_gemm(a, b, g), lambda a, b: torch._grouped_mm(a[:offs[-1]], b.transpose(-2, -1), offs=ends)]
            ref = fns[-2](*sets[0])[:offs[-1]]
            diffs = [int((f(*sets[0])[:offs[-1]].view(torch.int16) != ref.view(torch.int16)).sum()) for f in fns[:len(CFGS)]]
            flops = 2.0 * offs[-1] * n * k      # the padded rows: the work done
            ms = queued_ms_paired(fns, sets, reps=5 if flops > 4e12 else 10, runs=5)
            tf = {nm: flops / t / 1e9 for nm, t in zip(names, ms)}
            res["rows"].append(dict(case=f"{label} N={n} K={k}", tflops=tf, bitdiff_vs_shipped=diffs))
            print(label, n, k, " ".join(f"{nm}:{v:.0f}" for nm, v in tf.items()), "diffs", diffs, flush=True)
            json.dump(res, open(out, "w"), indent=1)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    run(sys.argv[1])
