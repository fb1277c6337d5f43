"""The kernel sources as a maintainer reads them: no dead code, small modules, comments that say what
and why.

- Dead code: building every shipped variant's prim_func (the factories only, no lowering) calls
  every module-level function in kernels_src/, and every parameter with a default is set to
  something else by some call; a parameter no shipped variant changes is a constant, a function
  none calls is gone.
- Size: every module in kernels_src/, tkreg/ and build_tools/ within MAX_LINES (the launcher,
  tkreg/_csrc/launcher.c, within LAUNCHER_MAX_LINES).
- History stays out of the code: no comment or docstring names a tuning round, a count of past
  sessions, a commit to `git show` or the removed docs/sweeps/ (the tuning docs keep the history).
"""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
LAUNCHER_MAX_LINES = 700
CODE_DIRS = ("kernels_src", "tkreg", "build_tools")

# Run in a fresh interpreter so that what runs at import time is traced too.
# argv: package name, the folder holding it (appended to sys.path: the installed tkreg and
# build_tools stay first, as in tests/conftest.py).  Prints one JSON line: {"calls": n, "unused": [...]}.
TRACE = r'''
import collections, importlib, inspect, json, os, pkgutil, sys
name, where = sys.argv[1], sys.argv[2]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.abspath(where)] + [where]
prefix = os.path.join(where, *name.split(".")) + os.sep
CONST = (int, float, str, bool, type(None))
called = set()
changed = collections.defaultdict(set)   # (file, qualname) -> parameters some call set otherwise


def constant(v):
    return isinstance(v, CONST) or (isinstance(v, tuple) and all(constant(x) for x in v))


def same(v, d):
    return v is d or (constant(v) and constant(d) and type(v) is type(d) and v == d)


def hook(frame, event, arg):
    if event != "call":
        return
    co = frame.f_code
    if not co.co_filename.startswith(prefix) or "<" in co.co_qualname:
        return
    key = (co.co_filename, co.co_qualname)
    called.add(key)
    fn = frame.f_globals.get(co.co_name) if "." not in co.co_qualname else None
    if fn is None or getattr(fn, "__code__", None) is not co:
        return
    defaults = dict(zip(co.co_varnames[co.co_argcount - len(fn.__defaults__ or ()):co.co_argcount],
                        fn.__defaults__ or ()))
    defaults.update(fn.__kwdefaults__ or {})
    for p, d in defaults.items():
        if p not in changed[key] and not same(frame.f_locals.get(p), d):
            changed[key].add(p)


sys.setprofile(hook)
from build_tools import build, sources
n = 0
for ref in sources.resolve(name):
    for spec in sources.specs_of(ref):
        for arch in spec.archs:
            for v in spec.variants_for(arch):
                spec.factory(**build.factory_kwargs(spec.factory, v, arch))
                n += 1
sys.setprofile(None)

pkg = importlib.import_module(name)
mods = [pkg] + [importlib.import_module(m.name) for m in
                pkgutil.walk_packages(getattr(pkg, "__path__", []), name + ".")]
unused = []
for mod in mods:
    for fname, obj in sorted(vars(mod).items()):
        if not inspect.isfunction(obj) or obj.__module__ != mod.__name__:
            continue
        key = (obj.__code__.co_filename, obj.__code__.co_qualname)
        where_ = f"{mod.__name__}.{fname}"
        if key not in called:
            unused.append(f"{where_}: never called")
            continue
        for p in inspect.signature(obj).parameters.values():
            if p.default is not p.empty and p.name != "arch" and p.name not in changed[key]:
                unused.append(f"{where_}({p.name}={p.default!r}): no call sets it otherwise")
print(json.dumps({"calls": n, "unused": unused}))
'''


def unused_code(package: str, where: Path) -> tuple[int, list[str]]:
    """(factory calls made, ["module.function(param=default): ..."]) for the sources of `package`
    (a package or module importable from folder `where`)."""
    r = subprocess.run([sys.executable, "-c", TRACE, package, str(where)], capture_output=True, text=True,
                       cwd=where)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["calls"], out["unused"]


def dead_code_message(package: str, unused: list[str]) -> str:
    return (f"{package}: code no shipped variant uses -- make each parameter a constant (or delete it) "
            f"and delete each function never called:\n  " + "\n  ".join(unused))


@pytest.mark.slow   # about a minute on two cores: every shipped variant's prim_func, traced
def test_every_kernel_function_and_parameter_is_used_by_a_shipped_variant():
    pytest.importorskip("tilelang")
    calls, unused = unused_code("kernels_src", ROOT)
    assert calls > 100
    assert not unused, dead_code_message("kernels_src", unused)


