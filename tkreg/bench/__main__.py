"""`python -m tkreg.bench RESULTS.json [JIT.json] > BENCHMARKS.md`: render a `tkreg bench --json`
run, optionally beside `python -m build_tools jit-time` output from the build machine."""
import json
import sys

from . import markdown

if len(sys.argv) not in (2, 3):
    raise SystemExit("usage: python -m tkreg.bench RESULTS.json [JIT.json] > BENCHMARKS.md")
with open(sys.argv[1]) as f:
    res = json.load(f)
jit = None
if len(sys.argv) == 3:
    with open(sys.argv[2]) as f:
        jit = json.load(f)
sys.stdout.write(markdown(res, jit))
