"""`python -m tkreg.bench RESULTS.json > BENCHMARKS.md`: render a `tkreg bench --json` run."""
import json
import sys

from . import markdown

if len(sys.argv) != 2:
    raise SystemExit("usage: python -m tkreg.bench RESULTS.json > BENCHMARKS.md")
with open(sys.argv[1]) as f:
    sys.stdout.write(markdown(json.load(f)))
