"""Edge-case check for the WS FP8 GEMM pack (docs/sweeps/fp8_gemm_ws_pack.py), which the timing
harness (fp8_gemm_r2_run.py: every K there has an even number of 128-K blocks, M and N multiples
of 128) does not reach: odd block counts (the WS kernel's tail), K <= 128, K % 128 != 0, M/N
tiles past the edges, column-major a_scale.  Each cfg >= 1 is compared bit for bit with cfg 0 and
with the shipped tkreg.fp8_gemm, one process per cfg (a hang costs one timeout):
  `TKREG_PACKS=pack python3 fp8_gemm_ws_check.py OUT.json` (cwd outside the repo)."""
import json, os, subprocess, sys, time

# (M, N, K): KB = ceil(K / 128) odd / 1 / KB % 4 = 2 or 3 / partial last block / edge tiles
SHAPES = [(128, 128, 128), (300, 264, 16), (129, 136, 144), (128, 128, 384), (257, 384, 640),
          (1000, 1000, 1152), (2048, 2048, 2304), (4096, 4096, 4480), (192, 8192, 7168), (640, 512, 2000)]


def child(cfg):
    import torch, tkreg
    torch.manual_seed(0)
    rows = []
    for m, n, k in SHAPES:
        kb = -(-k // 128)
        qa = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        qb = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        sa = torch.rand(m, kb, device="cuda") + 0.5
        sb = torch.rand(-(-n // 128), kb, device="cuda") + 0.5
        for layout, s in (("row", sa), ("col", sa.t().contiguous().t())):
            o = tkreg.call("sw.fp8_gemm", qa, s, qb, sb, cfg=cfg)
            o0 = tkreg.call("sw.fp8_gemm", qa, s, qb, sb, cfg=0)
            ref = tkreg.ops.fp8_gemm(qa, s, qb, sb)
            torch.cuda.synchronize()
            rows.append(dict(shape=[m, n, k], scale=layout,
                             diff_cfg0=int((o.view(torch.int16) != o0.view(torch.int16)).sum()),
                             diff_shipped=int((o.view(torch.int16) != ref.view(torch.int16)).sum())))
            print(cfg, rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(int(sys.argv[2]))), flush=True)
        sys.exit(0)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fp8_gemm_r2_run import ncfg
    out, res = sys.argv[1], {"runs": []}
    for cfg in range(1, ncfg()["fp8_gemm"]):
        t = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--child", str(cfg)], capture_output=True, text=True, timeout=60)
            got = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            res["runs"].append(dict(cfg=cfg, rc=p.returncode, secs=round(time.time() - t, 1),
                                    rows=json.loads(got[0][7:]) if got else None, err=p.stderr[-800:] if not got else ""))
        except subprocess.TimeoutExpired:
            res["runs"].append(dict(cfg=cfg, rc="timeout", secs=60))
        r = res["runs"][-1]
        bad = [x for x in r.get("rows") or [] if x["diff_cfg0"] or x["diff_shipped"]]
        print(cfg, r["rc"], r["secs"], "s", "rows", len(r.get("rows") or []), "mismatching", len(bad), flush=True)
        json.dump(res, open(out, "w"), indent=1)
