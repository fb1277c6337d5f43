"""Flash attention sweep on the H200 (pack: docs/sweeps/attention_r2.py).  Each cfg runs in its own
process (a hang costs one timeout): odd-shape checks against the fp32 reference, then the timed
shapes beside the installed wheel's op and SDPA (cuDNN, flash) in the same process.  Also sweeps
paged decode's split count at batch 1 (a run-time scalar of the shipped op: no pack needed).
`TKREG_PACKS=pack [PEERS="0 6"] [DECODE=1] python3 attention_r2_run.py OUT.json [cfg ...]` (cwd outside
the repo; PEERS: the cfgs whose process also times the shipped op and SDPA)."""
import json, os, subprocess, sys

TIMED = [(128, 8, 4096, 32, 8, False), (128, 8, 4096, 32, 8, True), (128, 2, 16384, 32, 8, False),
         (128, 2, 16384, 32, 8, True), (128, 8, 4096, 32, 32, True), (128, 2, 16384, 32, 32, True),
         (64, 8, 4096, 32, 8, False), (64, 8, 4096, 32, 8, True), (64, 2, 16384, 32, 8, True)]
CHECKS = [(1, sq, sk, 4, 2, c) for sq, sk in ((17, 17), (4095, 4095), (1000, 3000), (300, 129), (1, 700))
          for c in (False, True)]


def dims() -> dict:
    """cfg -> head dim, read from the pack's variant keys (TKREG_PACKS)."""
    import pathlib, re
    for d in os.environ.get("TKREG_PACKS", "").split(":"):
        f = pathlib.Path(d) / "sm_90a" / "manifest.json"
        if f.is_file():
            text = f.read_text()
            keys = re.findall(r'cfg=\d+[^"]*', text)   # variant keys: k=v,... sorted by k
            return {int(re.search(r'cfg=(\d+)', k)[1]): int(re.search(r'dim=(\d+)', k)[1]) for k in keys}
    raise SystemExit("TKREG_PACKS must name a pack built from docs/sweeps/attention_r*.py")


def child(cfg):
    import torch, tkreg
    from tkreg.bench.timing import gpu_ms
    from tkreg.reference.attention import flash_attention as ref
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d, bf = dims()[cfg], torch.bfloat16
    torch.manual_seed(cfg)
    run = lambda q, k, v, c: tkreg.call("sw.flash_attention", q, k, v, causal=c, cfg=cfg)
    for b, sq, sk, hq, hk, c in CHECKS:
        q = torch.randn(b, sq, hq, d, dtype=bf, device="cuda")
        k, v = (torch.randn(b, sk, hk, d, dtype=bf, device="cuda") for _ in range(2))
        o, l = run(q, k, v, c)
        ro, rl = ref(q, k, v, c)
        fin = torch.isfinite(rl)
        row = dict(cfg=cfg, check=[b, sq, sk, hq, hk, c],
                   rel=float((o.float() - ro.float()).norm() / ro.float().norm().clamp_min(1e-30)),
                   lse=float((l[fin] - rl[fin]).abs().max()) if fin.any() else 0.0,
                   inf_ok=bool(torch.equal(torch.isinf(l), torch.isinf(rl))), nan=bool(o.isnan().any()))
        print(json.dumps(row), flush=True)
    for D, b, s, hq, hk, c in TIMED:
        if D != d:
            continue
        q = torch.randn(b, s, hq, d, dtype=bf, device="cuda")
        k, v = (torch.randn(b, s, hk, d, dtype=bf, device="cuda") for _ in range(2))
        reps = 10 if s >= 16384 else 20
        fl = 4 * b * hq * s * s * d * (0.5 if c else 1.0)
        o, l = run(q, k, v, c)
        so, sl = tkreg.ops.flash_attention(q, k, v, causal=c)
        row = dict(cfg=cfg, shape=[d, b, s, hq, hk, c],
                   vs_shipped=float((o.float() - so.float()).norm() / so.float().norm()),
                   lse_vs_shipped=float((l - sl).abs().max()))
        t = gpu_ms(lambda: run(q, k, v, c), [()], reps=reps)
        row.update(ms=t, tflops=fl / t / 1e9)
        if os.environ.get("PEERS", "0 6").split().count(str(cfg)):
            row["shipped_tflops"] = fl / gpu_ms(lambda: tkreg.ops.flash_attention(q, k, v, causal=c), [()], reps=reps) / 1e9
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            kt, vt = (x.repeat_interleave(hq // hk, dim=1) for x in (kt, vt))
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                with sdpa_kernel(be):
                    t = gpu_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=c), [()], reps=reps)
                row[name + "_tflops"] = fl / t / 1e9
        print(json.dumps(row), flush=True)
        del q, k, v
        torch.cuda.empty_cache()


def decode_child():
    """Paged decode, batch 1 x 32768 context: time per split count (the op's num_splits scalar)."""
    import torch, tkreg
    from tkreg.bench.timing import queued_ms, copy_bandwidth
    bw = copy_bandwidth()
    for ps in (16, 64):
        ctx, hq, hk, d = 32768, 32, 8, 128
        npg = ctx // ps
        def make():
            kc = torch.randn(npg, ps, hk, d, dtype=torch.bfloat16, device="cuda")
            vc = torch.randn(npg, ps, hk, d, dtype=torch.bfloat16, device="cuda")
            bt = torch.randperm(npg, device="cuda", dtype=torch.int32)[None]
            return torch.randn(1, hq, d, dtype=torch.bfloat16, device="cuda"), kc, vc, bt, torch.tensor([ctx], dtype=torch.int32, device="cuda")
        sets = [make() for _ in range(4)]
        nbytes = 2 * ctx * hk * d * 2
        for ns in (0, 16, 24, 33, 48, 66, 96, 128):
            t = queued_ms(lambda q, kc, vc, bt, sl: tkreg.ops.paged_decode_attention(q, kc, vc, bt, sl, num_splits=ns), sets, reps=50)
            print(json.dumps(dict(decode=ps, splits=ns, us=t * 1e3, pct_copy=nbytes / t / 1e6 / bw * 100)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(int(sys.argv[2]))
        sys.exit(0)
    if sys.argv[1] == "--decode":
        decode_child()
        sys.exit(0)
    out, rows = sys.argv[1], []
    cfgs = [int(c) for c in sys.argv[2:]] or sorted(dims())
    jobs = ([["--decode"]] if os.environ.get("DECODE") else []) + [["--child", str(c)] for c in cfgs]
    for j in jobs:
        try:
            p = subprocess.run([sys.executable, __file__, *j], capture_output=True, text=True, timeout=150)
            rows += [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode:
                rows.append(dict(job=j, rc=p.returncode, err=p.stderr[-1500:]))
        except subprocess.TimeoutExpired:
            rows.append(dict(job=j, timeout=True))
        print(j, "done", flush=True)
        json.dump(rows, open(out, "w"), indent=1)
    for r in rows:
        if "tflops" in r:
            print(r["cfg"], r["shape"], round(r["tflops"]), {k: round(v) for k, v in r.items() if k.endswith("_tflops")},
                  "%.1e" % r["vs_shipped"])
        elif "decode" in r:
            print("decode", r["decode"], r["splits"], round(r["us"], 1), round(r["pct_copy"], 1))
        elif "check" in r and (r["rel"] > 3e-3 or r["lse"] > 1e-3 or not r["inf_ok"] or r["nan"]):
            print("CHECK FAIL", r)
        elif "check" not in r:
            print(r)
