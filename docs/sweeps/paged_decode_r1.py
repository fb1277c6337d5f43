"""Sweep pack: paged decode at batch 1 (issue #14's bar: >= 85% of copy at 1 x 32768; shipped 70-72%,
no better with any split count: the split count is a run-time scalar, swept in
docs/sweeps/attention_r2_run.py).  cfg scalar; d128, bf16, page sizes 16 and 64 each:
  0 = shipped (64 tokens an iteration, 3 stages, 2 CTAs a SM, 4 consumer warps)
  1 = shipped + fast math (ex2.approx)
  2 = 8 consumer warps (the QK^T / P V tiles split over twice the warps)
  3 = 3 CTAs a SM, 2 stages
  4 = 1 CTA a SM, 4 stages, 8 consumer warps (128 tokens an iteration with 8 warps does not lower:
      tilelang's ReduceOp rejects the layout)
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/paged_decode_r1.py --namespace sw --arch sm_90a \\
      --out .ab/pd/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack python3 docs/sweeps/paged_decode_r1.py OUT.json`.
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from kernels_src import paged_attention as P  # noqa: E402
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

BASE = dict(P.TILES[128], D=128, dtype="bfloat16")
CFGS = [({}, {}), ({}, {"tl.enable_fast_math": True}), (dict(threads=256), {}), (dict(stages=2, waves=3), {}),
        (dict(stages=4, waves=1, threads=256), {})]


def factory(cfg: int, arch: str = "sm_90a", **kw):   # cfg: in the variant key (0 / 1 differ only in pass configs)
    return P.decode_kernel(**kw)


spec = P.SPECS[0]
q = spec.tensors[0]
SPECS = (OpSpec(name="sw.paged_decode_attention", doc=spec.doc,
                tensors=(Tensor(q.name, q.shape, dtypes=("bfloat16",), strides=q.strides),) + spec.tensors[1:],
                scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=factory,
                variants=tuple(Variant(dict(BASE, page_size=ps, cfg=i, **kw), rule=f"cfg == {i} and {spec.variants[0].rule}",
                                       pass_configs=dict(P.PASS_CONFIGS, **pc))
                               for i, (kw, pc) in enumerate(CFGS) for ps in P.PAGE_SIZES),
                archs=("sm_90a",), reference=spec.reference, index64=True),)


def run(out: str):
    import torch, tkreg
    from tkreg.bench.timing import copy_bandwidth, queued_ms
    bw, rows = copy_bandwidth(), []
    for b, ctx in ((1, 32768), (64, 4096)):
        for ps in P.PAGE_SIZES:
            hq, hk, d = 32, 8, 128
            npg = b * ctx // ps
            def make():
                kc, vc = (torch.randn(npg, ps, hk, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
                bt = torch.randperm(npg, device="cuda", dtype=torch.int32).view(b, ctx // ps)
                sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
                return torch.randn(b, hq, d, dtype=torch.bfloat16, device="cuda"), kc, vc, bt, sl
            sets = [make() for _ in range(4)]
            want = tkreg.ops.paged_decode_attention(*sets[0])
            for cfg in range(len(CFGS)):
                f = lambda q, kc, vc, bt, sl: tkreg.call("sw.paged_decode_attention", q, kc, vc, bt, sl, cfg=cfg)
                got = f(*sets[0])
                t = queued_ms(f, sets, reps=50 if b == 1 else 10)
                row = dict(b=b, ctx=ctx, ps=ps, cfg=cfg, us=t * 1e3, pct=2 * b * ctx * hk * d * 2 / t / 1e6 / bw * 100,
                           rel=float((got[0].float() - want[0].float()).norm() / want[0].float().norm()))
                rows.append(row)
                print(json.dumps(row), flush=True)
    json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
