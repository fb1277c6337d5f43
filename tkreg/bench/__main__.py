"""`python -m tkreg.bench RESULTS.json [JIT.json] [--models M.json ...] > BENCHMARKS.md`: render a
`tkreg bench --json` run, optionally beside `python -m build_tools jit-time` output from the build
machine, after model-level tables (`python -m tkreg.bench.decoder --json M.json`, ...).
`python -m tkreg.bench merge TABLE.json NEW.json NOTE`: rewrite TABLE.json with NEW's rows of the
ops NEW ran in place of TABLE's (`merge`), NOTE saying what that run was."""
import json
import sys

from . import markdown, merge

args = sys.argv[1:]
if args[:1] == ["merge"] and len(args) == 4:
    with open(args[1]) as f:
        table = json.load(f)
    with open(args[2]) as f:
        new = json.load(f)
    ops = {r["op"] for r in new["rows"]}
    with open(args[1], "w") as f:
        json.dump(merge(table, [(new, ops, args[3])]), f, indent=1)
    print(f"{args[1]}: rows of {', '.join(sorted(ops))} from {args[2]}")
    raise SystemExit(0)
models = []
if "--models" in args:
    i = args.index("--models")
    for path in args[i + 1:]:
        with open(path) as f:
            models.append(json.load(f))
    args = args[:i]
if len(args) not in (1, 2):
    raise SystemExit("usage: python -m tkreg.bench RESULTS.json [JIT.json] [--models M.json ...] > BENCHMARKS.md\n"
                     "       python -m tkreg.bench merge TABLE.json NEW.json NOTE")
with open(args[0]) as f:
    res = json.load(f)
jit = None
if len(args) == 2:
    with open(args[1]) as f:
        jit = json.load(f)
sys.stdout.write(markdown(res, jit, models))
