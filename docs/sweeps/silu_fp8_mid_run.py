"""Times docs/sweeps/silu_fp8_mid.py's cfgs on the H200: each checked bit for bit against the shipped
tkreg.silu_and_mul_quant_fp8 (M = 1, 37, 1024, 4097), then queued GPU time beside a same-size
device copy at M in {1024, 2048, 3000, 4096} x I in {4096, 5120, 7168} and 16384 x 7168.
`cd /tmp && TKREG_PACKS=pack python3 silu_fp8_mid_run.py OUT.json`."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, tkreg
from tkreg.bench.timing import queued_ms, rotations
from sweep_check import copy_ms, diff, rnd

NCFG = 5
res, copies = {"checks": [], "rows": []}, {}
for m in (1, 37, 1024, 4097):
    x = rnd(m, 2 * 4096)
    q0, s0 = tkreg.ops.silu_and_mul_quant_fp8(x)
    for i in range(1, NCFG):
        q, s = tkreg.call("sw5.silu_and_mul_quant_fp8", x, cfg=i)
        res["checks"].append(dict(m=m, cfg=i, dq=diff(q, q0), ds=diff(s, s0)))
bad = [c for c in res["checks"] if c["dq"] or c["ds"]]
print("checks", len(res["checks"]), "mismatching", len(bad), bad[:3], flush=True)
for m, i in [(m, i) for m in (1024, 2048, 3000, 4096) for i in (4096, 5120, 7168)] + [(16384, 7168)]:
    nbytes = m * 2 * i * 2 + m * i + m * (i // 128) * 4
    sets = rotations(lambda: (rnd(m, 2 * i),), nbytes)
    cp = copy_ms(copies, nbytes, queued=True)
    row = dict(m=m, i=i, copy_ms=cp)
    for c in range(NCFG):
        row[c] = queued_ms(lambda x, c=c: tkreg.call("sw5.silu_and_mul_quant_fp8", x, cfg=c), sets)
    res["rows"].append(row)
    print(m, i, " ".join(f"{c}:{cp / row[c]:.2f}" for c in range(NCFG)), flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
