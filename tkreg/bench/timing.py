"""Timing helpers every family's benchmark uses: CUDA-event medians, host loops, L2 rotation; and
what a standalone bench (`python -m tkreg.bench.<name> --json OUT`) prints and writes."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field

L2_BYTES = 60 * 2**20


@dataclass
class Row:
    op: str
    case: str
    impl: str
    ms: float
    metric: float = 0.0          # GB/s or TFLOP/s
    unit: str = ""
    pct_ceiling: float = 0.0
    vs: dict = field(default_factory=dict)   # peer -> peer_ms / our_ms (> 1: we are faster)


def need_torch():
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("tkreg bench needs a CUDA GPU")
    return torch


def gpu_ms(fn, arg_sets, reps=50, warmup=5) -> float:
    """Median CUDA-event time of fn(*args), rotating through arg_sets."""
    torch = need_torch()
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (s, e) in enumerate(ev):
        a = arg_sets[i % len(arg_sets)]
        s.record()
        fn(*a)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def queued_ms(fn, arg_sets, reps=50, warmup=3) -> float:
    """GPU time per call of fn(*args) with the calls queued behind a spin kernel (median of 3
    runs of `reps`): what a stream of back-to-back calls costs on the GPU.  Events around one
    call on an idle stream would also time the host's launch work (tens of µs on a slow VM),
    which hides the difference between kernels of a few tens of µs."""
    return queued_ms_paired([fn], arg_sets, reps, warmup)[0]


def queued_ms_paired(fns, arg_sets, reps=50, warmup=3, runs=3) -> list:
    """queued_ms of each of `fns`, their runs taken in turn (A B A B ...): a compute-bound GEMM
    heats the GPU within tens of ms and its clock drifts down, which would favour whichever
    kernel was timed first; taken in turn, both see the same drift."""
    torch = need_torch()
    for fn in fns:
        for i in range(warmup):
            fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = [[] for _ in fns]
    for _ in range(runs):
        for j, fn in enumerate(fns):
            # ~100 µs of spin per queued call: the host enqueues all `reps` calls before the GPU
            # reaches them (a compiled peer's guards and wrapper cost tens of µs a call)
            torch.cuda._sleep(min(200_000 * reps, 40_000_000))
            s.record()
            for i in range(reps):
                fn(*arg_sets[i % len(arg_sets)])
            e.record()
            torch.cuda.synchronize()
            per[j].append(s.elapsed_time(e) / reps)
    return [statistics.median(p) for p in per]


def host_us(fn, n=20000) -> float:
    """Wall time per call of a loop of n calls (tiny work: the host is the bottleneck)."""
    torch = need_torch()
    for _ in range(min(200, n)):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def burst_us(fn, k=200) -> float:
    """Host wall time per call of `k` back-to-back calls into an idle stream.

    The burst starts after a synchronize and 200 launches never fill the driver's queue, so the
    GPU cannot be what is timed.
    """
    torch = need_torch()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - t) / k * 1e6


def rotations(make, nbytes: int) -> list:
    """At least two input sets (up to 8), with twice L2's bytes passing between two uses of one
    set.  One set reused call after call keeps part of itself cached, by an amount that depends on
    where its buffers sit: the same kernel and the same-size copy then read 3-13% apart between
    allocations (docs/bench-method.md)."""
    return [make() for _ in range(min(8, 1 + -(-2 * L2_BYTES // max(nbytes, 1))))]


def copy_bandwidth() -> float:
    torch = need_torch()
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = gpu_ms(lambda: dst.copy_(src), [()], reps=30)
    return 2 * src.numel() / ms / 1e6


def compiled(fn):
    """torch.compile(fn) specialized to each shape.  A bench feeds one reference 20+ shapes: past
    dynamo's recompile limit (8) the function silently runs *eagerly* (docs/bench-method.md), so
    the limit is raised to cover every shape a bench times."""
    torch = need_torch()
    try:
        import torch._dynamo as dynamo
        for name in ("recompile_limit", "cache_size_limit"):    # the older name: torch < 2.7
            if hasattr(dynamo.config, name):
                setattr(dynamo.config, name, max(getattr(dynamo.config, name), 64))
        return torch.compile(fn, dynamic=False)
    except Exception:  # noqa: BLE001
        return None


def try_ms(fn, sets, timer=None, **kw) -> float | None:
    """A peer's time (`timer`, default gpu_ms), or None (with a note) when it fails, e.g.
    torch.compile unable to compile or a torch without that path: a broken peer must not end
    the benchmark."""
    try:
        return (timer or gpu_ms)(fn, sets, **kw)
    except Exception as e:  # noqa: BLE001
        print(f"tkreg bench: peer skipped: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        return None


def bandwidth_rows(op, case, nbytes, ceiling, ours, peers) -> list:
    """tkreg's row (GB/s, % of the copy ceiling, ratio to each peer) and one row per peer."""
    peers = {k: v for k, v in peers.items() if v}
    gbs = nbytes / ours / 1e6
    out = [Row(op, case, "tkreg", ours, gbs, "GB/s", 100 * gbs / ceiling, {k: v / ours for k, v in peers.items()})]
    for k, v in peers.items():
        out.append(Row(op, case, k, v, nbytes / v / 1e6, "GB/s", 100 * nbytes / v / 1e6 / ceiling))
    return out


