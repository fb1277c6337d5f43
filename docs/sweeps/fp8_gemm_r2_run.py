"""FP8 GEMM scale-prefetch sweep on the H200 (pack: docs/sweeps/fp8_gemm_r2.py).  Each op's cfgs are
checked bit for bit against cfg 0 (the shipped tile) and timed with queued_ms beside torch._scaled_mm
(rowwise and blockwise) in the same process.  One process per op and config group (a hang costs one
timeout, not the call):  `TKREG_PACKS=pack python3 fp8_gemm_r2_run.py OUT.json` (cwd outside the repo)."""
import json, os, subprocess, sys, time

DENSE = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 7168, 2048), (4096, 28672, 4096), (2048, 8192, 8192),
         (512, 8192, 8192)]
SMALL_M = [(128, 8192, 8192), (64, 4096, 14336)]   # the 64-row tiles' shapes (round 3)
DECODE = [(m, n, k) for m in (1, 16, 32, 64) for n, k in ((8192, 8192), (28672, 4096), (4096, 14336), (7168, 2048))]


def ncfg() -> dict:
    """op -> number of cfgs, from the pack's sm_90a manifest (TKREG_PACKS)."""
    import pathlib
    for d in os.environ.get("TKREG_PACKS", "").split(":"):
        f = pathlib.Path(d) / "sm_90a" / "manifest.json"
        if f.is_file():
            m = json.load(open(f))
            ops = m["ops"] if isinstance(m.get("ops"), list) else [dict(name=k, **v) for k, v in m["ops"].items()]
            return {o["name"].split(".", 1)[1]: len(o["variants"]) for o in ops if o["name"].startswith("sw.")}
    raise SystemExit("TKREG_PACKS must name a pack built from docs/sweeps/fp8_gemm_r*.py")


