"""`python -m build_tools build --out DIR [--arch A ...] [--only OP ...] [--src S] [-j N]`.

`python -m build_tools jit-time` times what tilelang's JIT would pay per kernel.
`python -m build_tools compare OLD NEW [--renames FILE]` compares two builds' cubins variant by variant.
`python -m build_tools cmake-dir` prints the folder holding TkregPack.cmake (`tkreg_add_pack`),
for a plugin's CMakeLists.txt.  `python -m build_tools new-plugin NAME` writes a plugin package.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tkreg.errors import SpecError

from .build import DEFAULT_ARCHS, BuildError, build
from .compile import CompileError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m build_tools", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile kernel sources into kernel packs")
    b.add_argument("--out", required=True, type=Path, help="pack folder; gets <arch>/manifest.json")
    b.add_argument("--arch", action="append", help=f"repeatable; default {' '.join(DEFAULT_ARCHS)}")
    b.add_argument("--only", action="append", default=[], help="op name (repeatable); default all")
    b.add_argument("--src", default="kernels_src", help="module, .py file or folder of kernel specs")
    b.add_argument("--namespace", default="tkreg", help="op namespace of the pack (plugins: their own)")
    b.add_argument("-j", "--jobs", type=int, default=None, help="parallel compiles; default all cores")
    b.add_argument("--cache", type=Path, default=None, help="compile cache (default $TKREG_CACHE_DIR; "
                   "else build/cache in a tkreg checkout, else ~/.cache/tkreg/build)")
    b.add_argument("--no-progress", action="store_true")
    sub.add_parser("cmake-dir", help="print the folder of TkregPack.cmake (tkreg_add_pack) for CMake")
    n = sub.add_parser("new-plugin", help="write a complete plugin package to start from (two ops, "
                       "references, wrappers, tests)")
    n.add_argument("name", help="the Python package name, e.g. mypkg")
    n.add_argument("--namespace", default=None, help="op namespace and entry-point name (default: NAME)")
    n.add_argument("--dist", default=None, help="distribution name (default: NAME with - for _)")
    n.add_argument("--out", type=Path, default=None, help="folder to write (default: ./DIST)")
    j = sub.add_parser("jit-time", help="time what tilelang's JIT pays per kernel (the cold-start contrast)")
    j.add_argument("--src", default="kernels_src")
    j.add_argument("--only", action="append", default=[])
    j.add_argument("--arch", default="sm_90a")
    c = sub.add_parser("compare", help="compare two builds' cubins by (arch, op, variant key): sha256 each")
    c.add_argument("old", type=Path, help="pack folder or tkreg wheel")
    c.add_argument("new", type=Path, help="pack folder or tkreg wheel")
    c.add_argument("--renames", type=Path, default=None, help="JSON {op: {old key: new key}} of renamed variant keys")
    c.add_argument("--allow-removed", action="store_true", help="variants of OLD missing from NEW do not fail")
    args = ap.parse_args(argv)
    if args.cmd == "cmake-dir":
        print(Path(__file__).resolve().parent / "cmake")
        return 0
    if args.cmd == "new-plugin":
        from .new_plugin import main as new_main
        try:
            return new_main(args)
        except (ValueError, FileExistsError) as e:
            print(f"build_tools: error: {e}", file=sys.stderr)
            return 1
    if args.cmd == "compare":
        from .compare_packs import main as compare_main
        return compare_main(args)
    if args.cmd == "jit-time":
        from .jit_time import main as jit_main
        return jit_main(args)
    try:
        rep = build(args.out, tuple(args.arch or DEFAULT_ARCHS), tuple(args.only), args.src,
                    args.jobs, args.namespace, args.cache, progress=not args.no_progress)
    except (BuildError, CompileError, SpecError) as e:
        print(f"build_tools: error: {e}", file=sys.stderr)
        return 1
    for arch, ops in rep.archs.items():
        for op, keys in sorted(ops.items()):
            print(f"{arch:8} {op:28} {len(keys)} variant(s)")
    print(f"{len(rep.compiled)} compiled, {len(rep.cached)} cached, {rep.seconds:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