# ---- mid sizes: prefill chunks, where the bar is a device copy of the same bytes --------------
MID_TOKENS = (1024, 2048, 3000, 4096)
MID_HIDDEN = (4096, 5120, 7168)
COPY = "same-size copy"


def mid_shapes(quick: bool) -> list:
    """(tokens, hidden) of the mid-size rows (quick: the two corners that matter most)."""
    if quick:
        return [(1024, 7168), (4096, 7168)]
    return [(m, h) for m in MID_TOKENS for h in MID_HIDDEN]


def copy_sets(nbytes: int) -> list:
    """(src, dst) uint8 pairs whose copy moves `nbytes` in all (half read, half written), rotated
    past L2 like the op's own inputs."""
    torch = need_torch()
    half = max(1, nbytes // 2)
    return rotations(lambda: (torch.empty(half, dtype=torch.uint8, device="cuda"),
                              torch.empty(half, dtype=torch.uint8, device="cuda")), nbytes)


def copy_ms(nbytes: int, timer=gpu_ms) -> float:
    """A device copy of `nbytes` (half read, half written) timed by `timer`: what any kernel moving
    the same bytes can reach, so a peer's ratio above copy / peer is out of reach for every kernel."""
    return timer(lambda s, d: d.copy_(s), copy_sets(nbytes))


def same_size_rows(op, case, nbytes, ceiling, fn, sets, peers=None) -> list:
    """Rows for one mid-size case, every time from `queued_ms` (kernels of 3-40 µs: events on an
    idle stream would time the host's launch work): tkreg, each peer, and a device copy of the same
    number of bytes timed just before (`dst.copy_(src)`; which goes first does not move the ratio,
    docs/bench-method.md).  tkreg's row carries vs[COPY] = copy time / tkreg time, the bar a
    memory-bound kernel is held to at these sizes."""
    copy = copy_ms(nbytes, queued_ms)
    ours = queued_ms(fn, sets)
    timed = {k: try_ms(v, sets, timer=queued_ms) for k, v in (peers or {}).items() if v}
    return bandwidth_rows(op, case + " (queued)", nbytes, ceiling, ours, {**timed, COPY: copy})


# ---- standalone benches: rows of times beside their peers, the result table, its JSON ----------
def paired_ms(fns: dict, sets, **kw) -> dict:
    """name -> queued_ms_paired time of each of `fns` (name -> callable), in order."""
    return dict(zip(fns, queued_ms_paired(list(fns.values()), sets, **kw)))


def ratio_rows(op, case, times: dict, flops=None, ours=lambda impl: impl.startswith("tkreg"),
               vs=lambda peer: f"vs {peer}") -> list:
    """One row dict per implementation of `times` (impl -> ms, in order): op, case, impl, ms, with
    `flops` tflops; each of ours (`ours(impl)`) also `vs(peer)` = peer ms / our ms for every peer
    (> 1: we are faster)."""
    rows = []
    for impl, ms in times.items():
        row = dict(op=op, case=case, impl=impl, ms=ms)
        if flops is not None:
            row["tflops"] = flops / ms / 1e9
        if ours(impl):
            row.update({vs(p): t / ms for p, t in times.items() if not ours(p)})
        rows.append(row)
    return rows


def print_rows(rows, op=None, case=24, impl=22, ratio_label=lambda key: key[3:]) -> None:
    """One line a row of `ratio_rows`: op (a column `op` wide; None: left out), case, impl (columns
    that wide), ms, TFLOP/s where the row has it, then each ratio ("vs ..." key) labelled `ratio_label(key)`."""
    for r in rows:
        cols = [f"{r['op']:{op}s}"] if op else []
        cols += [f"{r['case']:{case}s}", f"{r['impl'][:impl]:{impl}s}", f"{r['ms']:8.3f} ms",
                 f"{r['tflops']:7.1f} TFLOP/s" if "tflops" in r else " " * 15]
        vs = "  ".join(f"{v:.2f}x {ratio_label(k)}" for k, v in r.items() if k.startswith("vs"))
        print(" ".join(cols) + (f"  {vs}" if vs else ""), flush=True)


def result_table(title, args, torch, rows, header=None, extra=None) -> dict:
    """A bench's result as its --json writes it: title, date, GPU, torch and tkreg versions, the
    command (`args.module` and this process's arguments), the `header` of list rows (a model-level
    table, as BENCHMARKS.md's first screen shows it: `tkreg.bench.markdown(models=)`), rows, extra."""
    import tkreg
    return dict(title=title, date=time.strftime("%Y-%m-%d"), gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                tkreg=tkreg.__version__, command="python -m " + args.module + " " + " ".join(sys.argv[1:]),
                **({} if header is None else dict(header=header)), rows=rows, **(extra or {}))


def write_json(table: dict, path, **kw) -> dict:
    """`table` written to `path` (none: not written), returned."""
    if path:
        with open(path, "w") as f:
            json.dump(table, f, indent=1, **kw)
    return table


def standalone(module, doc, argv, quick, title, cases, case_rows, **columns) -> dict:
    """main() of a bench of ratio rows: --quick (`quick` says what it keeps) and --json; rows of
    `case_rows(*c)` for each c of `cases(quick)`, printed (`print_rows(**columns)`) as they come."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args(argv)
    a.module = module
    torch = need_torch()
    rows = []
    for c in cases(a.quick):
        got = case_rows(*c)
        print_rows(got, **columns)
        rows += got
    return write_json(result_table(title, a, torch, rows), a.json)
