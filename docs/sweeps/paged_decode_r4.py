"""Sweep pack + runner (28th session): paged decode at batch 1 x 32k (issue #14: >= 85% of copy; shipped
69-75%), fewer consumer warps a CTA and more CTAs a SM.  ncu of the shipped kernel (docs/attention-tuning.md,
rounds 7-8): issue slots 22% busy, 9.5 warps a SM, stalls on barriers and scoreboards: each 64-token
iteration passes several 128-thread barriers (QK^T split over 4 warps along N, the row max and sum across
warps, P through shared memory), so one CTA's iterations are a latency chain, and at batch 1 only two
CTAs a SM stream.  Here one or two consumer warps a CTA (no cross-warp reduction with one) on smaller
rings, 3-6 CTAs a SM (`waves`: the split count assumes that many resident CTAs).
cfg: (threads, block_N, stages, waves); d128 bf16; block_N = 32 only serves page 16.
Every cfg compared with the shipped op (batch 1 / 64; seq_lens 0, 4097, 1, 777 at 1-100 splits), then
timed in turn in one process at batch 1 x 16k / 32k, batch 4 x 32k and batch 64 x 4k.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/paged_decode_r4.py --namespace sw --arch sm_90a \\
      --out .ab/pd4/pack --cache build/cache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 /path/to/paged_decode_r4.py OUT.json
Results (2026-12-05, H200, one process, 7 paired runs; 215 checks within 3e-3 of the shipped op, lse
and empty sequences alike), % of copy bandwidth over the KV bytes, page 16:
  cfg             1 x 32k  1 x 16k  4 x 32k  64 x 4k
  0 (128,64,3,2)   73.8     58.0     95.0    100.4   (shipped)
  1 (32,64,3,2)    35.3     21.0     72.4     89.3
  3 (64,64,2,3)    59.0     40.0     90.2     93.1
  4 (128,64,2,3)   71.7     54.8     94.8     90.5
  7 (32,32,2,6)    24.4     14.9     51.3     82.5
  8 (64,32,3,4)    56.7     38.1     89.8     97.8
  10 (128,32,3,4)  54.3     41.6     70.5     76.4
(page 64 alike).  One or two consumer warps a CTA lose everywhere, up to 3x at batch 1: the MMA and
softmax work of an iteration on fewer warps is the longer chain, and more CTAs a SM do not make it up.
The shipped kernel's batch 1 times, 42.7 µs at 32k and 27.2 µs at 16k, put its marginal rate at 102%
of copy (15.5 µs per 67 MB, as the device copy's 34.5 / 19.0 µs) and its fixed cost at 11.7 µs against
the copy's 3.5: 85% at 32k (37.3 µs) needs that fixed cost at or below ~6 µs.  Nothing shipped.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from kernels_src import paged_attention as P  # noqa: E402
from paged_decode_r3 import inputs  # noqa: E402  (this folder is on sys.path: the script's own)
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

# (threads, block_N, stages, waves)
CFGS = [(128, 64, 3, 2),                                  # shipped
        (32, 64, 3, 2), (32, 64, 2, 3), (64, 64, 2, 3), (128, 64, 2, 3),
        (32, 32, 4, 3), (32, 32, 3, 4), (32, 32, 2, 6), (64, 32, 3, 4), (64, 32, 2, 6), (128, 32, 3, 4)]


def _ok(cfg, ps):
    return cfg[1] % ps == 0


spec = P.SPECS[0]
q = spec.tensors[0]
SPECS = (OpSpec(name="sw.paged_decode_attention", doc=spec.doc,
                tensors=(Tensor(q.name, q.shape, dtypes=("bfloat16",), strides=q.strides),) + spec.tensors[1:],
                scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=P.decode_kernel,
                variants=tuple(Variant(dict(D=128, dtype="bfloat16", page_size=ps, threads=t, block_N=bn, stages=st,
                                            waves=w),
                                       rule=f"cfg == {i} and {spec.variants[0].rule}", pass_configs=P.PASS_CONFIGS)
                               for i, (t, bn, st, w) in enumerate(CFGS) for ps in P.PAGE_SIZES if bn % ps == 0),
                archs=("sm_90a",), reference=spec.reference, index64=True),)


def run(out: str):
    import torch
    import tkreg
    from tkreg.bench.timing import copy_bandwidth, copy_ms, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for b, ctx, ps, lens in ((1, 32768, 16, None), (1, 32768, 64, None), (64, 4096, 16, None),
                             (4, 4097, 16, [0, 4097, 1, 777]), (4, 4097, 64, [0, 4097, 1, 777])):
        x = inputs(b, ctx, ps, lens)
        for ns in (0, 1, 7, 33, 100):
            ref_o, ref_l = tkreg.call("tkreg.paged_decode_attention", *x, num_splits=ns)
            for c, cfg in enumerate(CFGS):
                if not _ok(cfg, ps):
                    continue
                o, lse = tkreg.call("sw.paged_decode_attention", *x, num_splits=ns, cfg=c)
                err = float((o.float() - ref_o.float()).norm() / ref_o.float().norm().clamp_min(1e-30))
                fin = torch.isfinite(ref_l)
                lerr = float((lse[fin] - ref_l[fin]).abs().max()) if fin.any() else 0.0
                same_inf = bool(torch.equal(torch.isfinite(lse), fin))
                res["checks"].append(dict(b=b, ps=ps, ns=ns, cfg=c, rel=err, lse=lerr, inf_ok=same_inf,
                                          nan=bool(o.isnan().any())))
    bad = [c for c in res["checks"] if c["rel"] > 1e-2 or c["lse"] > 1e-2 or c["nan"] or not c["inf_ok"]]
    print("checks", len(res["checks"]), "worst", max(c["rel"] for c in res["checks"]), "bad", bad[:8], flush=True)
    bw = copy_bandwidth()
    for b, ctx in ((1, 32768), (1, 16384), (4, 32768), (64, 4096)):
        kv = 2 * b * ctx * 8 * 128 * 2
        for ps in P.PAGE_SIZES:
            sets = rotations(lambda: inputs(b, ctx, ps), kv)
            cs = [c for c, cfg in enumerate(CFGS) if _ok(cfg, ps)]
            fns = [lambda *x, c=c: tkreg.call("sw.paged_decode_attention", *x, cfg=c) for c in cs]
            ms = queued_ms_paired(fns, sets, reps=30, runs=7)
            t_copy = copy_ms(kv, queued_ms)
            row = dict(b=b, ctx=ctx, ps=ps, copy_us=t_copy * 1e3,
                       us={f"cfg{c}": t * 1e3 for c, t in zip(cs, ms)},
                       pct={f"cfg{c}": kv / t / 1e6 / bw * 100 for c, t in zip(cs, ms)})
            res["rows"].append(row)
            print(b, ctx, ps, f"copy {t_copy * 1e3:.1f}us", " ".join(f"{k}:{v:.1f}" for k, v in row["pct"].items()),
                  flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