SYNTHETIC = '''
from tkreg.spec import OpSpec, Tensor, Variant


def _helper(x, scale=1):        # called, but always with scale=1
    return x * scale


def _staged(x):                 # nothing calls it
    return x


def _at_import(n, wide=False):  # runs at import time only, with wide=True
    return n * (2 if wide else 1)


TABLE = _at_import(4, wide=True)


def kernel(N, dtype, threads=128, stages=2, arch="sm_90a"):
    return _helper(N) + threads + stages


SPECS = (OpSpec(name="t.dead", tensors=(Tensor("x", ("M", "N"), dtypes=("bfloat16",)),
                                        Tensor("out", ("M", "N"), dtype_of="x", role="output")),
                factory=kernel,
                variants=(Variant({"N": 256, "dtype": "bfloat16", "threads": 256}),
                          Variant({"N": 512, "dtype": "bfloat16", "threads": 128}))),)
'''


def test_the_dead_code_check_finds_unused_parameters_and_functions(tmp_path):
    pkg = tmp_path / "deadkern"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .ops import SPECS\n")
    (pkg / "ops.py").write_text(textwrap.dedent(SYNTHETIC))
    calls, unused = unused_code("deadkern", tmp_path)
    assert calls == 4   # two variants, each on both default archs
    assert sorted(unused) == ["deadkern.ops._helper(scale=1): no call sets it otherwise",
                              "deadkern.ops._staged: never called",
                              "deadkern.ops.kernel(stages=2): no call sets it otherwise"]
    # threads (one variant keeps the default, one does not), wide (set at import), arch: not listed
    msg = dead_code_message("deadkern", unused)
    assert "make each parameter a constant" in msg and "_staged: never called" in msg


def _modules(*dirs: str, suffix: str = ".py"):
    for d in dirs:
        for f in sorted((ROOT / d).rglob("*" + suffix)):
            if "__pycache__" not in f.parts and f.is_file():
                yield f


def test_modules_stay_small():
    long = [f"{f.relative_to(ROOT)}: {n} lines" for f in _modules(*CODE_DIRS)
            if (n := len(f.read_text().splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them by what they hold):\n  " + "\n  ".join(long)
    launcher = ROOT / "tkreg" / "_csrc" / "launcher.c"
    assert len(launcher.read_text().splitlines()) <= LAUNCHER_MAX_LINES


# What a comment must not say (the code's history goes to docs/<family>-tuning.md): a tuning round
# ("round 23", "sweep r29b", "r23n.py"), a count of sessions ("the 5th session"), `git show`, docs/sweeps.
HISTORY = re.compile(r"\bround\s+\d+\b|\br\d+[a-z]?\.py\b|\b(?:sweep|round)s?\s+r\d+[a-z]?\b"
                     r"|\b\d+(?:st|nd|rd|th)\s+session\b"
                     r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last)\s+session\b"
                     r"|\bgit\s+show\b|\bdocs/sweeps\b", re.I)
DOC_BEFORE = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


def history_mentions(text: str) -> list[tuple[int, str]]:
    """(line, text) of each comment or docstring (a string literal standing as a statement) in
    Python source `text` that names what HISTORY matches."""
    hits, prev = [], tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and prev in DOC_BEFORE):
            hits += [(tok.start[0] + i, line.strip()) for i, line in enumerate(tok.string.splitlines())
                     if HISTORY.search(line)]
        if tok.type != tokenize.COMMENT:
            prev = tok.type
    return hits


def test_no_comment_narrates_history():
    hits = [f"{f.relative_to(ROOT)}:{n}: {line}" for f in _modules(*CODE_DIRS)
            for n, line in history_mentions(f.read_text())]
    for f in [*_modules("tkreg", suffix=".c"), *_modules("tkreg", suffix=".h")]:   # the launcher: every line
        hits += [f"{f.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in
                 enumerate(f.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not hits, ("comments naming a tuning round, a count of sessions, `git show` or docs/sweeps "
                      "(say what and why; history goes to docs/<family>-tuning.md):\n  " + "\n  ".join(hits))


@pytest.mark.parametrize("text, found", [
    ("# measured in round 23 (H200)\nx = 1\n", True),
    ("def f():\n    '''Kept from sweep r29b.'''\n", True),
    ("# see docs/sweeps/fp8_ring.py\n", True),
    ("# as the 3rd session found\n", True),
    ("# git show 1a2b3c for the old kernel\n", True),
    ("x = 'round 3'   # a string that is no comment\n", False),
    ("# rounds to nearest even; 128 rows a CTA\n", False),
    ("# a 4th-order polynomial, r2 = x * x\n", False),
])
def test_history_pattern(text, found):
    assert bool(history_mentions(text)) == found
