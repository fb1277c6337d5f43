"""Sweep pack + runner, flash attention round 11 (28th session): the persistent kernel's work order.
Every bench shape has 4096 row-block pairs (8 x 4096 and 2 x 16384 at HQ = 32) for 132 CTAs: 31.03 a
CTA, so four CTAs take a 32nd pair while 128 idle, 3.0% of the run (simulated: 0.970 of ideal).
`order` (kernels_src/attention_ws.py `locate_sorted`): single row blocks, heaviest first, dealt to the
CTAs forwards then backwards in turn (causal costs even out: 0.9996 simulated; non-causal 0.985), in
groups of `order` heads (h fastest) so the CTAs running at once still share K/V through L2 (the pair
order has ~8 heads in flight; a full sort ~132).
cfg 0-3: d128 shipped (pairs), order 8 / 16 / all; 4-5: d64 two consumers (causal, 4k keys) shipped /
order 16; 6-7: d64 three consumers shipped / order 16.
Checks: odd shapes against the fp32 reference, then every timed shape against the shipped op; then
timed in turn (queued_ms_paired) beside SDPA cuDNN in ONE process.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r11.py --namespace sw --arch sm_90a \\
      --out .ab/attn11/pack --cache build/cache -j 2
Run (cwd outside the repo): TKREG_PACKS=pack python3 /path/to/attention_r11.py OUT.json
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_r2 import W, sweep_spec  # noqa: E402

D128 = dict(dim=128, varlen=False, block_N=128, stages=2, persistent=True, tree=8)
D64 = dict(D128, dim=64, lazy=8)
C3 = dict(D64, consumers=3, lazy=0)
KW = [D128, dict(D128, order=8), dict(D128, order=16), dict(D128, order=4096),
      D64, dict(D64, order=16), C3, dict(C3, order=16)]
SPECS = (sweep_spec([("ws", kw, W.PASS_CONFIGS) for kw in KW]),)
# (D, B, S, HQ, HK, causal): cfgs
TIMED = [((128, 8, 4096, 32, 8, False), (0, 1, 2, 3)), ((128, 8, 4096, 32, 8, True), (0, 1, 2, 3)),
         ((128, 8, 4096, 32, 32, True), (0, 1, 2, 3)), ((128, 2, 16384, 32, 8, False), (0, 1, 2, 3)),
         ((128, 2, 16384, 32, 8, True), (0, 1, 2, 3)), ((128, 2, 16384, 32, 32, False), (0, 1, 2, 3)),
         ((64, 8, 4096, 32, 8, True), (4, 5)), ((64, 8, 4096, 32, 8, False), (6, 7)),
         ((64, 2, 16384, 32, 8, True), (6, 7))]
CHECKS = [(b, sq, sk, hq, hk, c) for b, sq, sk, hq, hk in ((1, 17, 17, 4, 2), (2, 4095, 4095, 4, 2), (1, 1000, 3000, 6, 2),
                                                          (3, 300, 129, 5, 5), (1, 1, 700, 4, 1), (2, 2000, 2000, 33, 11))
          for c in (False, True)]


def run(out: str):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import tkreg
    from tkreg.bench.timing import queued_ms_paired
    from tkreg.reference.attention import flash_attention as ref
    bf, res = torch.bfloat16, {"checks": [], "rows": []}
    torch.manual_seed(0)
    call = lambda c, q, k, v, causal: tkreg.call("sw.flash_attention", q, k, v, causal=causal, cfg=c)
    for d, cfgs in ((128, (0, 1, 2, 3)), (64, (4, 5, 6, 7))):
        for b, sq, sk, hq, hk, causal in CHECKS:
            q = torch.randn(b, sq, hq, d, dtype=bf, device="cuda")
            k, v = (torch.randn(b, sk, hk, d, dtype=bf, device="cuda") for _ in range(2))
            ro, rl = ref(q, k, v, causal)
            fin = torch.isfinite(rl)
            for c in cfgs:
                o, lse = call(c, q, k, v, causal)
                res["checks"].append(dict(cfg=c, check=[b, sq, sk, hq, hk, causal],
                                          rel=float((o.float() - ro.float()).norm() / ro.float().norm().clamp_min(1e-30)),
                                          lse=float((lse[fin] - rl[fin]).abs().max()) if fin.any() else 0.0,
                                          inf_ok=bool(torch.equal(torch.isinf(lse), torch.isinf(rl))),
                                          nan=bool(o.isnan().any())))
    bad = [r for r in res["checks"] if r["rel"] > 3e-3 or r["lse"] > 1e-3 or not r["inf_ok"] or r["nan"]]
    print("checks", len(res["checks"]), "bad", bad[:6], flush=True)
    for (d, b, s, hq, hk, causal), cfgs in TIMED:
        q = torch.randn(b, s, hq, d, dtype=bf, device="cuda")
        k, v = (torch.randn(b, s, hk, d, dtype=bf, device="cuda") for _ in range(2))
        so, sl = tkreg.ops.flash_attention(q, k, v, causal=causal)
        same = {}
        for c in cfgs:
            o, lse = call(c, q, k, v, causal)
            same[c] = float((o.float() - so.float()).norm() / so.float().norm())
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=hq != hk)
        fns = [lambda c=c: call(c, q, k, v, causal) for c in cfgs] + [cudnn]
        ms = queued_ms_paired(fns, [()], reps=10 if s >= 16384 else 20, runs=5)
        fl = 4 * b * hq * s * s * d * (0.5 if causal else 1.0)
        row = dict(shape=[d, b, s, hq, hk, causal], vs_shipped=same,
                   tflops={**{f"cfg{c}": fl / t / 1e9 for c, t in zip(cfgs, ms)}, "cudnn": fl / ms[-1] / 1e9})
        res["rows"].append(row)
        print(row["shape"], " ".join(f"{k}:{v:.0f}" for k, v in row["tflops"].items()),
              "max diff vs shipped %.1e" % max(same.values()), flush=True)
        del q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1])