def child(op, cfg):
    import torch, tkreg
    from tkreg.bench.timing import queued_ms, rotations
    ops = tkreg.ops
    rows = []
    torch.manual_seed(0)
    if op == "fp8_gemm":
        shapes = DECODE if os.environ.get("DECODE") else DENSE + (SMALL_M if os.environ.get("SMALL_M") else [])
        for m, n, k in shapes:
            def make():
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
                qa, sa = ops.per_token_group_quant_fp8(x)
                qb, sb = ops.per_block_quant_fp8(w)
                return qa, sa, qb, sb
            sets = rotations(make, m * k + n * k + 2 * m * n)
            qa, sa, qb, sb = sets[0]
            o = tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=cfg)
            o0 = tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=0)
            ref = ops.fp8_gemm(qa, sa, qb, sb)
            r = max(3, min(50, int(2e13 / (2 * m * n * k))))
            rel = float((o.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
            t = queued_ms(lambda qa, sa, qb, sb: tkreg.call("sw.fp8_gemm", qa, sa, qb, sb, cfg=cfg), sets, reps=r)
            row = dict(shape=[m, n, k], ms=t, tflops=2 * m * n * k / t / 1e9, wgbs=n * k / t / 1e6, rel_vs_shipped=rel,
                       diff_cfg0=int((o.view(torch.int16) != o0.view(torch.int16)).sum()),
                       diff_shipped=int((o.view(torch.int16) != ref.view(torch.int16)).sum()))
            if cfg == 0 and not os.environ.get("DECODE"):
                ra = torch.rand(m, 1, device="cuda") + 0.5
                rb = torch.rand(1, n, device="cuda") + 0.5
                row["rowwise_ms"] = queued_ms(lambda qa, sa, qb, sb: torch._scaled_mm(qa, qb.t(), ra, rb, out_dtype=torch.bfloat16), sets, reps=r)
                cols = [s[1].t().contiguous().t() for s in sets]
                try:
                    row["blockwise_ms"] = queued_ms(lambda i: torch._scaled_mm(sets[i][0], sets[i][2].t(), cols[i], sets[i][3].t(),
                                                                               out_dtype=torch.bfloat16), [(i,) for i in range(len(sets))], reps=r)
                except Exception as e:
                    row["blockwise_err"] = str(e)[:200]
            rows.append(row)
            print(op, cfg, row, flush=True)
            del sets
            torch.cuda.empty_cache()
    else:
        masked = op.endswith("masked")
        for n, k in ((4096, 7168), (7168, 2048)):
            small = ((8, 64), (8, 16), (16, 16), (4, 32))   # SMALL_MASKED=1: DeepEP low-latency counts
            for e, per in ((8, 0), (32, 0)) if not masked else small if os.environ.get("SMALL_MASKED") else ((8, 1024), (16, 256), (8, 32)):
                if masked:
                    mmax = max(64, -(-2 * per // 64) * 64)
                    counts = [int(per * (0.7 + 0.6 * ((i * 37) % 11) / 10)) for i in range(e)]
                    c = torch.tensor(counts, dtype=torch.int32, device="cuda")
                    flops = 2.0 * sum(counts) * n * k
                    def make():
                        x = torch.randn(e * mmax, k, dtype=torch.bfloat16, device="cuda")
                        qa, sa = ops.per_token_group_quant_fp8(x)
                        qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(torch.float8_e4m3fn)
                        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                        return qa.view(e, mmax, k), sa.view(e, mmax, k // 128), qb, sb
                    sets = rotations(make, e * mmax * k + e * n * k + 2 * e * mmax * n)
                    run = lambda qa, sa, qb, sb, i=cfg: tkreg.call("sw." + op, qa, sa, qb, sb, c, cfg=i)
                    ship = lambda qa, sa, qb, sb: ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, c)
                else:
                    m = 4096 * e
                    g = torch.tensor([4096 * i for i in range(e + 1)], dtype=torch.int32, device="cuda")
                    flops = 2.0 * m * n * k
                    def make():
                        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                        qa, sa = ops.per_token_group_quant_fp8(x)
                        qb = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(0.05).to(torch.float8_e4m3fn)
                        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
                        return qa, sa, qb, sb
                    sets = rotations(make, m * k + e * n * k + 2 * m * n)
                    run = lambda qa, sa, qb, sb, i=cfg: tkreg.call("sw." + op, qa, sa, qb, sb, g, cfg=i)
                    ship = lambda qa, sa, qb, sb: ops.fp8_grouped_gemm(qa, sa, qb, sb, g)
                o, o0, ref = run(*sets[0]), run(*sets[0], i=0), ship(*sets[0])
                if masked:   # rows >= counts are never written: compare the computed rows only
                    o, o0, ref = (torch.cat([t[i, :counts[i]] for i in range(e)]) for t in (o, o0, ref))
                r = max(3, min(30, int(2e13 / flops)))
                t = queued_ms(run, sets, reps=r)
                row = dict(case=f"{e}e{'x%d' % per if masked else ''} n{n} k{k}", ms=t, tflops=flops / t / 1e9,
                           wgbs=e * n * k / t / 1e6,
                           diff_cfg0=int((o.view(torch.int16) != o0.view(torch.int16)).sum()),
                           diff_shipped=int((o.view(torch.int16) != ref.view(torch.int16)).sum()))
                rows.append(row)
                print(op, cfg, row, flush=True)
                del sets
                torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(sys.argv[2], int(sys.argv[3]))), flush=True)
        sys.exit(0)
    out = sys.argv[1]
    NCFG = ncfg()
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else list(NCFG)
    res = {"runs": []}
    t0 = time.time()
    for op in only:
        for cfg in range(NCFG[op]):
            t = time.time()
            try:
                p = subprocess.run([sys.executable, __file__, "--child", op, str(cfg)], capture_output=True, text=True, timeout=90)
                got = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                res["runs"].append(dict(op=op, cfg=cfg, rc=p.returncode, secs=round(time.time() - t, 1),
                                        rows=json.loads(got[0][7:]) if got else None, err=p.stderr[-800:] if not got else ""))
            except subprocess.TimeoutExpired:
                res["runs"].append(dict(op=op, cfg=cfg, rc="timeout", secs=90))
            r = res["runs"][-1]
            print(op, cfg, r["rc"], r["secs"], "s", [round(x["tflops"]) for x in r.get("rows") or []], flush=True)
            json.dump(res, open(out, "w"), indent=1)
    print("total", round(time.time() - t0), "s")
