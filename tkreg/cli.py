"""`tkreg` / `python -m tkreg`: list, doctor, verify, bench."""
from __future__ import annotations

import argparse
import json
import platform
import sys


def _list(args) -> int:
    from .api import list_ops
    ops = list_ops()
    if args.json:
        print(json.dumps(ops, indent=1))
        return 0
    if args.markdown:
        print(markdown_table(ops))
        return 0
    if not ops:
        print("no ops registered (see `tkreg doctor`)")
        return 1
    w = max([26] + [len(o["op"]) + 1 for o in ops])
    print(f"{'op':{w}} {'archs':18} {'dtypes':24} {'variants':24} from")
    for o in ops:
        dt = "; ".join(f"{k}: {'/'.join(v)}" for k, v in o["dtypes"].items())
        nv = ", ".join(f"{a}: {len(v)}" for a, v in o["variants"].items())
        print(f"{o['op']:{w}} {','.join(o['archs']):18} {dt:24} {nv:24} {o['owner']}")
    return 0


def _signature(o: dict) -> str:
    sig = o["signature"]
    ins = [f"{t['name']}[{', '.join(t['shape'])}]" + ("!" if t["role"] == "inplace" else "")
           for t in sig["tensors"] if t["role"] in ("input", "inplace")]
    ins += [f"{s['name']}={s['default']}" for s in sig["scalars"]]
    outs = [f"{t['name']}[{', '.join(t['shape'])}]" for t in sig["tensors"] if t["role"] == "output"]
    return f"({', '.join(ins)}) -> " + (", ".join(outs) if outs else "in place")


def markdown_table(ops: list) -> str:
    """The README's ops table (`tkreg list --markdown`); `!` marks tensors written in place."""
    rows = ["| op | signature | dtypes | variants (sm_90a / sm_100a) | what |", "|---|---|---|---|---|"]
    for o in ops:
        dt = "; ".join(f"{k}: {'/'.join(v)}" for k, v in o["dtypes"].items())
        nv = " / ".join(str(len(o["variants"].get(a, []))) for a in ("sm_90a", "sm_100a"))
        rows.append(f"| `{o['op']}` | `{_signature(o)}` | {dt} | {nv} | {o['doc']} |")
    return "\n".join(rows)


def _doctor(args) -> int:
    from . import __version__, env
    from .registry import ARCH_OF_CAPABILITY
    from .runtime import RUNTIME
    print(f"tkreg {__version__} on Python {platform.python_version()} ({platform.machine()})")
    try:
        import torch
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    except ImportError:
        print("torch: not importable")
    reg = RUNTIME.registry.complete()
    have_archs = sorted({a for e in reg.entries.values() for a in e.sources})
    try:
        from .driver_api import driver_info
        from .native import SHIM_STATE, launcher
        launcher()
        print("tensor reads: " + ("fast path (" if SHIM_STATE["active"] else "attribute path (") + SHIM_STATE["why"] + ")")
        ver, caps = driver_info()
        print(f"CUDA driver {ver // 1000}.{ver % 1000 // 10}; {len(caps)} GPU(s)")
        for i, cap in enumerate(caps):
            arch = ARCH_OF_CAPABILITY.get(tuple(cap))
            served = arch in have_archs
            how = (f"served by pack {arch}" if served else
                   "no pack: ops raise UnsupportedDeviceError" + (" (TKREG_FALLBACK=reference: torch reference runs)"
                                                                 if env.fallback_reference() else ""))
            lacking = [s.label for s in reg.sources if s.archs and arch not in s.archs]
            if served and lacking:
                how += f"; not by {', '.join(lacking)} (their ops raise UnsupportedDeviceError here)"
            print(f"  cuda:{i}: compute capability {cap[0]}.{cap[1]} -> {how}")
    except Exception as e:  # noqa: BLE001 - doctor reports, never fails on a missing driver
        print(f"CUDA driver: unavailable ({e})")
    print("packs:")
    for s in reg.sources:
        print(f"  {s.label}: {s.state}" + (f"; archs {', '.join(s.archs)}; {len(s.ops)} op(s)" if s.archs else "")
              + (f" [{s.path}]" if s.path else ""))
        for note in s.notes:
            print(f"    ! {note}")
    _doctor_plugins(reg)
    switches = env.in_force()
    print("environment: " + (", ".join(f"{k}={v}" for k, v in switches.items()) or "no TKREG_* switch set"))
    for k, v in env.SWITCHES.items():
        print(f"  {k}: {v}")
    keys = {n: [v.key for v in e.spec.variants] for n, e in reg.entries.items()}
    for entry in env.unmatched_skip_entries(keys):
        print(f"  ! TKREG_SKIP_VARIANTS entry {entry!r} matches no variant of any op: `tkreg list` shows the keys "
              "(renamed keys: docs/key-renames.json)")
    return 0


