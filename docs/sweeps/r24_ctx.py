"""The bench's own process (24th session): `tkreg.bench.run(FAMILIES)` written like
`tkreg bench --json`, then r24_place.py's standalone measurement of the same three rows in the same
process, so a row that reads low in the bench and high alone can be told apart from the process.
Run (cwd outside the repo, r24_place.py beside it): python3 r24_ctx.py OUT.json norm,quant
"""
import json
import sys

import r24_place
import tkreg.bench

res = tkreg.bench.run(sys.argv[2].split(","))
with open(sys.argv[1], "w") as f:
    json.dump(res, f, indent=1)
for r in res["rows"]:
    if r["case"] in ("4096x4096 bf16 (queued)", "1x3000x7168 bf16 (queued)") and r["op"] != "fp8_quant":
        print("bench:", r["op"], r["case"], r["impl"], f"{r['ms'] * 1e3:.1f} us", r["vs"], flush=True)
r24_place.ROUNDS = 2
r24_place.main(sys.argv[1].replace(".json", "_after.json"))
