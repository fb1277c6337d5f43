"""At run time tkreg imports no tilelang/TVM and starts no compiler; `import tkreg` is cheap
(it reads the manifests and registers the torch custom ops, but loads no cubin)."""
from __future__ import annotations

import subprocess
import tempfile
import sys

PROBE = r"""
import builtins, subprocess, sys, os
import torch  # as every user has: what tkreg's own import costs is measured below
real_import = builtins.__import__
def guard(name, *a, **k):
    if name.split('.')[0] in ('tilelang', 'tvm', 'tvm_ffi', 'build_tools', 'kernels_src'):
        raise AssertionError('run time imported ' + name)
    return real_import(name, *a, **k)
builtins.__import__ = guard
def no_exec(*a, **k):
    raise AssertionError('run time started a process: %r' % (a[:1],))
subprocess.Popen = no_exec
os.execv = os.execve = os.posix_spawn = no_exec
import time
t = time.perf_counter()
import tkreg
dt = time.perf_counter() - t
assert not [m for m in sys.modules if m.split('.')[0] in ('tilelang', 'tvm')]
os.environ['TKREG_FALLBACK'] = 'reference'
x = torch.randn(3, 4096, dtype=torch.bfloat16)
tkreg.ops.rms_norm(x, torch.randn(4096, dtype=torch.bfloat16))
tkreg.list_ops()
tkreg.explain('gemm', torch.empty(5, 64, dtype=torch.bfloat16), torch.empty(8, 64, dtype=torch.bfloat16), arch='sm_90a')
from tkreg import cli
cli.main(['verify'])
print('IMPORT_S', dt)
"""


def test_no_tilelang_no_compiler_at_run_time():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stdout + r.stderr
    dt = float(r.stdout.split("IMPORT_S")[1])
    assert dt < 0.5, f"import tkreg took {dt:.3f} s"
