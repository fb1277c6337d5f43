"""`tkreg bench`: each op beside the peers a user would otherwise pick, in one process.

Only ratios measured in the same run mean anything on a shared machine, so every row carries
its peers.  GPU times are CUDA-event medians over >= 30 runs with inputs rotated past L2;
memory-bound rows report GB/s against the copy bandwidth measured first; GEMMs report TFLOP/s
against cuBLAS.  Host-cost rows time Python-side loops of tiny calls against the bare driver
launch floor measured in the same run.  Needs torch with CUDA; matplotlib only for --plot.
"""
from __future__ import annotations

import importlib
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict

from .timing import burst_us, copy_bandwidth, need_torch, queued_ms


DRIVER = "driver cuLaunchKernel (C loop, empty kernel)"
OUT = "tkreg.ops.rms_norm(out=)"
ALLOC = "tkreg.ops.rms_norm (allocating)"
GPU_TIME = "GPU time per rms_norm kernel, launches queued back to back (events)"
EAGER = "eager F.rms_norm"


def bench_host_cost(progress, rounds=7, bursts=25, k=200):
    """Per-call host cost on tiny tensors beside the driver floor, measured in the same run.

    A sample is host time per call over a burst of `k` calls into an idle stream (`burst_us`), so
    the GPU is never the bottleneck.  The host's speed drifts by +-10% on a shared machine, so
    every burst of every row is paired with a driver-floor burst taken just before it: a row's
    "above the floor" is the median of those paired differences, its time the median of its
    samples (7 rounds x 25 bursts x 200 calls = 35k calls per row).  Two rows split the tkreg
    call: the native op from a C loop (no Python loop or wrapper: the launcher's own share) and
    the kernel's GPU time.
    """
    torch = need_torch()
    import tkreg
    from tkreg import driver_api
    from tkreg.runtime import OPS

    from . import _probe
    F = torch.nn.functional
    dev = torch.cuda.current_device()
    x = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(1024, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(x)
    a, b, c = (torch.randn(16, device="cuda") for _ in range(3))
    op = OPS["tkreg.rms_norm"]
    stream = torch.cuda.current_stream().cuda_stream

    def c_loop(fn):  # loops that run in C and time themselves
        def run():
            torch.cuda.synchronize()
            return fn()
        return run

    def no_grad_out():
        with torch.no_grad():
            return burst_us(lambda: tkreg.ops.rms_norm(x, w, out=out), k)

    op(x, w, 1e-6, out)  # loads the module and makes its context current for the probes
    tkreg.register_torch_ops()  # for the torch.ops row
    fns = driver_api.driver(_probe.PROBE_FUNCS)
    driver = c_loop(lambda: _probe.driver_floor(dev, stream, k, fns))
    cases = {
        "native Op call from a C loop (out=)": c_loop(lambda: _probe.call_loop(op, (x, w, 1e-6, out), k)),
        "torch.add(a, b, out=c)": lambda: burst_us(lambda: torch.add(a, b, out=c), k),
        "torch.empty_like": lambda: burst_us(lambda: torch.empty_like(x), k),
        EAGER: lambda: burst_us(lambda: F.rms_norm(x, (1024,), w, 1e-6), k),
        OUT: lambda: burst_us(lambda: tkreg.ops.rms_norm(x, w, out=out), k),
        "tkreg.ops.rms_norm(out=) under no_grad": no_grad_out,
        "native Op call, no Python wrapper (out=)": lambda: burst_us(lambda: op(x, w, 1e-6, out), k),
        ALLOC: lambda: burst_us(lambda: tkreg.ops.rms_norm(x, w), k),
        "tkreg.call('tkreg.rms_norm')": lambda: burst_us(lambda: tkreg.call("tkreg.rms_norm", x, w), k),
        "torch.ops.tkreg.rms_norm (custom-op path)": lambda: burst_us(lambda: torch.ops.tkreg.rms_norm(x, w, 1e-6), k),
    }
    for fn in (driver, *cases.values()):  # warm every path once
        fn()
    floor, samples, above = [], {key: [] for key in cases}, {key: [] for key in cases}
    for _ in range(rounds):
        for key, fn in cases.items():
            for _ in range(bursts):
                d = driver()
                v = fn()
                floor.append(d)
                samples[key].append(v)
                above[key].append(v - d)
    progress()
    res = {DRIVER: statistics.median(floor)} | {key: statistics.median(v) for key, v in samples.items()}
    res_above = {key: statistics.median(v) for key, v in above.items()}
    # GPU time per launch with the launches already queued (queued_ms: behind a spin kernel): what a
    # steady loop of calls converges to once it outruns the GPU (why the rows above are bursts)
    res[GPU_TIME] = 1e3 * queued_ms(lambda: op(x, w, 1e-6, out), [()], reps=k)
    return res, res_above


COLD = r"""
import time, torch
torch.cuda.init(); x = torch.randn(8, 1024, dtype=torch.bfloat16, device="cuda")
w = torch.randn(1024, dtype=torch.bfloat16, device="cuda"); torch.cuda.synchronize()
t = time.perf_counter()
import tkreg
t1 = time.perf_counter()
y = tkreg.ops.rms_norm(x, w); torch.cuda.synchronize()
print(1e3 * (time.perf_counter() - t), 1e3 * (t1 - t))
"""


def cold_start_ms(runs=7) -> tuple[float, float]:
    """(import + first call, import alone) in fresh processes, medians."""
    total, imp = [], []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr)
        a, b = map(float, r.stdout.strip().splitlines()[-1].split())
        total.append(a)
        imp.append(b)
    return statistics.median(total), statistics.median(imp)


