"""Sweep pack + runner: the tile kernels' shapes -- the 1-byte transpose at 16 rows a lane (16-byte
stores, 256 bytes of each output row a CTA, as the 2-byte kernel writes), per-channel FP8 at 64 / 32
channels a CTA (more, smaller CTAs an SM), and per_channel_quant_fp8_transpose on the shared-memory
q^T tile kernel (channel_quant_kernel(transpose=1)) instead of the warp-local one, and E5M6 quant at
K = 16384 by CTA shape (one CTA a row).
cfg 0: the kernel shipped when it ran (the pack was built at 3a6112f: per_channel_quant_fp8_transpose's
cfg 0 is the warp-local kernel that `git show 3a6112f:kernels_src/quant.py` has; the SwiGLU op's the
two-slab form); then the factory parameters listed in OPS.  Results: docs/quant-tuning.md.
Every cfg bit for bit against cfg 0 (odd M, M = 0, ragged K, UE8M0), then timed in turn in ONE
process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/tile2.py --namespace sw --arch sm_90a \\
      --out .ab/tile2/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 tile2.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

# sweep op: (tkreg op, rule, cfgs); a cfg: the factory's parameters (cfg 0: the shipped variant's;
# "f": "c" builds it with channel_quant_kernel, the smem q^T tile, instead of the shipped factory)
OPS = {
    "sw.pc": ("tkreg.per_channel_quant_fp8", "K % 8 == 0",
              [{}, dict(cw=64, minb=4), dict(cw=32, minb=8), dict(cw=64, minb=4, cs=1), dict(cw=32, minb=8, cs=1)]),
    "sw.pct": ("tkreg.per_channel_quant_fp8_transpose", "K % 8 == 0",
               [{}, dict(f="c", transpose=1, cw=64), dict(f="c", transpose=1, cw=64, minb=4, cs=1),
                dict(f="c", transpose=1, cw=32, minb=8), dict(f="c", transpose=1, cw=32, minb=8, cs=1)]),
    "sw.sct": ("tkreg.silu_and_mul_per_channel_quant_fp8_transpose", "N % 16 == 0",
               [dict(silu=1, transpose=1, cw=64, ns=2, cs=1, minb=2, fsilu=1),
                dict(silu=1, transpose=1, cw=32, ns=2, cs=1, minb=4, fsilu=1),
                dict(silu=1, transpose=1, cw=64, cs=1, minb=4, fsilu=1),
                dict(silu=1, transpose=1, cw=32, cs=1, minb=8, fsilu=1)]),
    "sw.e5q": ("tkreg.quant_e5m6", "K % 8 == 0 and K <= 16384",
               [dict(threads=512, vecs=4), dict(threads=128, vecs=16), dict(threads=256, vecs=8)]),
}
# Round 1 (/work/.device/8): the 1-byte transpose at 16 rows a lane (128 / 256 / 512 threads) was no
# faster (0.79-0.86 against 0.83-0.88), so it left OPS; per-channel at 64 channels a CTA held to 64
# registers (4 CTAs/SM) +1-5%, and per_channel_quant_fp8_transpose on the smem q^T tile at 64
# channels +6-10%: round 2 (these OPS) tries 32 channels and evict-first stores beside them.


def _factory(shipped):
    def factory(dtype, **kw):
        from kernels_src import quant as Q
        kw.pop("arch", None)
        if kw.pop("f", None) == "c":
            return Q.channel_quant_kernel(dtype, **kw)
        return shipped(dtype, **kw)
    return factory


def specs():
    from kernels_src import quant as Q
    out = []
    for new, (name, rule, cfgs) in OPS.items():
        spec = next(s for s in Q.SPECS if s.name == name)
        t0 = spec.tensors[0]
        dt = "uint8" if op_is_transpose(new) else "bfloat16"
        x = type(t0)(t0.name, t0.shape, dtypes=(dt,))
        out.append(OpSpec(
            name=new, doc=spec.doc, tensors=(x,) + spec.tensors[1:],
            scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=_factory(spec.factory),
            variants=tuple(Variant(dict(c, dtype=dt), rule=f"cfg == {i} and {rule}") for i, c in enumerate(cfgs)),
            archs=("sm_90a",), reference=spec.reference))
    return tuple(out)


def op_is_transpose(op):
    return op == "sw.tr1"


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.contiguous().view(torch.int32)


def _x(op, m, k):
    if op_is_transpose(op):
        return torch.randint(0, 256, (1, m, k), dtype=torch.uint8, device="cuda")
    return torch.randn(m, 2 * k if op == "sw.sct" else k, dtype=torch.bfloat16, device="cuda") * 3


def run(out: str):
    global torch
    import torch
    import tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for op, (_, _, cfgs) in OPS.items():
        for m, k in ((1, 256), (37, 1408), (200, 7168), (4097, 1408), (1032, 7168), (300, 1096), (0, 256)):
            if op_is_transpose(op):               # the aligned kernel: M % 16 == 0
                m, k = -(-m // 16) * 16, -(-k // 16) * 16
            x = _x(op, m, k)
            for ue in ((None,) if op_is_transpose(op) else (False, True)):
                kw = {} if ue is None else dict(ue8m0=ue)
                want = tkreg.call(op, x, cfg=0, **kw)
                want = want if isinstance(want, tuple) else (want,)
                for c in range(1, len(cfgs)):
                    got = tkreg.call(op, x, cfg=c, **kw)
                    got = got if isinstance(got, tuple) else (got,)
                    res["checks"].append(dict(op=op, m=m, k=k, ue=ue, cfg=c,
                                              d=sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got, want))))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    for op, (_, _, cfgs) in OPS.items():
        for m, k in (((8192, 16384), (4096, 16384), (16384, 16384)) if op == "sw.e5q" else
                     ((16384, 2048), (16384, 4096), (4096, 7168), (2048, 7168)) if op == "sw.sct" else
                     ((16384, 7168), (8192, 16384), (4096, 7168), (2048, 7168))):
            nbytes = (2 * m * k if op_is_transpose(op) else 7 * m * k // 2 + 4 * m if op == "sw.e5q"
                      else (5 if op == "sw.sct" else 3) * m * k + 4 * (-(-m // 128)) * k)
            sets = rotations(lambda: (_x(op, m, k),), nbytes)
            fns = [lambda *a, c=c: tkreg.call(op, *a, cfg=c) for c in range(len(cfgs))]
            ms = queued_ms_paired(fns, sets, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            names = [f"cfg{c}" for c in range(len(cfgs))]
            row = dict(op=op, shape=[m, k], of_copy={n: copy / t for n, t in zip(names, ms)},
                       gbs={n: nbytes / t / 1e6 for n, t in zip(names, ms)}, copy_ms=copy)
            res["rows"].append(row)
            print(op, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
