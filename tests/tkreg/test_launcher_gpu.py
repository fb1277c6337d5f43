"""The launcher on a real GPU, across op families: empty problems, device and stride checks before
launch, the per-op decision memo and repeated-facts cache, streams, CUDA graph capture, first
calls racing from threads, a second device, and a block of several ops under torch.compile.
From the installed wheel, against the torch references."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
ops = tkreg.ops
TOL_BF16 = dict(rtol=1.6e-2, atol=1e-2)


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def test_empty_problems_launch_nothing():
    x = torch.empty(0, 4096, dtype=BF16, device="cuda")
    assert tkreg.ops.rms_norm(x, torch.randn(4096, dtype=BF16, device="cuda")).shape == (0, 4096)
    a, b = torch.empty(0, 64, dtype=BF16, device="cuda"), torch.randn(128, 64, dtype=BF16, device="cuda")
    assert tkreg.ops.gemm(a, b).shape == (0, 128)
    with pytest.raises(ValueError, match="zero-sized"):
        tkreg.ops.gemm(torch.empty(4, 0, dtype=BF16, device="cuda"), torch.empty(8, 0, dtype=BF16, device="cuda"))


def test_mixed_devices_are_refused():
    with pytest.raises(ValueError, match="`weight` is on cpu but earlier arguments are on cuda:0"):
        tkreg.ops.rms_norm(torch.randn(2, 2048, dtype=BF16, device="cuda"), torch.randn(2048, dtype=BF16))


def test_tma_stride_rule_is_a_clear_error():
    a, b = torch.randn(4, 12, dtype=BF16, device="cuda"), torch.randn(8, 12, dtype=BF16, device="cuda")
    with pytest.raises(ValueError, match="row stride of 24 bytes; TMA needs a multiple of 16"):
        tkreg.ops.gemm(a, b)


def test_decision_memo_follows_the_shape(seed):
    b = torch.randn(512, 256, dtype=BF16, device="cuda")
    for m in (16, 1000, 16, 64, 65, 1):
        a = torch.randn(m, 256, dtype=BF16, device="cuda")
        assert rel_err(tkreg.ops.gemm(a, b), a.double() @ b.double().t()) < 1e-2, m


def test_repeated_facts_still_check_what_can_differ(seed):
    """The launcher reuses the last call's checks and choice while a call's tensor facts (all but
    the data pointers) and scalars repeat them: pointers, strides, dtypes, optional tensors and
    scalars that differ must still be seen."""
    w = torch.randn(1024, dtype=BF16, device="cuda")
    x = torch.randn(2, 1024, dtype=BF16, device="cuda")
    buf = torch.randn(2 * 1024 + 1, dtype=BF16, device="cuda")
    out = torch.empty_like(x)
    for _ in range(2):  # the same facts as the call before, one data pointer 2 bytes off
        tkreg.ops.rms_norm(x, w, out=out)
        with pytest.raises(ValueError, match="not 16-byte aligned"):
            tkreg.ops.rms_norm(buf[1:].view(2, 1024), w, out=out)
    for eps in (1e-6, 0.5, 1e-6):  # a scalar is a fact too
        torch.testing.assert_close(tkreg.ops.rms_norm(x, w, eps), reference.rms_norm(x, w, eps), **TOL_BF16)
    a = torch.randn(64, 256, dtype=BF16, device="cuda")
    b = torch.randn(512, 256, dtype=BF16, device="cuda")
    bias = torch.randn(512, dtype=BF16, device="cuda")
    for _ in range(2):  # an optional tensor present, then absent: the variant follows
        assert rel_err(tkreg.ops.gemm(a, b, bias), a.double() @ b.double().t() + bias.double()) < 1e-2
        assert rel_err(tkreg.ops.gemm(a, b), a.double() @ b.double().t()) < 1e-2
    assert rel_err(tkreg.ops.gemm(a.half(), b.half()), a.double() @ b.double().t()) < 1e-2  # dtype
    with pytest.raises(ValueError, match="contiguous"):  # same shape, other strides
        tkreg.ops.gemm(torch.randn(256, 64, dtype=BF16, device="cuda").t(), b)


def test_non_default_stream(seed):
    x = torch.randn(4097, 4096, dtype=BF16, device="cuda")
    w = torch.randn(4096, dtype=BF16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = tkreg.ops.rms_norm(x, w)
        a = torch.randn(999, 512, dtype=BF16, device="cuda")
        c = tkreg.ops.gemm(a, x[:4096, :512].contiguous())
    s.synchronize()
    torch.testing.assert_close(y, reference.rms_norm(x, w), **TOL_BF16)
    assert rel_err(c, a.double() @ x[:4096, :512].double().t()) < 1e-2


def test_cuda_graph_capture_and_replay(seed):
    x = torch.randn(37, 4096, dtype=BF16, device="cuda")
    w = torch.randn(4096, dtype=BF16, device="cuda")
    b = torch.randn(1024, 4096, dtype=BF16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: modules load outside capture
        tkreg.ops.gemm(tkreg.ops.rms_norm(x, w), b)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        h = tkreg.ops.rms_norm(x, w)
        y = tkreg.ops.gemm(h, b)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        want = reference.gemm(reference.rms_norm(x, w), b)
        assert rel_err(y, want) < 1e-2


RACE = textwrap.dedent("""
    import threading, torch, tkreg
    from tkreg import reference
    x = torch.randn(333, 5120, dtype=torch.float16, device="cuda")
    w = torch.randn(5120, dtype=torch.float16, device="cuda")
    a = torch.randn(77, 512, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(640, 512, dtype=torch.bfloat16, device="cuda")
    barrier, errors = threading.Barrier(8), []
    def work(i):
        try:
            barrier.wait()
            y = tkreg.ops.rms_norm(x, w) if i % 2 else tkreg.ops.gemm(a, b)
            torch.cuda.synchronize()
            want = reference.rms_norm(x, w) if i % 2 else reference.gemm(a, b)
            err = ((y.double() - want.double()).norm() / want.double().norm()).item()
            assert err < 1e-2, err
        except BaseException as e:
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    assert not errors, errors
    print("RACE OK")
""")


def test_eight_threads_race_the_first_call():
    r = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, env=dict(os.environ),
                       cwd=tempfile.gettempdir())  # not the repo root: its tkreg/ would shadow the wheel
    assert r.returncode == 0 and "RACE OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device(seed):
    current = torch.cuda.current_device()
    for dev in ("cuda:1", "cuda:0", "cuda:1"):
        x = torch.randn(129, 2048, dtype=BF16, device=dev)
        w = torch.randn(2048, dtype=BF16, device=dev)
        y = tkreg.ops.rms_norm(x, w)
        assert y.device == x.device
        torch.testing.assert_close(y, reference.rms_norm(x, w), **TOL_BF16)
        a, b = torch.randn(300, 256, dtype=BF16, device=dev), torch.randn(512, 256, dtype=BF16, device=dev)
        assert rel_err(tkreg.ops.gemm(a, b), a.double() @ b.double().t()) < 1e-2
    assert torch.cuda.current_device() == current
    with pytest.raises(ValueError, match="share one CUDA device"):
        tkreg.ops.rms_norm(torch.randn(2, 2048, dtype=BF16, device="cuda:0"), torch.randn(2048, dtype=BF16, device="cuda:1"))


def test_attention_block_compiles_fullgraph(seed):
    """rms_norm -> qkv gemm -> rotary -> flash_attention -> o gemm, compiled whole, equals eager."""
    t, hidden, hq, hk, d = 256, 1024, 8, 2, 128
    x = torch.randn(1, t, hidden, dtype=BF16, device="cuda")
    w_norm = torch.rand(hidden, dtype=BF16, device="cuda") + 0.5
    w_qkv = torch.randn((hq + 2 * hk) * d, hidden, dtype=BF16, device="cuda") / hidden ** 0.5
    w_o = torch.randn(hidden, hq * d, dtype=BF16, device="cuda") / (hq * d) ** 0.5
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device="cuda") / d))
    f = torch.outer(torch.arange(t, dtype=torch.float32, device="cuda"), inv)
    cache = torch.cat((f.cos(), f.sin()), dim=-1).to(BF16)
    pos = torch.arange(t, device="cuda")

    def block(x):
        h = ops.rms_norm(x.view(t, hidden), w_norm)
        qkv_ = ops.gemm(h, w_qkv)
        q, k, v = qkv_.split([hq * d, hk * d, hk * d], dim=-1)
        q, k = q.contiguous(), k.contiguous()
        ops.rotary_embedding(pos, q, k, cache)
        o, _ = ops.flash_attention(q.view(1, t, hq, d), k.view(1, t, hk, d), v.view(1, t, hk, d), causal=True)
        return ops.gemm(o.view(t, hq * d), w_o)

    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)(x)
    assert torch.equal(compiled, eager)
