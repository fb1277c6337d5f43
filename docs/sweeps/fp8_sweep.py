"""Shared parts of the FP8 sweep packs (fp8_stagger.py, fp8_ring.py, fp8_smem_decode.py): the
sw.* op a list of cfgs becomes, the bit-for-bit dense check, and the paired runner of the dense +
grouped packs.  Not a pack itself (no SPECS)."""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

CHECK = [(128, 128, 128), (300, 264, 16), (129, 136, 144), (128, 128, 384), (257, 384, 640),
         (1000, 1000, 1152), (2048, 2048, 2304), (192, 8192, 7168), (640, 512, 2000)]
DENSE_T = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096),
           (4096, 4096, 14336), (2048, 8192, 8192), (512, 8192, 8192), (2048, 7168, 2048)]


def sweep_op(name: str, cfgs, base: str = None) -> OpSpec:
    """sw.<name>: tkreg.<name>'s signature plus a `cfg` scalar; cfg i runs cfgs[i] (`base`: the
    op's own size limits, kept)."""
    from kernels_src import fp8_gemm as F, grouped_gemm as G
    spec = next(s for m in (F, G) for s in m.SPECS if s.name == f"tkreg.{name}")
    factory = F.fp8_gemm_factory if name == "fp8_gemm" else G.factory
    vs = tuple(Variant(dict(c, shape_class=f"cfg{i}"), rule=f"cfg == {i}" + (f" and {base}" if base else ""),
                       pass_configs=F.WS_PASS_CONFIGS if c.get("mma") == "ws" else ()) for i, c in enumerate(cfgs))
    return OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=spec.tensors, scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                  factory=factory, variants=vs, archs=("sm_90a",), reference=spec.reference, index64=spec.index64)


def grouped_op(layout: str, cfgs) -> OpSpec:
    """sw.fp8_grouped_gemm (contiguous) or sw.fp8_grouped_gemm_masked over cfgs, keeping the op's
    expert-count and int32-store limits."""
    from kernels_src import grouped_gemm as G
    name = "fp8_grouped_gemm" if layout == "contiguous" else "fp8_grouped_gemm_masked"
    return sweep_op(name, [dict(c, layout=layout) for c in cfgs], base=f"E <= {2**G.LOG_E - 1} and {G.OUT32[layout]}")