# One module per op family, each with `cases(quick, ceiling, progress) -> list[Row]`.
FAMILIES = ("norm", "gemm", "activation", "rotary", "fp8", "quant", "attention", "paged_attention", "grouped_gemm", "moe", "moe_layer", "engram", "mhc")


def _family(name):
    return importlib.import_module(f"{__name__}.{name}").cases


def run(ops=None, quick=False) -> dict:
    torch = need_torch()
    ops = ops or list(FAMILIES)
    unknown = set(ops) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown ops {sorted(unknown)}; benchmarked: {sorted(FAMILIES)}")
    try:
        from tqdm import tqdm
        bar = tqdm(total=len(ops) * 7 + 3, unit="case", file=sys.stderr)
        progress = lambda: bar.update(1)  # noqa: E731
    except ImportError:
        bar, progress = None, lambda: None
    ceiling = copy_bandwidth()
    progress()
    rows = []
    for op in ops:
        rows += _family(op)(quick, ceiling, progress)
    host, host_above = bench_host_cost(progress)
    cold, cold_import = cold_start_ms()
    progress()
    if bar:
        bar.close()
    props = torch.cuda.get_device_properties(0)
    import tkreg
    return {
        "date": time.strftime("%Y-%m-%d"), "gpu": props.name, "torch": torch.__version__,
        "cuda": torch.version.cuda, "driver": _driver(), "tkreg": tkreg.__version__,
        "python": platform.python_version(), "command": "python -m tkreg bench" + (" --quick" if quick else "") + (f" --ops {' '.join(ops)}" if ops != list(FAMILIES) else ""),
        "copy_gbs": ceiling, "rows": [asdict(r) for r in rows], "host_us": host, "host_above_us": host_above, "cold_start_ms": cold, "cold_import_ms": cold_import,
    }


def _driver() -> str:
    try:
        from tkreg.driver_api import driver_info
        v = driver_info()[0]
        return f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001
        return "?"


def table(res: dict) -> str:
    lines = [f"copy bandwidth: {res['copy_gbs']:.0f} GB/s", "",
             f"{'op':10} {'case':34} {'impl':14} {'ms':>9} {'rate':>14} {'%ceil':>6}  vs peers"]
    for r in res["rows"]:
        rate = f"{r['metric']:.0f} {r['unit']}" if r["unit"] else ""
        pct = f"{r['pct_ceiling']:.0f}%" if r["pct_ceiling"] else ""
        vs = ", ".join(f"{k} {v:.2f}x" for k, v in r["vs"].items())
        lines.append(f"{r['op']:10} {r['case']:34} {r['impl']:14} {r['ms']:9.4f} {rate:>14} {pct:>6}  {vs}")
    above = _above(res)
    lines += ["", "host cost per call (us; above the driver floor, paired bursts):"] + [
        f"  {k:72} {v:7.2f}  {'' if k not in above else f'{above[k]:+.2f}'}" for k, v in res["host_us"].items()]
    lines.append(f"cold start (import tkreg + first rms_norm, fresh process): {res['cold_start_ms']:.1f} ms "
                 f"(import alone {res.get('cold_import_ms', float('nan')):.1f} ms)")
    return "\n".join(lines)


