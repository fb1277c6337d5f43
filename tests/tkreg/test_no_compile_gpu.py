"""No token count compiles anything: one fresh process calls tkreg.blocks' mhc_pre (fused, and the
differentiable chain with its backward), mhc_post and engram_gate at random T in 1..4096, a few
hundred calls in random order, H = 4096, m = 4, with tilelang, TVM and the build code unimportable
(a meta-path blocker installed before torch and tkreg) and no process startable (no nvcc, no
ptxas), as tests/tkreg/test_runtime_purity.py guards `import tkreg`.  Every cubin the launcher
loads is recorded (manifest.read_cubin, which checks each one's sha256 against its manifest):
each comes from the installed wheel's packs, and none twice.  Every output (and, on the chain,
every gradient) matches tkreg's torch reference on the same GPU."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

PROBE = r"""
import importlib.abc, os, subprocess, sys
BLOCKED = ('tilelang', 'tvm', 'tvm_ffi', 'build_tools', 'kernels_src')


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ImportError('blocked at run time: ' + name)
        return None


sys.meta_path.insert(0, Blocker())
def no_exec(*a, **k):
    raise AssertionError('run time started a process: %r' % (a[:1],))
subprocess.Popen = no_exec
os.execv = os.execve = os.posix_spawn = os.posix_spawnp = os.system = no_exec

import random
from pathlib import Path
import torch
import tkreg
from tkreg import blocks, manifest
from tkreg.reference import engram as R_ENGRAM, mhc as R_MHC

for name in BLOCKED[:2]:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise AssertionError(name + ' is importable')

PACKS = (Path(tkreg.__file__).parent / 'packs').resolve()
loads = []
real_read = manifest.read_cubin
def spy(arch_dir, record, op='?'):
    loads.append((Path(arch_dir).resolve() / record.cubin, op))
    return real_read(arch_dir, record, op)
manifest.read_cubin = spy

H, M, ROWS, CALLS, MAX_T = 4096, 4, 24, int(os.environ.get('CALLS', '300')), int(os.environ.get('MAX_T', '4096'))
EPS, PRE_EPS, SK_EPS, POST_MULT, REPEAT, CLAMP, E_EPS = 1e-6, 1e-6, 1e-6, 2.0, 10, 1e-6, 1e-20
dev = os.environ.get('PROBE_DEVICE', 'cuda')
g = torch.Generator(device=dev).manual_seed(0)
fn = torch.randn(ROWS, M * H, device=dev, generator=g) * (M * H) ** -0.5
scale = torch.tensor([0.5, 0.5, 1.0], device=dev)
base = torch.randn(ROWS, device=dev, generator=g) * 0.1
wh, we = (1 + 0.1 * torch.randn(2, M, H, device=dev, generator=g)).to(torch.bfloat16).unbind(0)
KW = dict(norm_eps=EPS, mhc_mult=M, post_mult_value=POST_MULT, pre_eps=PRE_EPS, sinkhorn_eps=SK_EPS,
          sinkhorn_repeat=REPEAT)


def bf(*s):
    return torch.randn(*s, device=dev, generator=g).to(torch.bfloat16)


def rel(a, b):
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def pre_ref(residual, w):
    mixes, _ = R_MHC.mhc_pre_norm_fn(residual, w, None, EPS)
    pre, post, comb = R_MHC.mhc_pre_split_mixes(mixes, scale, base, M, POST_MULT, PRE_EPS)
    return R_MHC.mhc_pre_apply_mix(residual, pre), post, R_MHC.sinkhorn_normalize(comb, REPEAT, SK_EPS)


def check(what, t, got, want, tol):
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, (what, t, i, a.shape, b.shape)
        e = rel(a, b)
        assert e < tol[i], f'{what} T={t} output {i}: relative error {e:.2e} (bound {tol[i]})'


rng = random.Random(0)
kinds = ['mhc_pre', 'mhc_pre_grad', 'mhc_post', 'engram_gate']
tokens = [1, MAX_T] + [rng.randint(1, MAX_T) for _ in range(CALLS - 2)]
rng.shuffle(tokens)
for i, t in enumerate(tokens):
    kind = kinds[rng.randrange(len(kinds))]
    residual = bf(t, M, H)
    if kind == 'mhc_pre':
        with torch.no_grad():
            x, (post, comb) = blocks.mhc_pre(residual, fn, scale, base, **KW)
        check(kind, t, (x, post, comb), pre_ref(residual, fn), (1e-2, 1e-3, 1e-3))
    elif kind == 'mhc_pre_grad':
        w = fn.clone().requires_grad_()
        r = residual.clone().requires_grad_()
        x, (post, comb) = blocks.mhc_pre(r, w, scale, base, **KW)
        gx = torch.randn_like(x)
        got = torch.autograd.grad((x.float() * gx).sum() + post.sum() + comb.square().sum(), (r, w))
        w2, r2 = fn.clone().requires_grad_(), residual.clone().requires_grad_()
        x2, post2, comb2 = pre_ref(r2, w2)
        want = torch.autograd.grad((x2.float() * gx).sum() + post2.sum() + comb2.square().sum(), (r2, w2))
        check(kind, t, (x, post, comb) + got, (x2, post2, comb2) + want, (1e-2, 1e-3, 1e-3, 1e-2, 1e-2))
    elif kind == 'mhc_post':
        x, post = bf(t, H), torch.rand(t, M, 1, device=dev, generator=g) * 2
        comb = torch.rand(t, M, M, device=dev, generator=g)
        check(kind, t, (blocks.mhc_post(x, residual, post, comb),), (R_MHC.mhc_post(x, residual, post, comb),), (1e-2,))
    else:
        k, v = bf(t, M, H), bf(t, H)
        got = blocks.engram_gate(residual, k, v, wh, we, CLAMP, E_EPS)
        check(kind, t, (got,), (R_ENGRAM.engram_gate(residual, k, v, wh, we, CLAMP, E_EPS)[0],), (1e-2,))
if dev == 'cuda':
    torch.cuda.synchronize()

leaked = sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED)
assert not leaked, leaked
outside = [str(p) for p, _ in loads if not p.is_relative_to(PACKS)]
assert not outside, 'cubins loaded from outside the wheel: %s' % outside
twice = sorted({str(p) for p, _ in loads if sum(q == p for q, _ in loads) > 1})
assert not twice, 'cubins loaded more than once: %s' % twice
print('CALLS', len(tokens), 'CUBINS', len(loads), sorted({op for _, op in loads}))
"""


def probe(**env):
    env = {**{k: v for k, v in os.environ.items() if k != "TKREG_FALLBACK"}, **env}
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tempfile.gettempdir(),
                       env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.gpu
def test_no_token_count_compiles():
    line = probe()
    assert line.startswith("CALLS 300 CUBINS "), line
    print(line)


def test_the_probe_itself_on_the_cpu_reference():
    """The same script on the CPU (TKREG_FALLBACK=reference, a dozen calls): its guards let the
    run time through and its checks pass, so a GPU failure is the kernels' or the loader's."""
    assert probe(PROBE_DEVICE="cpu", TKREG_FALLBACK="reference", CALLS="12", MAX_T="64").startswith("CALLS 12 CUBINS 0")
