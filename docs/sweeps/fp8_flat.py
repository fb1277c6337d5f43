"""Sweep pack + runner: the FP8 family's group quants and dequants on one flat grid (column blocks
fastest, any M: kernels_src/_grid.py "flat") instead of the shipped pair of a 2-D column-blocks-first
kernel (at most 65535 row blocks) and its rows-first fallback -- one cubin an op and dtype instead
of two, if the flat one is as fast.
Each sw.<op> is the shipped spec's bf16 variants with grid = "flat", the fallback dropped and the
row-block cap lifted; it is checked bit for bit against the shipped op, then both are timed in turn
in ONE process beside a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/fp8_flat.py --namespace sw --arch sm_90a \\
      --out .ab/fp8flat/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 fp8_flat.py OUT.json
Result (2026-12-03, H200, /work/.device/17): the flat grid lost 2-10% on the group quants, so the
shipped pair stays (docs/quant-tuning.md).
"""
import json
import pathlib
import re
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Variant  # noqa: E402

OPS = ("per_token_group_quant_fp8", "per_token_group_quant_fp8_colmajor", "silu_and_mul_quant_fp8",
       "silu_and_mul_quant_fp8_colmajor", "per_token_group_dequant", "per_block_dequant")


def specs():
    from kernels_src import fp8 as F
    out = []
    for name in OPS:
        spec = next(s for s in F.SPECS if s.name == f"tkreg.{name}")
        t0 = spec.tensors[0]
        x = type(t0)(t0.name, t0.shape, dtypes=("bfloat16",)) if len(t0.dtypes or ()) > 1 else t0
        vs = [Variant(dict(v.params, grid="flat"), rule=re.sub(r" and \w+ <= \d+$", "", v.rule), priority=v.priority)
              for v in spec.variants if dict(v.params).get("grid") != "rows" and dict(v.params).get("dtype", "bfloat16") == "bfloat16"]
        out.append(OpSpec(name=f"sw.{name}", doc=spec.doc, tensors=(x,) + spec.tensors[1:], scalars=spec.scalars,
                          factory=spec.factory, variants=tuple(vs), archs=("sm_90a",), reference=spec.reference))
    return tuple(out)


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.contiguous().view(torch.int16) \
        if t.dtype.itemsize == 2 else t.contiguous().view(torch.int32)


def _args(name, m, k):
    """Inputs for an [m, k] case (k: the quantized width) and the bytes the op moves."""
    bf = dict(dtype=torch.bfloat16, device="cuda")
    if name.startswith("silu"):
        return (torch.randn(m, 2 * k, **bf) * 3,), 4 * m * k + m * k + 4 * m * k // 128
    if name.startswith("per_token_group_quant"):
        return (torch.randn(m, k, **bf) * 3,), 3 * m * k + 4 * m * k // 128
    q = (torch.randn(m, k, device="cuda") * 50).to(torch.float8_e4m3fn)
    if name == "per_token_group_dequant":
        return (q, torch.rand(m, k // 128, device="cuda") + 0.5), 3 * m * k + 4 * m * k // 128
    return (q, torch.rand(-(-m // 128), -(-k // 128), device="cuda") + 0.5), 3 * m * k


def run(out: str):
    global torch
    import torch
    import tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for name in OPS:
        for m, k in ((1, 256), (37, 1408), (4097, 1408), (1032, 7168), (3000, 5120), (0, 256)):
            args, _ = _args(name, m, k)
            want, got = tkreg.call(f"tkreg.{name}", *args), tkreg.call(f"sw.{name}", *args)
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            res["checks"].append(dict(op=name, m=m, k=k, d=sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got, want))))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    for name in OPS:
        for m, k in ((16384, 7168), (4096, 7168), (2048, 5120), (1024, 4096), (3000, 7168)):
            _, nbytes = _args(name, m, k)
            sets = rotations(lambda: _args(name, m, k)[0], nbytes)
            ms = queued_ms_paired([lambda *a: tkreg.call(f"tkreg.{name}", *a), lambda *a: tkreg.call(f"sw.{name}", *a)],
                                  sets, reps=30, runs=5)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            row = dict(op=name, shape=[m, k], of_copy={"shipped": copy / ms[0], "flat": copy / ms[1]}, copy_ms=copy)
            res["rows"].append(row)
            print(name, row["shape"], " ".join(f"{n}:{v:.3f}" for n, v in row["of_copy"].items()), flush=True)
            del sets
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
