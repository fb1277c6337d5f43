"""Sweep pack + runner: CTA rasterization of the quant family's 2-D grids (kernels_src/_grid.py).
Every kernel here puts row blocks on grid x, so the ~500-700 CTAs resident at once each read a
128-512-byte piece of as many different rows; kernels_src/fp8.py measured column blocks first 4-8%
faster for its group quant.
cfg (raster, kernels_src/_grid.py): 0 "rows" (shipped, byte for byte)   1 "flat" (one index, column
              blocks fastest; round 1 called it "cols", which _grid.py now names the 2-D kind)
              2 "g8" / 3 "g16" (groups of 8 / 16 column blocks, row blocks down each group) where listed
              (no longer in _grid.py: build this sweep against `git show 5181a12:kernels_src/_grid.py`)
Every cfg bit for bit against cfg 0 (odd M, M = 0, a narrow last group), then timed in turn in
ONE process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/raster.py --namespace sw --arch sm_90a \\
      --out .ab/raster/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 raster.py OUT.json
"""
import json
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Variant  # noqa: E402

FLAT = [dict(raster="rows"), dict(raster="flat")]
# sweep op: (tkreg op, the shipped variant's params (dtype picks it), rule, cfgs).  Round 1 had the
# flat decode cost the per-channel kernels 5-8 registers and a CTA an SM (64 -> 72: 0.87 -> 0.60 of
# copy), so round 2 holds them to the shipped occupancy with minb; g8 / g16 were no better than cols.
OPS = {
    "sw.pc": ("tkreg.per_channel_quant_fp8", dict(dtype="bfloat16"), "K % 8 == 0",
              [dict(raster="rows"), dict(raster="flat", minb=2), dict(raster="g8", minb=2)]),
    "sw.pct": ("tkreg.per_channel_quant_fp8_transpose", dict(dtype="bfloat16"), "K % 8 == 0",
               [dict(raster="rows"), dict(raster="flat", minb=5), dict(raster="g8", minb=5)]),
    "sw.tr1": ("tkreg.batched_transpose", dict(dtype="uint8", rows=8, cols=16),
               "B <= 65535 and M % 8 == 0 and N % 16 == 0", [dict(raster="rows"), dict(raster="g8")]),
    "sw.bwd": ("tkreg.silu_and_mul_backward_quant_fp8", dict(dtype="bfloat16", fsilu=1), "N % 256 == 0",
               FLAT + [dict(raster="flat", minb=8)]),
    "sw.fp4d": ("tkreg.per_token_group_dequant_fp4", dict(cs=1), "H % 16 == 0", FLAT),
    "sw.pcd": ("tkreg.per_channel_dequant_fp8", dict(layout="channel", unroll=4), "C % 8 == 0", FLAT),
    "sw.gd": ("tkreg.group_dequant_fp8", dict(layout="group"), "C % 8 == 0", FLAT),
    "sw.e5d": ("tkreg.dequant_e5m6", {}, "P % 12 == 0", FLAT),
}


def _sweep(Q, new, name, base, rule, cfgs):
    spec = next(s for s in Q.SPECS if s.name == name)
    t0 = spec.tensors[0]
    if "dtype" in base and len(t0.dtypes or ()) > 1:      # one input dtype: the cfg's
        t0 = type(t0)(t0.name, t0.shape, dtypes=(base["dtype"],))
    return OpSpec(name=new, doc=spec.doc, tensors=(t0,) + spec.tensors[1:],
                  scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=spec.factory,
                  variants=tuple(Variant(dict(base, **c), rule=f"cfg == {i} and {rule}")
                                 for i, c in enumerate(cfgs)),
                  archs=("sm_90a",), reference=spec.reference)


def specs():
    from kernels_src import quant as Q
    return tuple(_sweep(Q, new, *v) for new, v in OPS.items())


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.contiguous().view(torch.int32) \
        if t.dtype.itemsize == 4 else t.view(torch.int16)


