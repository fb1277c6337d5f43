"""Sweep pack + runner: staggered consumers on the warp-specialized FP8 tile (kernels_src/fp8_ws.py
`stagger`: consumer 1 runs block 0 alone, so its group boundaries, where its WGMMA chain drains
(wait_group 0), fall one block after consumer 0's, and one consumer's chain is always in flight)
beside the shipped tiles.  Every cfg, the shipped op and torch's peers are timed in ONE process,
their runs taken in turn (queued_ms_paired).  cfg (dense):
  0 = shipped ws-128 (persistent, panel 16, 4 stages)    1 = the same, staggered
  2 = staggered, 5 stages                                3 = staggered grid form (one CTA a tile)
grouped contiguous: 0 = shipped persistent, 1 = staggered, 2 = grid (shipped for K > 4096),
3 = staggered grid; masked: 0 = shipped grid, 1 = staggered.
The `stagger` option was removed from kernels_src/fp8_ws.py after this run: build the pack from
commit ad12ab1 (`git worktree add /tmp/st ad12ab1`).
Each cfg is compared bit for bit with the shipped op (odd block counts, K <= 128, partial K,
edge tiles, column-major scales; grouped: empty experts, partial tiles).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_stagger.py --namespace sw --arch sm_90a \\
      --out .ab/fp8st/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_stagger.py OUT.json
Results (2026-12-02, docs/gemm-tuning.md): bit-exact; persistent staggered -4-12%, grid +-4%.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CHECK = [(128, 128, 128), (300, 264, 16), (129, 136, 144), (128, 128, 384), (257, 384, 640),
         (1000, 1000, 1152), (2048, 2048, 2304), (192, 8192, 7168), (640, 512, 2000)]
DENSE_T = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096),
           (4096, 4096, 14336), (2048, 8192, 8192), (512, 8192, 8192), (2048, 7168, 2048)]


def specs():
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    ws = dict(F.CLASSES[[c[0] for c in F.CLASSES].index("ws-128")][1])
    dense = [ws, dict(ws, stagger=True), dict(ws, stagger=True, stages=5), dict(ws, stagger=True, persistent=False, panel=10)]
    gws = dict(G.FP8_WS, fp8=True)
    gp = dict(gws, persistent=True)
    grouped = {"contiguous": [gp, dict(gp, stagger=True), gws, dict(gws, stagger=True)],
               "masked": [gws, dict(gws, stagger=True)]}
    by = {s.name: s for m in (F, G) for s in m.SPECS}

    def op(name, factory, cfgs, base=None):
        spec = by[f"tkreg.{name}"]
        vs = tuple(Variant(dict(c, shape_class=f"cfg{i}"), rule=f"cfg == {i}" + (f" and {base}" if base else ""),
                           pass_configs=F.WS_PASS_CONFIGS) for i, c in enumerate(cfgs))
        return OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                      factory=factory, variants=vs, archs=("sm_90a",), reference=spec.reference, index64=spec.index64)
    return (op("fp8_gemm", F.fp8_gemm_factory, dense),) + tuple(
        op(name, G.factory, [dict(c, layout=layout) for c in grouped[layout]],
           base=f"E <= {2**G.LOG_E - 1} and {G.OUT32[layout]}")
        for name, layout in (("fp8_grouped_gemm", "contiguous"), ("fp8_grouped_gemm_masked", "masked")))


def run(out: str, nd: int = 4, nc: int = 4, nm: int = 2):
    """Checks and paired timings of a pack with nd dense, nc contiguous and nm masked cfgs (cfg 0
    of each: the shipped tile); docs/sweeps/fp8_ring.py runs its pack through here too."""
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired, rotations
    from tkreg.bench.grouped_gemm import padded_offsets, zipf_sizes
    ops, f8, res = tkreg.ops, torch.float8_e4m3fn, {"checks": [], "dense": [], "grouped": []}
    torch.manual_seed(0)
    for m, n, k in CHECK:
        kb = -(-k // 128)
        qa = (torch.randn(m, k, device="cuda") * 0.5).to(f8)
        qb = (torch.randn(n, k, device="cuda") * 0.5).to(f8)
        sa = torch.rand(m, kb, device="cuda") + 0.5
        sb = torch.rand(-(-n // 128), kb, device="cuda") + 0.5
        for s in (sa, sa.t().contiguous().t()):
            ref = ops.fp8_gemm(qa, s, qb, sb)
            d = [int((tkreg.call("sw.fp8_gemm", qa, s, qb, sb, cfg=c).view(torch.int16) != ref.view(torch.int16)).sum())
                 for c in range(nd)]
            res["checks"].append(dict(op="dense", shape=[m, n, k], diffs=d))
    for sizes, n, k in (([0, 1, 300, 0, 129], 520, 272), ([200, 0, 77], 384, 7168), ([5] * 40, 256, 2048)):
        offs = padded_offsets(sizes)
        m, e = offs[-1], len(sizes)
        qa = (torch.randn(m, k, device="cuda") * 0.5).to(f8)
        sa = torch.rand(m, -(-k // 128), device="cuda") + 0.5
        qb = (torch.randn(e, n, k, device="cuda") * 0.5).to(f8)
        sb = torch.rand(e, -(-n // 128), -(-k // 128), device="cuda") + 0.5
        g = torch.tensor(offs, dtype=torch.int32, device="cuda")
        ref = ops.fp8_grouped_gemm(qa, sa, qb, sb, g)
        d = [int((tkreg.call("sw.fp8_grouped_gemm", qa, sa, qb, sb, g, cfg=c).view(torch.int16) != ref.view(torch.int16)).sum())
             for c in range(nc)]
        res["checks"].append(dict(op="contiguous", sizes=sizes, n=n, k=k, diffs=d))
        mmax = 320
        cnt = torch.tensor([min(s, mmax) for s in sizes], dtype=torch.int32, device="cuda")
        qm = (torch.randn(e, mmax, k, device="cuda") * 0.5).to(f8)
        sm = torch.rand(e, mmax, -(-k // 128), device="cuda") + 0.5
        ref = ops.fp8_grouped_gemm_masked(qm, sm, qb, sb, cnt)
        # rows past a count are unspecified: compare the counted rows only
        keep = torch.arange(mmax, device="cuda")[None, :] < cnt[:, None]
        d = []
        for c in range(nm):
            o = tkreg.call("sw.fp8_grouped_gemm_masked", qm, sm, qb, sb, cnt, cfg=c)
            d.append(int(((o.view(torch.int16) != ref.view(torch.int16)) & keep[..., None]).sum()))
        res["checks"].append(dict(op="masked", sizes=sizes, n=n, k=k, diffs=d))
    bad = [r for r in res["checks"] if any(r["diffs"])]
    print("checks", len(res["checks"]), "bad", bad, flush=True)

    for m, n, k in DENSE_T:
        def make():
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
            qa, sa = ops.per_token_group_quant_fp8(x)
            qb, sb = ops.per_block_quant_fp8(w)
            return qa, sa, qb, sb, sa.t().contiguous().t(), torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        sets = rotations(make, m * k + n * k + 2 * m * n)
        fns = [lambda qa, sa, qb, sb, *_, c=c: tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=c) for c in range(nd)]
        fns += [lambda qa, sa, qb, sb, *_: ops.fp8_gemm(qa, sa, qb, sb),
                lambda qa, sa, qb, sb, col, ra, rb: torch._scaled_mm(qa, qb.t(), col, sb.t(), out_dtype=torch.bfloat16),
                lambda qa, sa, qb, sb, col, ra, rb: torch._scaled_mm(qa, qb.t(), ra, rb, out_dtype=torch.bfloat16)]
        names = [f"cfg{c}" for c in range(nd)] + ["shipped", "blockwise", "rowwise"]
        r = max(5, min(40, int(2.5e13 / (2 * m * n * k))))
        ms = queued_ms_paired(fns, sets, reps=r, runs=5)
        tf = {nm_: 2 * m * n * k / t / 1e9 for nm_, t in zip(names, ms)}
        res["dense"].append(dict(shape=[m, n, k], tflops=tf))
        print([m, n, k], " ".join(f"{a}:{v:.0f}" for a, v in tf.items()), flush=True)
        json.dump(res, open(out, "w"), indent=1)
        del sets
        torch.cuda.empty_cache()

    for n, k in ((4096, 7168), (7168, 2048)):
        for label, sizes in [(f"{e}x4096", [4096] * e) for e in (8, 32)] + [("zipf256", zipf_sizes(65536, 256))]:
            offs = padded_offsets(sizes)
            m, e = offs[-1], len(sizes)
            g = torch.tensor(offs, dtype=torch.int32, device="cuda")

            def make():
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                qa, sa = ops.per_token_group_quant_fp8(x)
                qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(f8)
                sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                return qa, sa, qb, sb
            sets = rotations(make, m * k + e * n * k + 2 * m * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_grouped_gemm", qa, sa, qb, sb, g, cfg=c) for c in range(nc)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_grouped_gemm(qa, sa, qb, sb, g)]
            names = [f"cfg{c}" for c in range(nc)] + ["shipped"]
            ms = queued_ms_paired(fns, sets, reps=max(5, min(40, int(2.5e13 / (2 * m * n * k)))), runs=5)
            tf = {a: 2 * m * n * k / t / 1e9 for a, t in zip(names, ms)}
            res["grouped"].append(dict(case=f"contiguous {label} N={n} K={k}", tflops=tf))
            print(res["grouped"][-1]["case"], " ".join(f"{a}:{v:.0f}" for a, v in tf.items()), flush=True)
            del sets
            torch.cuda.empty_cache()
        for e, per in ((8, 1024), (16, 256)):
            mmax = 2 * per
            counts = [int(per * (0.7 + 0.6 * ((i * 37) % 11) / 10)) for i in range(e)]
            cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")

            def make():
                x = torch.randn(e * mmax, k, dtype=torch.bfloat16, device="cuda")
                qa, sa = ops.per_token_group_quant_fp8(x)
                qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(f8)
                sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                return qa.view(e, mmax, k), sa.view(e, mmax, k // 128), qb, sb
            sets = rotations(make, e * mmax * k + e * n * k + 2 * e * mmax * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_grouped_gemm_masked", qa, sa, qb, sb, cnt, cfg=c)
                   for c in range(nm)]
            fns += [lambda qa, sa, qb, sb: ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, cnt)]
            names = [f"cfg{c}" for c in range(nm)] + ["shipped"]
            flops = 2.0 * sum(counts) * n * k
            ms = queued_ms_paired(fns, sets, reps=max(5, min(40, int(2.5e13 / flops))), runs=5)
            tf = {a: flops / t / 1e9 for a, t in zip(names, ms)}
            res["grouped"].append(dict(case=f"masked {e}e ~{per} N={n} K={k}", tflops=tf))
            print(res["grouped"][-1]["case"], " ".join(f"{a}:{v:.0f}" for a, v in tf.items()), flush=True)
            del sets
            torch.cuda.empty_cache()
        json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
