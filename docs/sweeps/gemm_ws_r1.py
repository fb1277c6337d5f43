"""Sweep pack + runner: the hand-written warp-specialized persistent bf16 GEMM (kernels_src/gemm_ws.py)
beside the shipped tkreg.gemm (tilelang's pipelined T.gemm, picked by shape class) and cuBLAS
(torch.matmul), issue #13's prefill and mid shapes.  cfg scalar (bias and no-bias variants each):
  0 = 128x256x64, 4 stages, 128-column epilogue chunks, panel 10
  1 = 3 stages, one 256-column epilogue chunk
  2 = 4 stages, 64-column chunks
  3 = panel 16
  4 = panel 4
  5 = 128x128x64, 6 stages (mid shapes)
  6 = 192x128x64, three consumers at 160 registers, 4 stages
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/gemm_ws_r1.py --namespace sw --arch sm_90a \\
      --out .ab/gws/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo; one process per cfg, so a hang costs one timeout):
  TKREG_PACKS=pack python3 gemm_ws_r1.py OUT.json
"""
import json
import pathlib
import subprocess
import sys
import time

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

BASE = dict(block_M=128, block_N=256, block_K=64, stages=4, epi=128, panel=10)
CFGS = [BASE, dict(BASE, stages=3, epi=256), dict(BASE, epi=64), dict(BASE, panel=16), dict(BASE, panel=4),
        dict(BASE, block_N=128, stages=6), dict(BASE, block_M=192, block_N=128, consumer_regs=160, producer_regs=24)]
PREFILL = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096), (4096, 4096, 14336)]
MID = [(m, n, k) for m in (128, 256, 512, 1024, 2048) for n, k in ((8192, 8192), (7168, 2048), (4096, 14336))]
CHECKS = [(1, 8, 8), (37, 264, 72), (300, 7168, 2056), (129, 520, 4096), (1000, 1000, 1000)]


def factory(cfg: int, arch: str = "sm_90a", **kw):   # cfg: in the variant key only
    from kernels_src.gemm import ws_kernel
    return ws_kernel(**kw)


def make_specs(cfgs):
    from kernels_src import gemm as G
    from kernels_src.gemm_ws import PASS_CONFIGS
    spec = G.SPECS[0]
    a = spec.tensors[0]
    return (OpSpec(name="sw.gemm", doc=spec.doc, tensors=(Tensor(a.name, a.shape, dtypes=("bfloat16",)),) + spec.tensors[1:], scalars=(Scalar("cfg", "int32", 0),),
                   factory=factory,
                   variants=tuple(Variant(dict(c, cfg=i, bias=b, dtype="bfloat16"),
                                          rule=f"cfg == {i} and {'' if b else 'not '}has_bias", pass_configs=PASS_CONFIGS)
                                  for i, c in enumerate(cfgs) for b in (False, True)),
                   archs=("sm_90a",), reference=spec.reference),)


SPECS = make_specs(CFGS)


def checks(cfg: int) -> list:
    """Relative error against the float64 product (with and without bias) on odd shapes."""
    import torch, tkreg
    bf, rows = torch.bfloat16, []
    torch.manual_seed(cfg)
    for m, n, k in CHECKS:
        a, b, bias = torch.randn(m, k, dtype=bf, device="cuda"), torch.randn(n, k, dtype=bf, device="cuda"), \
            torch.randn(n, dtype=bf, device="cuda")
        for bb in (None, bias):
            got = tkreg.call("sw.gemm", a, b, bb, cfg=cfg) if bb is not None else tkreg.call("sw.gemm", a, b, cfg=cfg)
            ref = a.double() @ b.double().t() + (bb.double() if bb is not None else 0)
            rel = float((got.double() - ref).norm() / ref.norm())
            rows.append(dict(check=[m, n, k], bias=bb is not None, rel=rel, nan=bool(got.isnan().any())))
            print(cfg, rows[-1], flush=True)
    return rows


def child(cfg: int) -> list:
    import torch, tkreg
    from tkreg.bench.timing import queued_ms, rotations
    bf, rows = torch.bfloat16, checks(cfg)
    for m, n, k in PREFILL + MID:
        sets = rotations(lambda: (torch.randn(m, k, dtype=bf, device="cuda"), torch.randn(n, k, dtype=bf, device="cuda")),
                         2 * (m * k + n * k + m * n))
        a, b = sets[0]
        o = tkreg.call("sw.gemm", a, b, cfg=cfg)
        ref = tkreg.ops.gemm(a, b)
        r = max(5, min(50, int(2e13 / (2 * m * n * k))))
        t = queued_ms(lambda a, b: tkreg.call("sw.gemm", a, b, cfg=cfg), sets, reps=r)
        row = dict(shape=[m, n, k], ms=t, tflops=2 * m * n * k / t / 1e9,
                   rel_vs_shipped=float((o.float() - ref.float()).norm() / ref.float().norm()),
                   bitdiff_vs_shipped=int((o.view(torch.int16) != ref.view(torch.int16)).sum()))
        if cfg == 0:
            row["cublas_ms"] = queued_ms(lambda a, b: torch.matmul(a, b.t()), sets, reps=r)
            row["shipped_ms"] = queued_ms(lambda a, b: tkreg.ops.gemm(a, b), sets, reps=r)
            row["shipped_class"] = str(tkreg.explain("tkreg.gemm", a, b))[:160]
        rows.append(row)
        print(cfg, {k_: (round(v, 4) if isinstance(v, float) else v) for k_, v in row.items()}, flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows


def main(script: str, ncfg: int):
    """The runner: `script OUT.json [cfg,...]`, each cfg in a child process of `script`."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(int(sys.argv[2]))), flush=True)
        sys.exit(0)
    out, res = sys.argv[1], {"runs": []}
    cfgs = [int(c) for c in sys.argv[2].split(",")] if len(sys.argv) > 2 else range(ncfg)
    for cfg in cfgs:
        t = time.time()
        try:
            p = subprocess.run([sys.executable, script, "--child", str(cfg)], capture_output=True, text=True, timeout=150)
            got = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            res["runs"].append(dict(cfg=cfg, rc=p.returncode, secs=round(time.time() - t, 1),
                                    rows=json.loads(got[0][7:]) if got else None,
                                    err="" if got else (p.stdout[-1500:] + p.stderr[-1500:])))
        except subprocess.TimeoutExpired as e:
            res["runs"].append(dict(cfg=cfg, rc="timeout", secs=150, err=str(e.stdout)[-1500:] if e.stdout else ""))
        r = res["runs"][-1]
        print(cfg, r["rc"], r["secs"], "s", [round(x["tflops"]) for x in r.get("rows") or [] if "tflops" in x], flush=True)
        json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(__file__, len(CFGS))