def _doctor_plugins(registry) -> None:
    """The `tkreg.kernels` entry points installed, and which of them the switches keep out."""
    from . import env, plugins
    found = plugins.installed()
    seen = {s.plugin: s for s in registry.sources if s.plugin}
    allow = env.plugin_allow_list()
    print(f"plugins (entry-point group {plugins.GROUP}): "
          + ("disabled by TKREG_DISABLE_PLUGINS" if env.plugins_disabled() else
             f"allow-list TKREG_PLUGINS={','.join(sorted(allow))}" if allow is not None else
             f"{len(found)} installed"))
    for p in found:
        why = (seen[p.name].state.partition(":")[0] + " (see packs)" if p.name in seen else
               "not loaded: TKREG_DISABLE_PLUGINS" if env.plugins_disabled() else
               "not loaded: not in TKREG_PLUGINS" if allow is not None and p.name not in allow else "")
        print(f"  {p.name} = {p.value}" + (f" ({p.dist})" if p.dist else "") + (f": {why}" if why else ""))


def _verify(args) -> int:
    from . import manifest
    from .runtime import RUNTIME
    reg = RUNTIME.registry.complete()
    bad = 0
    for s in reg.sources:
        if s.state.startswith("skipped"):
            print(f"{'SKIPPED' if args.allow_skipped else 'FAIL'} {s.label}: {s.state}")
            bad += not args.allow_skipped
            continue
        if s.path is None or not s.archs:
            continue
        problems = manifest.verify(s.path)
        for p in problems:
            print(f"FAIL {s.label}: {p}")
        if not problems:
            n = sum(len(op["variants"]) for d in manifest.arch_dirs(s.path)
                    for op in manifest.load(d / manifest.FILENAME).raw_ops.values())
            print(f"ok   {s.label}: {n} cubin(s) in {', '.join(s.archs)}: sha256 and ELF arch match")
        bad += len(problems)
    if not any(s.archs for s in reg.sources):
        print("FAIL: no kernel pack found")
        return 1
    return 1 if bad else 0


def _bench(args) -> int:
    from .bench import main as bench_main
    return bench_main(args)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tkreg", description="tkreg kernel registry")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="registered ops, archs, dtypes and variants")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the README's ops table")
    p.set_defaults(fn=_list)
    sub.add_parser("doctor", help="driver, GPUs, packs, plugins and switches (works without a GPU)").set_defaults(fn=_doctor)
    v = sub.add_parser("verify", help="check every pack (manifest, sha256 and ELF arch of each cubin); exit 1 "
                       "on a problem or a skipped pack")
    v.add_argument("--allow-skipped", action="store_true", help="report skipped packs without failing")
    v.set_defaults(fn=_verify)
    b = sub.add_parser("bench", help="time each op beside its peers on this GPU")
    b.add_argument("--ops", nargs="*", default=None, help="op families (default all: see tkreg.bench.FAMILIES)")
    b.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    b.add_argument("--json", default=None, help="write results to this file")
    b.add_argument("--plot", default=None, help="write a bar chart (needs matplotlib)")
    b.set_defaults(fn=_bench)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