def masked_inputs(e: int, mmax: int, n: int, k: int):
    """A maker of masked FP8 grouped GEMM inputs (a[e, mmax, k] quantized by tkreg with its scales,
    b[e, n, k] e4m3 with 128x128 scales) for bench.timing.rotations."""
    import torch, tkreg

    def make():
        x = torch.randn(e * mmax, k, dtype=torch.bfloat16, device="cuda")
        qa, sa = tkreg.ops.per_token_group_quant_fp8(x)
        qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(torch.float8_e4m3fn)
        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
        return qa.view(e, mmax, k), sa.view(e, mmax, k // 128), qb, sb
    return make


def quantized(m: int, n: int, k: int):
    """Random bf16 activations [m, k] and weights [n, k] quantized by tkreg: (qa, sa, qb, sb)."""
    import torch, tkreg
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    return (*tkreg.ops.per_token_group_quant_fp8(x), *tkreg.ops.per_block_quant_fp8(w))


def random_operands(m: int, n: int, k: int):
    """Random e4m3 a[m, k], b[n, k] with random fp32 block scales (a 1x128, b 128x128): (qa, sa, qb, sb)."""
    import torch
    f8, kb = torch.float8_e4m3fn, -(-k // 128)
    qa = (torch.randn(m, k, device="cuda") * 0.5).to(f8)
    qb = (torch.randn(n, k, device="cuda") * 0.5).to(f8)
    sa = torch.rand(m, kb, device="cuda") + 0.5
    sb = torch.rand(-(-n // 128), kb, device="cuda") + 0.5
    return qa, sa, qb, sb


def dense_checks(shapes, ncfg: int) -> list:
    """sw.fp8_gemm cfgs 0..ncfg-1 against the shipped tkreg.fp8_gemm, bit for bit, row-major and
    column-major a scales: one row a shape and layout, with each cfg's count of differing outputs."""
    import torch, tkreg
    rows = []
    for m, n, k in shapes:
        qa, sa, qb, sb = random_operands(m, n, k)
        for s in (sa, sa.t().contiguous().t()):
            ref = tkreg.ops.fp8_gemm(qa, s, qb, sb)
            d = [int((tkreg.call("sw.fp8_gemm", qa, s, qb, sb, cfg=c).view(torch.int16) != ref.view(torch.int16)).sum())
                 for c in range(ncfg)]
            rows.append(dict(op="dense", shape=[m, n, k], diffs=d))
    return rows


def run(out: str, nd: int = 4, nc: int = 4, nm: int = 2):
    """Checks and paired timings of a pack with nd dense, nc contiguous and nm masked cfgs (cfg 0
    of each: the shipped tile): every cfg bit for bit against the shipped op, then the dense
    shapes (beside `_scaled_mm` blockwise and rowwise) and grouped cases timed in turn."""
    import torch, tkreg
    from tkreg.bench.timing import queued_ms_paired, rotations
    from tkreg.bench.grouped_gemm import padded_offsets, zipf_sizes
    ops, f8, res = tkreg.ops, torch.float8_e4m3fn, {"checks": [], "dense": [], "grouped": []}
    torch.manual_seed(0)
    res["checks"] += dense_checks(CHECK, nd)
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
            qa, sa, qb, sb = quantized(m, n, k)
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

            sets = rotations(masked_inputs(e, mmax, n, k), e * mmax * k + e * n * k + 2 * e * mmax * n)
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



SMALL_MASKED = ((8, 64, 4096, 7168), (5, 64, 1000, 1152))


def masked_checks(cfgs, cases=SMALL_MASKED) -> list:
    """sw.fp8_grouped_gemm_masked cfgs against the shipped op, bit for bit on the counted rows (rows
    past a count are unspecified): one row a case (e, Mmax, n, k), with each cfg's differing outputs."""
    import torch, tkreg
    f8, rows = torch.float8_e4m3fn, []
    for e, mmax, n, k in cases:
        counts = torch.tensor([(i * 13) % (mmax + 1) for i in range(e)], dtype=torch.int32, device="cuda")
        qm = (torch.randn(e, mmax, k, device="cuda") * 0.5).to(f8)
        sm = torch.rand(e, mmax, -(-k // 128), device="cuda") + 0.5
        qb = (torch.randn(e, n, k, device="cuda") * 0.5).to(f8)
        sb = torch.rand(e, -(-n // 128), -(-k // 128), device="cuda") + 0.5
        ref = tkreg.ops.fp8_grouped_gemm_masked(qm, sm, qb, sb, counts)
        keep = (torch.arange(mmax, device="cuda")[None, :] < counts[:, None])[..., None]
        d = [int(((tkreg.call("sw.fp8_grouped_gemm_masked", qm, sm, qb, sb, counts, cfg=c).view(torch.int16)
                   != ref.view(torch.int16)) & keep).sum()) for c in cfgs]
        rows.append(dict(op="masked", shape=[e, mmax, n, k], diffs=d))
    return rows


def masked_small_times(cfgs, cases) -> list:
    """Mmax 64 (DeepEP low-latency counts): sw.fp8_grouped_gemm_masked cfgs and the shipped op timed
    in turn in one process, weight GB/s beside a same-size copy; `cases`: (experts, rows each)."""
    import torch, tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    out, mmax = [], 64
    for e, per in cases:
        for n, k in ((4096, 7168), (7168, 2048)):
            counts = torch.tensor([max(1, int(per * (0.7 + 0.6 * ((i * 37) % 11) / 10))) for i in range(e)],
                                  dtype=torch.int32, device="cuda").clamp_(max=mmax)
            sets = rotations(masked_inputs(e, mmax, n, k), e * mmax * k + e * n * k + 2 * e * mmax * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_grouped_gemm_masked", qa, sa, qb, sb, counts, cfg=c)
                   for c in cfgs]
            fns += [lambda qa, sa, qb, sb: tkreg.ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, counts)]
            ms = queued_ms_paired(fns, sets, reps=40, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(e * n * k))
            names = [f"cfg{c}" for c in cfgs] + ["shipped", "copy"]
            out.append(dict(case=f"{e}e ~{per} N={n} K={k}", gbs={a: e * n * k / t / 1e6 for a, t in zip(names, ms + [copy])}))
            print(out[-1]["case"], " ".join(f"{a}:{v:.0f}" for a, v in out[-1]["gbs"].items()), flush=True)
            del sets
    return out


def decode_times(cfgs, ms=(1, 8, 16), weights=((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))) -> list:
    """Decode: sw.fp8_gemm cfgs and the shipped op timed in turn in one process at M tokens x each
    (N, K) weight, weight GB/s beside a same-size copy."""
    import tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    ops, out = tkreg.ops, []
    for m in ms:
        for n, k in weights:
            sets = rotations(lambda: quantized(m, n, k), m * k + n * k + 2 * m * n)
            fns = [lambda qa, sa, qb, sb, c=c: tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=c) for c in cfgs]
            fns += [lambda qa, sa, qb, sb: ops.fp8_gemm(qa, sa, qb, sb)]
            t = queued_ms_paired(fns, sets, reps=50, runs=5) + [queued_ms(lambda s, d: d.copy_(s), copy_sets(n * k))]
            names = [f"cfg{c}" for c in cfgs] + ["shipped", "copy"]
            out.append(dict(shape=[m, n, k], gbs={a: n * k / v / 1e6 for a, v in zip(names, t)}))
            print(out[-1]["shape"], " ".join(f"{a}:{v:.0f}" for a, v in out[-1]["gbs"].items()), flush=True)
            del sets
    return out
