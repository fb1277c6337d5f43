"""Sweep pack + runner: the bf16 contiguous grouped GEMM (warp-specialized persistent 128x256 tile) given
the MoE routing's counts.  First measurement (2026-12-03, H200, the DeepSeek-V3 layer's own mapping):
with counts the tile's 64-row halves wholly past them only drain the ring, yet the GEMM got slower (T =
16384, N = 4096, K = 7168: 14.4 -> 20.5 ms).  cfg (skip: drain such halves; smem_partial: a half
partly past the counts stores its rows below them through shared memory with vector stores instead of
fragment element by element):
  0 skip 0, element stores   1 skip 1, element stores   2 skip 0, smem   3 skip 1, smem
Every cfg against the shipped op (rows below offsets[e] + counts[e] bit for bit, the rest untouched),
then timed in turn in ONE process beside the shipped op without counts.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/grouped_counts.py --namespace sw --arch sm_90a \\
      --out .ab/gcounts/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 grouped_counts.py OUT.json
Results (2026-12-03, H200, /work/.device/9; ms, the layer's own mapping: 1.48x / 1.13x
its real rows padded to 128), every cfg bit for bit on the covered rows and NaN elsewhere:
  T = 4096,  N 4096 K 7168: no counts 5.387; cfg0 5.854, cfg1 6.365, cfg2 6.059, cfg3 6.789
  T = 4096,  N 7168 K 2048: no counts 2.829; cfg0 3.031, cfg1 3.170, cfg2 3.273, cfg3 3.583
  T = 16384, N 4096 K 7168: no counts 13.744; cfg0 15.281, cfg1 19.621, cfg2 17.790, cfg3 21.737
  T = 16384, N 7168 K 2048: no counts 7.550; cfg0 7.750, cfg1 8.213, cfg2 8.193, cfg3 9.505
Every way of honouring the counts was slower than computing the padding: dropped.  Builds only at commit 1d52dbe
(its gemm_ws `skip` / `smem_partial` parameters and the ops' `counts`; removed after it).
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

CFGS = [(0, 0), (1, 0), (0, 1), (1, 1)]


def _specs():
    from kernels_src import grouped_gemm as G
    spec = next(s for s in G.SPECS if s.name == "tkreg.grouped_gemm")
    a = spec.tensors[0]
    ws = next(v for v in spec.variants if dict(v.params).get("shape_class") == "ws-large" and dict(v.params)["dtype"] == "bfloat16")
    return (OpSpec(name="sw.grouped_gemm", doc=spec.doc, tensors=(Tensor(a.name, a.shape, dtypes=("bfloat16",)),) + spec.tensors[1:],
                   scalars=(Scalar("cfg", "int32", 0),), factory=G.factory,
                   variants=tuple(Variant(dict(dict(ws.params), skip=k, smem_partial=p), rule=f"cfg == {i}", pass_configs=ws.pass_configs)
                                  for i, (k, p) in enumerate(CFGS)),
                   archs=("sm_90a",), reference=spec.reference, index64=True),)


SPECS = _specs()


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired
    from tkreg.bench import moe_layer as L
    ops = tkreg.ops
    torch.manual_seed(0)
    res = {"checks": [], "rows": []}
    w = L.make_weights(torch, 7168, 256, 2048, fp8=False)
    for t in (4096, 16384):
        x = torch.randn(t, 7168, device="cuda").bfloat16()
        idx, _ = L._route(torch, x, w, L.V3, ops.group_limited_topk_gate)
        mp = ops.moe_mapping(idx, 256, 128)
        g, c = mp.expert_offsets, mp.counts
        m = int(g[-1])
        mask = torch.zeros(m, dtype=torch.bool, device="cuda")
        for e in range(256):
            mask[int(g[e]):int(g[e]) + int(c[e])] = True
        for n, k in ((4096, 7168), (7168, 2048)):
            a = torch.randn(m, k, device="cuda").bfloat16()
            b = torch.randn(256, n, k, device="cuda", dtype=torch.bfloat16)
            want = ops.grouped_gemm(a, b, g)
            for i in range(len(CFGS)):
                o = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                tkreg.call("sw.grouped_gemm", a, b, g, c, out=o, cfg=i)
                ok = bool(torch.equal(o[mask], want[mask])) and bool(torch.isnan(o[~mask]).all())
                res["checks"].append(dict(t=t, n=n, cfg=i, ok=ok))
            fns = [lambda i=i: tkreg.call("sw.grouped_gemm", a, b, g, c, cfg=i) for i in range(len(CFGS))]
            fns += [lambda: ops.grouped_gemm(a, b, g), lambda: ops.grouped_gemm(a, b, g, c)]
            ms = queued_ms_paired(fns, [()], reps=5, runs=3)
            names = [f"cfg{i}" for i in range(len(CFGS))] + ["shipped", "shipped+counts"]
            row = dict(t=t, n=n, k=k, ms=dict(zip(names, ms)))
            res["rows"].append(row)
            print(t, n, k, " ".join(f"{nm}:{v:.3f}" for nm, v in row["ms"].items()), flush=True)
            del a, b, want
            torch.cuda.empty_cache()
    print("checks bad", [r for r in res["checks"] if not r["ok"]], flush=True)
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
