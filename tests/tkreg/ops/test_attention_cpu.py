"""Flash attention (fixed-length and varlen) without a GPU: the installed variants against
kernels_src/attention's specs, TKREG_SKIP_VARIANTS, explain's reasons, validation, and the
reference's semantics (paged decode: test_attention_paged_decode_cpu.py)."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16


def qkv(b=1, sq=16, sk=16, hq=8, hk=2, d=128, dt=BF16):
    return (torch.randn(b, sq, hq, d, dtype=dt), torch.randn(b, sk, hk, d, dtype=dt),
            torch.randn(b, sk, hk, d, dtype=dt))


def test_wheel_ships_the_attention_specs(ships_the_specs):
    ships_the_specs("attention")


def test_sm90_d64_has_the_three_consumer_tile(shipped):
    """The 192-row d64 tile (three consumers) ships for fixed-length attention on sm_90a, both dtypes."""
    keys = shipped["tkreg.flash_attention"]["variants"]["sm_90a"]
    for dt in ("bfloat16", "float16"):
        assert any({"consumers=3", "dim=64", f"dtype={dt}"} <= set(k.split(",")) for k in keys), (dt, keys)
    assert not any("consumers=3" in k for k in shipped["tkreg.flash_attention_varlen"]["variants"]["sm_90a"])


def test_skip_switch_routes_sm100_attention_to_the_tiled_kernel():
    """TKREG_SKIP_VARIANTS (read when an op's variants are first listed, hence a fresh process):
    sm_100a's tcgen05 attention was never run on hardware, and the tiled kernel is its fallback."""
    code = ("import torch, tkreg\n"
            "q, k = torch.empty(1, 16, 8, 128, dtype=torch.bfloat16), torch.empty(1, 16, 2, 128, dtype=torch.bfloat16)\n"
            "cu = torch.tensor([0, 16], dtype=torch.int32)\n"
            "print(tkreg.explain('flash_attention', q, k, k, arch='sm_100a').chosen)\n"
            "print(tkreg.explain('flash_attention_varlen', q[0], k[0], k[0], cu, cu, 16, 16, arch='sm_100a').chosen)\n"
            "print(tkreg.explain('flash_attention', q, k, k, arch='sm_90a').chosen)\n")
    env = dict(os.environ, TKREG_SKIP_VARIANTS="tkreg.flash_attention:kernel=tcgen05; tkreg.flash_attention_varlen:"
               "dim=128,kernel=tcgen05")
    cwd = os.path.dirname(os.path.dirname(tkreg.__file__))   # the installed tkreg, not the source tree's
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=cwd).stdout
    fixed, varlen, hopper = out.split()
    assert "kernel=tiled" in fixed and "kernel=tiled" in varlen and "kernel=warp_specialized" in hopper, out
    env["TKREG_SKIP_VARIANTS"] = "kernel=tcgen05;kernel=tiled"   # nothing left for sm_100a: explain says why
    code = code.splitlines()[0:2] + ["print(tkreg.explain('flash_attention', q, k, k, arch='sm_100a'))"]
    out = subprocess.run([sys.executable, "-c", "\n".join(code)], env=env, capture_output=True, text=True,
                         check=True, cwd=cwd).stdout
    assert "no variant accepts" in out and "TKREG_SKIP_VARIANTS='kernel=tcgen05;kernel=tiled' removed" in out, out


@pytest.mark.parametrize("make, why", [(lambda: qkv(hq=5, hk=3), "HQ % HK == 0"), (lambda: qkv(d=96), "D == ")])
def test_no_kernel_for_the_shape_says_why(make, why):
    e = tkreg.explain("flash_attention", *make(), arch="sm_90a")
    assert e.chosen is None and why in str(e), str(e)


@pytest.mark.parametrize("make, why", [
    (lambda: qkv()[:2] + (torch.randn(1, 16, 1, 128, dtype=BF16),), "argument `v` has shape"),
    (lambda: (qkv()[0], qkv(dt=FP16)[1], qkv()[2]), "argument `k`"),
    (lambda: (qkv()[0], qkv()[1], qkv()[2][..., :64]), "argument `v`"),
])
def test_bad_inputs_name_the_argument(make, why):
    with pytest.raises((ValueError, TypeError), match=why):
        tkreg.explain("flash_attention", *make(), arch="sm_90a")


def test_varlen_offsets_must_be_int32():
    q, k, v = (x[0] for x in qkv())
    with pytest.raises(TypeError, match="`cu_seqlens_q` has dtype torch.int64; expected torch.int32"):
        tkreg.explain("flash_attention_varlen", q, k, v, torch.tensor([0, 16]), torch.tensor([0, 16]), 16, 16,
                      arch="sm_90a")


def _naive(q, k, v, causal, scale):
    """Textbook attention per (b, h), float64, with the bottom-right mask written out by loops."""
    B, Sq, HQ, D = q.shape
    Sk, HK = k.shape[1], k.shape[2]
    out = torch.zeros(B, Sq, HQ, D, dtype=torch.float64)
    lse = torch.full((B, HQ, Sq), float("-inf"), dtype=torch.float64)
    for b in range(B):
        for h in range(HQ):
            for i in range(Sq):
                keys = [j for j in range(Sk) if not causal or j <= i + Sk - Sq]
                if not keys:
                    continue
                s = torch.stack([q[b, i, h].double() @ k[b, j, h // (HQ // HK)].double() * scale for j in keys])
                lse[b, h, i] = torch.logsumexp(s, 0)
                p = torch.exp(s - lse[b, h, i])
                out[b, i, h] = sum(p[n] * v[b, j, h // (HQ // HK)].double() for n, j in enumerate(keys))
    return out, lse


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk", [(5, 5), (3, 7), (7, 3), (1, 4)])
def test_reference_is_textbook_attention(sq, sk, causal, seed):
    """Bottom-right causal alignment; rows that see no key give 0 and lse -inf."""
    q, k, v = (x.float() for x in qkv(2, sq, sk, 4, 2, 8))
    out, lse = reference.flash_attention(q, k, v, causal)
    want, wlse = _naive(q, k, v, causal, 1 / math.sqrt(8))
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), wlse, rtol=1e-5, atol=1e-6)
    if causal and sq > sk:
        assert (out[:, :sq - sk] == 0).all() and (lse[:, :, :sq - sk] == float("-inf")).all()


def test_reference_varlen_is_per_sequence(seed):
    lens = [3, 0, 5]
    q, k, v = (torch.randn(8, 4, 16) for _ in range(3))
    cu = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    out, lse = reference.flash_attention_varlen(q, k, v, cu, cu, 5, 5, causal=True, softmax_scale=0.5)
    for a, b in ((0, 3), (3, 8)):
        o, l = reference.flash_attention(q[None, a:b], k[None, a:b], v[None, a:b], True, 0.5)
        assert torch.equal(out[a:b], o[0]) and torch.equal(lse[:, a:b], l[0])
    assert max(lens) == 5


def test_fallback_routes_to_the_reference(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, k, v = qkv(1, 9, 9, 4, 1, 64, BF16)
    out, lse = tkreg.ops.flash_attention(q, k, v, causal=True)
    want = reference.flash_attention(q, k, v, True)
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