def _inputs(op, m, k):
    """Inputs for an [m, k]-shaped case (k: the channel / column count of the bf16 side), and the
    bytes the op moves."""
    bf = dict(dtype=torch.bfloat16, device="cuda")
    sm = -(-m // 128)
    if op in ("sw.pc", "sw.pct"):
        return (torch.randn(m, k, **bf) * 3,), 3 * m * k + 4 * sm * k
    if op == "sw.sct":
        return (torch.randn(m, 2 * k, **bf) * 3,), 5 * m * k + 4 * sm * k
    if op == "sw.tr1":
        return (torch.randint(0, 256, (1, m, k), dtype=torch.uint8, device="cuda"),), 2 * m * k
    if op == "sw.tr2":
        b = 32 if m == 2048 else 1
        return (torch.randn(b, m, k, device="cuda").half(),), 4 * b * m * k
    if op == "sw.bwd":
        return (torch.randn(m, k, **bf), torch.randn(m, 2 * k, **bf) * 3), 8 * m * k + 8 * m * k // 128
    if op == "sw.fp4d":
        return (torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, device="cuda"),
                torch.randint(110, 140, (m, k // 32), dtype=torch.uint8, device="cuda")), m * k // 2 + m * k // 32 + 2 * m * k
    if op == "sw.gd":
        return ((torch.randn(m, k, device="cuda") * 50).to(torch.float8_e4m3fn),
                torch.rand(m, -(-k // 128), device="cuda") + 0.5), 3 * m * k + 4 * m * k // 128
    if op == "sw.pcd":
        return ((torch.randn(m, k, device="cuda") * 50).to(torch.float8_e4m3fn),
                torch.rand(sm, k, device="cuda") + 0.5), 3 * m * k + 4 * sm * k
    if op == "sw.e5d":
        return (torch.randint(0, 256, (m, k * 3 // 2), dtype=torch.uint8, device="cuda"),
                torch.rand(m, device="cuda") + 0.5), 3 * m * k // 2 + 2 * m * k
    raise KeyError(op)


def _call(op, args, c):
    import tkreg
    if op in ("sw.tr1", "sw.tr2", "sw.fp4d", "sw.pcd", "sw.gd", "sw.e5d"):
        return tkreg.call(op, *args, cfg=c)
    return tkreg.call(op, *args, ue8m0=False, cfg=c)


def run(out: str):
    global torch
    import torch
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for op, (_, _, _, rasters) in OPS.items():
        # 1408 / 7168 channels: 11 / 56 column blocks at 128, so g8 and g16 end on a narrow group
        for m, k in ((1, 256), (37, 1408), (200, 7168), (4097, 1408), (1032, 7168), (0, 256)):
            if op.startswith("sw.tr"):     # the aligned transpose: M % 8 == 0
                m = -(-m // 8) * 8
            args, _ = _inputs(op, m, k)
            want = _call(op, args, 0)
            want = want if isinstance(want, tuple) else (want,)
            for c in range(1, len(rasters)):
                got = _call(op, args, c)
                got = got if isinstance(got, tuple) else (got,)
                res["checks"].append(dict(op=op, m=m, k=k, cfg=c,
                                          d=sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got, want))))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    shapes = {"sw.sct": ((16384, 2048), (16384, 4096), (4096, 7168)),
              "sw.bwd": ((16384, 2048), (16384, 4096)),
              "sw.tr2": ((16384, 7168), (8192, 16384), (2048, 7168))}
    for op, (_, _, _, rasters) in OPS.items():
        for m, k in shapes.get(op, ((16384, 7168), (8192, 16384), (4096, 7168))):
            args, nbytes = _inputs(op, m, k)
            del args
            sets = rotations(lambda: _inputs(op, m, k)[0], nbytes)
            fns = [lambda *a, c=c: _call(op, a, c) for c in range(len(rasters))]
            ms = queued_ms_paired(fns, sets, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            names = [f"cfg{c}" for c in range(len(rasters))]
            row = dict(op=op, shape=[m, k], of_copy={r: copy / t for r, t in zip(names, ms)},
                       gbs={r: nbytes / t / 1e6 for r, t in zip(names, ms)}, copy_ms=copy)
            res["rows"].append(row)
            print(op, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