def _span(vals, fmt) -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if f"{fmt.format(lo)}" == f"{fmt.format(hi)}" else f"{fmt.format(lo)}-{fmt.format(hi)}"


def summary(res: dict) -> list:
    """Markdown rows: per op, the range of tkreg's % of copy (or rate) and of each peer ratio."""
    by: dict = {}
    for r in res["rows"]:
        if r["impl"] == "tkreg":
            by.setdefault(r["op"], []).append(r)
    out = ["| op | cases | tkreg | vs peers (min-max) |", "|---|---:|---|---|"]
    for op, rows in by.items():
        pct = [r["pct_ceiling"] for r in rows if r["pct_ceiling"] >= 1]
        rate = [r for r in rows if r["unit"] and r["pct_ceiling"] < 1]
        own = "; ".join(([_span(pct, "{:.0f}") + "% of copy"] if pct else []) +
                        ([_span([r["metric"] for r in rate], "{:.0f}") + f" {rate[0]['unit']}"] if rate else []))
        peers: dict = {}
        for r in rows:
            for k, v in r["vs"].items():
                peers.setdefault(k, []).append(v)
        vs = ", ".join(f"{k} {_span(v, '{:.2f}')}×" for k, v in peers.items())
        out.append(f"| {op} | {len(rows)} | {own} | {vs} |")
    return out


def _above(res: dict) -> dict:
    """Row -> µs above the driver floor: the paired-burst medians (older results: the difference)."""
    h = res["host_us"]
    return res.get("host_above_us") or {k: v - h[DRIVER] for k, v in h.items() if k != GPU_TIME}


def model_section(models: list) -> list:
    """BENCHMARKS.md's first tables: whole models, from `tkreg.bench.decoder` / `.models` JSONs."""
    out = ["## Models\n"]
    for m in models:
        out += [f"**{m['title']}** — {m['date']} on {m['gpu']}, torch {m['torch']}: `{m['command']}`\n"]
        out += [f"Note: {m['note']}\n"] if m.get("note") else []
        out += ["| " + " | ".join(m["header"]) + " |", "|" + "---|" * len(m["header"])]
        out += ["| " + " | ".join(str(c) for c in r) + " |" for r in m["rows"]] + [""]
    return out


def markdown(res: dict, jit: dict | None = None, models: list | None = None) -> str:
    """BENCHMARKS.md from a results JSON (and model-level JSONs, shown first)."""
    h = res["host_us"]
    out = ["# Benchmarks\n",
           f"Last run: {res['date']} on {res['gpu']} (driver {res['driver']}, torch {res['torch']}, CUDA {res['cuda']}, "
           f"Python {res['python']}), tkreg {res['tkreg']} from the installed wheel.\n",
           f"Command: `{res['command']} --json results.json` then `python -m tkreg.bench results.json > BENCHMARKS.md`.\n",
           f"Ratios are peer time / tkreg time (> 1: tkreg is faster), measured in the same process. "
           f"Memory ceiling (device copy, read + write): **{res['copy_gbs']:.0f} GB/s**.\n",
           ] + (model_section(models) if models else [])
    out += ["## At a glance\n", "Per op, over its cases: tkreg's share of the copy ceiling (memory-bound ops) or its rate, "
            "and each peer's time over tkreg's (> 1: tkreg is faster).\n"] + summary(res) + [""]
    if res.get("runs"):   # a table merged from several runs (`merge`): say which rows came from which
        out += ["Rows by run (same GPU kind; each family's rows come from one run):\n"] + [
            f"- {', '.join(r['families'])}: {r['date']}, `{r['command']}`" + (f" ({r['note']})" if r.get("note") else "")
            for r in res["runs"] if r["families"]] + [""]
    out += ["| op | case | impl | time (ms) | rate | % of copy BW | vs peers |", "|---|---|---|---:|---:|---:|---|"]
    for r in res["rows"]:
        rate = f"{r['metric']:.0f} {r['unit']}" if r["unit"] else ""
        pct = f"{r['pct_ceiling']:.0f}%" if r["pct_ceiling"] else ""
        vs = ", ".join(f"{k} {v:.2f}×" for k, v in r["vs"].items())
        out.append(f"| {r['op']} | {r['case']} | {r['impl']} | {r['ms']:.4f} | {rate} | {pct} | {vs} |")
    out += ["", "## Host cost per call (tiny tensors)", "",
            "Host wall time per call in bursts of 200 calls into an idle stream (so the GPU is never the "
            "bottleneck; the last row shows the kernel's own GPU time), median of 175 bursts (35,000 calls) "
            "per row.  Each burst is paired with a driver-floor burst taken just before it, and \"above the "
            "driver floor\" is the median of those paired differences, which cancels the host's drift.", "",
            "| call | µs per call | above the driver floor |", "|---|---:|---:|"]
    above = _above(res)
    for k, v in h.items():
        out.append(f"| {k} | {v:.2f} | {'' if k not in above else f'{above[k]:+.2f}'} |")
    eager = h[EAGER]
    out += ["", f"Allocating `tkreg.ops.rms_norm` costs {h[ALLOC] / eager:.2f}× eager "
            f"`F.rms_norm`; with `out=` it is {above[OUT]:+.2f} µs above the bare driver launch.",
            "", f"Cold start (fresh process, torch already on the GPU; `import tkreg` + first `rms_norm`): "
            f"**{res['cold_start_ms']:.1f} ms** on the GPU machine above (median of 7; `import tkreg` alone, which "
            f"reads nothing until the first call: {res.get('cold_import_ms', float('nan')):.1f} ms; the first call loads the packs, "
            f"builds the op and loads its cubin)."]
    if jit:
        rn = jit["ops"].get("tkreg.rms_norm", next(iter(jit["ops"].values()), {}))
        out += ["", f"For contrast, what a JIT pays for that kernel on the build machine ({jit['machine']}, "
                f"{jit['date']}, `python -m build_tools jit-time`): lowering + nvcc "
                f"{min(rn.get('seconds', [0])):.2f}-{max(rn.get('seconds', [0])):.2f} s per kernel, plus "
                f"{jit['import_tilelang_s']:.1f} s to import tilelang — in every process without a warm cache."]
    return "\n".join(out) + "\n"


# what a merged table's header takes from its newest run (the command stays the base run's)
HEADER = ("date", "gpu", "torch", "cuda", "driver", "tkreg", "python", "copy_gbs", "host_us", "host_above_us",
          "cold_start_ms", "cold_import_ms")


def merge(base: dict, parts: list) -> dict:
    """`base` (a full run, or a table merged before) plus, for each (results, families, note) in
    `parts`, that run's rows of those families, replacing base's rows of them; the result lists
    every run under "runs" (base's own list kept, less what was replaced) so the rendered table
    says which rows came from where, and its header (date, versions, copy bandwidth, host cost)
    is the newest part's."""
    def fams(rows):
        return sorted({r["op"] for r in rows})
    out = dict(base, rows=list(base["rows"]))
    runs = base.get("runs") or [dict(families=fams(base["rows"]), date=base["date"], command=base["command"])]
    for res, families, note in parts:
        take = [r for r in res["rows"] if r["op"] in families]
        out["rows"] = [r for r in out["rows"] if r["op"] not in families] + take
        runs = [dict(r, families=[f for f in r["families"] if f not in families]) for r in runs]
        runs.append(dict(families=fams(take), date=res["date"], command=res["command"], note=note))
        out.update({k: res[k] for k in HEADER if k in res})
    out["runs"] = [r for r in runs if r["families"]]
    return out


def plot(res: dict, path: str) -> bool:
    """A bar chart of tkreg's speed-up over its fastest peer per case; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ours = [r for r in res["rows"] if r["impl"] == "tkreg" and r["vs"]]
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(ours) + 1))
    ax.barh([f"{r['op']} {r['case']}" for r in ours], [min(r["vs"].values()) for r in ours])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up vs the fastest peer (peer time / tkreg time)")
    ax.set_title(f"tkreg on {res['gpu']}, torch {res['torch']}, {res['date']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(args) -> int:
    res = run(args.ops, args.quick)
    print(table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.plot and not plot(res, args.plot):
        print("--plot needs matplotlib; skipped", file=sys.stderr)
    return 0
