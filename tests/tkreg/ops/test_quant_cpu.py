"""Transpose, per-channel FP8, MXFP4, E5M6 and the dequant ops without a GPU: the installed variants
against kernels_src/quant's specs, explain's reasons, argument validation, reference semantics
against independent numpy bit-level implementations of MXFP4 and E5M6, and the typed functions
through the reference fallback (FP8 token-group and block quantization: test_quant_fp8_cpu.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tkreg
from tkreg.reference import quant as ref

BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
ops = tkreg.ops
OPS = ("batched_transpose", "per_channel_quant_fp8", "per_channel_quant_fp8_transpose",
       "silu_and_mul_per_channel_quant_fp8_transpose", "silu_and_mul_backward_quant_fp8",
       "per_token_group_quant_fp4", "per_token_group_dequant_fp4", "quant_e5m6", "dequant_e5m6",
       "group_dequant_fp8", "per_channel_dequant_fp8")


def test_family_is_registered_for_both_archs(shipped):
    for name in OPS:
        assert shipped[f"tkreg.{name}"]["archs"] == ["sm_100a", "sm_90a"], name
        assert all(shipped[f"tkreg.{name}"]["variants"].values()), name


def test_wheel_ships_the_quant_specs(ships_the_specs):
    """Every variant of kernels_src/quant (FP8 token-group and block ops included) is installed."""
    specs = ships_the_specs("quant")
    assert {f"tkreg.{n}" for n in OPS} <= set(specs)


# ---- what explain says where no variant serves the size -----------------------------------------
@pytest.mark.parametrize("name, args, rule", [
    ("per_token_group_quant_fp4", (torch.empty(3, 48, dtype=BF16),), "K % 32 == 0"),
    ("quant_e5m6", (torch.empty(3, 16392, dtype=BF16),), "K % 8 == 0 and K <= 16384"),
    ("quant_e5m6", (torch.empty(3, 100, dtype=BF16),), "K % 8 == 0 and K <= 16384"),
    ("per_channel_quant_fp8", (torch.empty(3, 100, dtype=BF16),), "K % 8 == 0"),
    ("silu_and_mul_backward_quant_fp8", (torch.empty(3, 64, dtype=BF16), torch.empty(3, 128, dtype=BF16)), "N % 256 == 0"),
])
def test_unserved_sizes_name_the_rule(name, args, rule):
    e = tkreg.explain(name, *args, arch="sm_90a")
    assert e.chosen is None
    assert any(why == f"needs {rule}" for _, _, why in e.rows), str(e)


# ---- validation (before any device check) ----------------------------------------------------
@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.transpose(torch.empty(4, 4, dtype=torch.float64)), TypeError, "1-, 2- or 4-byte dtype"),
    (lambda: ops.transpose(torch.empty(4, dtype=BF16)), ValueError, "`x` must have 2 dims"),
    (lambda: ops.batched_transpose(torch.empty(4, 4, dtype=BF16)), ValueError, "`x` must have 3 dims"),
    (lambda: ops.per_channel_quant_fp8(torch.empty(4, 64)), TypeError, "`x` has dtype torch.float32"),
    (lambda: ops.per_channel_quant_fp8(torch.empty(4, 64, dtype=BF16), s=torch.empty(4, 64)), ValueError,
     r"`s` has shape \(4, 64\); expected \(1, 64\)"),
    (lambda: ops.per_channel_quant_fp8(torch.empty(4, 64, dtype=BF16), transpose=True, q=torch.empty(4, 64, dtype=FP8)),
     ValueError, r"`q` has shape \(4, 64\); expected \(64, 4\)"),
    (lambda: ops.per_token_group_quant_fp4(torch.empty(4, 64, dtype=BF16), s=torch.empty(4, 2)), TypeError,
     "`s` has dtype torch.float32; expected torch.uint8"),
    (lambda: ops.silu_and_mul_backward_quant_fp8(torch.empty(4, 128, dtype=BF16), torch.empty(4, 256, dtype=FP16)),
     TypeError, "`x` has dtype torch.float16"),
    (lambda: ops.dequant_e5m6(torch.empty(4, 12, dtype=torch.uint8), torch.empty(3)), ValueError, "`s` has shape"),
    (lambda: ops.dequant_fp8(torch.empty(4, 128, dtype=FP8), torch.empty(4, 1), layout="rows"), ValueError,
     "layout='rows'"),
])
def test_bad_arguments_are_named(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


# ---- independent numpy bit-level implementations --------------------------------------------------
E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def np_e2m1(y: np.ndarray) -> np.ndarray:
    """Nearest e2m1 grid point, ties to the even code, saturating; sign from the float's sign bit."""
    a = np.abs(y).astype(np.float64)
    d = np.abs(a[..., None] - E2M1_GRID)
    best = d.min(-1, keepdims=True)
    cand = d == best
    code = np.where(cand[..., ::2].any(-1) & (cand.sum(-1) > 1),                 # a tie: the even code
                    np.argmax(cand & (np.arange(8) % 2 == 0), -1), np.argmax(cand, -1))
    sign = (y.astype(np.float32).view(np.uint32) >> 31).astype(np.uint8)
    return code.astype(np.uint8) | (sign << 3)


def np_fp4_quant(x: np.ndarray):
    m, k = x.shape
    g = x.astype(np.float32).reshape(m, k // 32, 32)
    amax = np.maximum(np.abs(g).max(-1), np.float32(6 * 2.0 ** -126))
    sf = (amax / np.float32(6)).astype(np.float32)
    mant, ex = np.frexp(sf.astype(np.float64))                 # sf = mant * 2^ex, mant in [0.5, 1)
    e = np.where(mant == 0.5, ex - 1, ex)                      # 2^e = 2^ceil(log2 sf)
    y = g * np.ldexp(np.float32(1), -e)[..., None].astype(np.float32)
    codes = np_e2m1(y).reshape(m, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, (e + 127).astype(np.uint8)


@pytest.mark.parametrize("spread", [0, 20, 60])
def test_fp4_matches_numpy(spread, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((9, 256)) * 2.0 ** rng.integers(-spread, spread + 1, (9, 1))).astype(np.float32)
    x[0, :32] = 0
    x[1, 32:64] = -0.0
    x[2, 64:96] = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4) * 2.0 ** -3   # exact midpoints
    xt = torch.from_numpy(x).to(BF16)
    q, s = ref.per_token_group_quant_fp4(xt)
    nq, ns = np_fp4_quant(xt.float().numpy())
    assert np.array_equal(s.numpy(), ns)
    assert np.array_equal(q.numpy(), nq)
    y = ref.per_token_group_dequant_fp4(q, s).float().numpy()
    want = (np.where(np.arange(16) >= 8, -1, 1) * np.tile(E2M1_GRID, 2))[
        np.stack([nq & 15, nq >> 4], -1).reshape(9, 256)] * np.ldexp(1.0, ns.astype(np.int64) - 127).repeat(32, 1)
    assert np.array_equal(y, want.astype(np.float32))


def test_fp4_kernel_code_formula_matches_the_reference():
    """An earlier kernel's e2m1 (magic-add rounding per range) equals the reference's compares."""
    ys = torch.cat([torch.randn(1 << 16) * 3, torch.linspace(-7, 7, 100001),
                    torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 2.0, 4.0, 0.0, -0.0, 1e-40, -1e-40])])
    a = ys.abs()
    lo, mid = a < 2, a < 4
    f = torch.where(lo, 2.0, torch.where(mid, 1.0, 0.5))
    off = torch.where(lo, 0, torch.where(mid, 2, 4))
    k = ((a * f) + 8388608.0).view(torch.int32) & 15
    c = torch.clamp(k + off, max=7) | ((ys.view(torch.int32) >> 28) & 8)
    assert torch.equal(c.to(torch.uint8), ref.e2m1_codes(ys))
    assert np.array_equal(ref.e2m1_codes(ys).numpy(), np_e2m1(ys.numpy()))


def test_fp4_kernel_fp16x2_lines_match_the_reference():
    """kernels_src/quant/fp4.py's e2m1: y to fp16 (cvt.rn), the min of 2a + 1024, a + 1026 and a / 2 + 1028
    each rounded once to fp16 (fma.rn.f16x2), the code = the min's low 3 bits | the fp16 sign, equals
    the reference's compares for every fp16 |y| <= 6 (the kernel's y is exact in fp16 from 2^-14 up)
    and for fp32 values that fp16 rounds to zero or a subnormal."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    y = np.concatenate([h[np.abs(h.astype(np.float32)) <= 6].astype(np.float32),
                        np.float32([1e-40, -1e-40, 2.0 ** -25, -2.0 ** -25, 3 * 2.0 ** -26, -(2.0 ** -15) * 1.3])])
    y16 = y.astype(np.float16)
    a = np.abs(y16).astype(np.float64)                 # 1024 + a fp16 value is exact in float64
    m = np.minimum(np.minimum((2 * a + 1024).astype(np.float16), (a + 1026).astype(np.float16)),
                   (a / 2 + 1028).astype(np.float16))
    code = (m.view(np.uint16) & 7) | ((y16.view(np.uint16) >> 12) & 8)
    assert len(y) > 2 * 17000
    assert np.array_equal(code.astype(np.uint8), ref.e2m1_codes(torch.from_numpy(y)).numpy())


def np_e5m6_pack(codes: np.ndarray) -> np.ndarray:
    """8 codes -> a 96-bit big-endian bit string h0..h7 -> three 32-bit words -> little-endian bytes."""
    m, k = codes.shape
    out = np.zeros((m, k // 8 * 3), dtype="<u4")
    for i in range(m):
        for j in range(k // 8):
            bits = "".join(format(int(c), "012b") for c in codes[i, 8 * j:8 * j + 8])
            out[i, 3 * j:3 * j + 3] = [int(bits[32 * w:32 * w + 32], 2) for w in range(3)]
    return out.view(np.uint8)


def np_round_e5m6(y: np.ndarray) -> np.ndarray:
    """y rounded to 7 significant bits, nearest even (the e5m6 value of a normal fp16-range y)."""
    mant, ex = np.frexp(y.astype(np.float64))            # mant in [0.5, 1)
    return np.ldexp(np.rint(mant * 128), ex - 7)


@pytest.mark.parametrize("ue8m0", [False, True])
def test_e5m6_matches_numpy(ue8m0, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((5, 64)) * 2.0 ** rng.integers(-8, 8, (5, 1))).astype(np.float32)
    xt = torch.from_numpy(x).to(BF16)
    p, s = ref.quant_e5m6(xt, ue8m0)
    xf = xt.float().numpy()
    amax = np.maximum(np.abs(xf).max(-1), np.float32(1e-4))
    sf = (amax / np.float32(65024)).astype(np.float32)
    if ue8m0:
        mant, ex = np.frexp(sf.astype(np.float64))
        sf = np.ldexp(1.0, np.where(mant == 0.5, ex - 1, ex)).astype(np.float32)
        inv = (1 / sf.astype(np.float64)).astype(np.float32)
    else:
        inv = (np.float32(65024) / amax).astype(np.float32)
    assert np.array_equal(s.numpy(), sf)
    y = (xf * inv[:, None]).astype(np.float32)
    codes = ref.e5m6_unpack(p).numpy()
    assert np.array_equal(np_e5m6_pack(codes), p.numpy())              # the 12-byte layout
    vals = ref.e5m6_values(torch.from_numpy(codes)).numpy()
    normal = np.abs(y) >= 2.0 ** -14
    assert normal.mean() > 0.9
    assert np.array_equal(vals[normal], np_round_e5m6(y[normal]).astype(np.float32))
    back = ref.dequant_e5m6(p, s).float().numpy()
    assert np.array_equal(back, torch.from_numpy(vals * sf[:, None]).to(BF16).float().numpy())


def test_e5m6_special_codes():
    y = torch.tensor([[65024.0, -65024.0, 0.0, -0.0, 2.0 ** -14, 1.0, 1.0 + 2 ** -7, 1.0 + 3 * 2 ** -7]])
    c = ref.e5m6_codes(y)[0].tolist()
    assert c[:4] == [0x7BF, 0xFBF, 0, 0x800]
    assert c[4] == 1 << 6 and c[5] == 15 << 6                  # exponent field, bias 15
    assert c[6] == 15 << 6 and c[7] == (15 << 6) + 2          # ties to even


# ---- per-channel FP8 ---------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 37, 300])
def test_per_channel_groups_are_128_tokens(m, seed):
    x = (torch.randn(m, 64) * 2.0 ** torch.randint(-6, 6, (1, 64)).float()).to(BF16)
    q, s = ref.per_channel_quant_fp8(x)
    assert s.shape == (-(-m // 128), 64)
    for g in range(s.shape[0]):
        amax = x.float()[128 * g:128 * (g + 1)].abs().amax(0).clamp_min(1e-4)
        assert torch.equal(s[g], (amax.double() / 448).float())
    qt, st = ref.per_channel_quant_fp8_transpose(x)
    assert torch.equal(qt.view(torch.uint8), q.t().contiguous().view(torch.uint8)) and torch.equal(st, s)
    y = ref.per_channel_dequant_fp8(q, s).float()
    assert ((y - x.float()).abs() <= x.float().abs() * (2 ** -4 + 2 ** -8) + s.repeat_interleave(128, 0)[:m] * 2 ** -10).all()
    assert torch.equal(ref.group_dequant_fp8(qt, st.t()), y.to(BF16).t())


def test_silu_backward_quant_reference(seed):
    x = torch.randn(6, 512, dtype=BF16) * 3
    dy = torch.randn(6, 256, dtype=BF16)
    dx = ref.silu_and_mul_backward_fp32(dy, x)
    from tkreg.reference.activation import silu_and_mul_backward
    assert torch.allclose(dx.to(BF16).float(), silu_and_mul_backward(dy, x).float(), rtol=2 ** -7, atol=1e-6)
    q, s = ref.silu_and_mul_backward_quant_fp8(dy, x)
    assert q.shape == (6, 512) and s.shape == (6, 4)


# ---- typed functions through TKREG_FALLBACK=reference on the CPU ------------------------------
@pytest.mark.parametrize("dt", [BF16, torch.float8_e5m2, torch.bool, torch.int32, torch.float32, torch.uint8])
def test_typed_transpose_views_any_dtype(dt, monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x = (torch.randn(2, 5, 7) * 4).to(dt)
    y = ops.batched_transpose(x)

    def same(a, b):
        return torch.equal(a.view(torch.uint8), b.contiguous().view(torch.uint8)) if dt.itemsize == 1 else torch.equal(a, b)
    assert y.dtype == dt and y.is_contiguous() and same(y, x.transpose(1, 2))
    assert same(ops.transpose(x[0]), x[0].t())
    out = torch.empty(7, 5, dtype=dt)
    assert ops.transpose(x[0], out=out) is out and same(out, x[0].t())


def test_typed_dequant_layouts(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x = torch.randn(130, 256, dtype=BF16)
    q, s = ops.per_channel_quant_fp8(x)
    qt, st = ops.per_channel_quant_fp8(x, transpose=True)
    assert qt.shape == (256, 130) and torch.equal(st, s)
    y = ops.dequant_fp8(q, s, layout="channel")
    assert torch.equal(ops.dequant_fp8(qt, st, layout="channel_transposed"), y.t())
    q, s = ops.per_token_group_quant_fp8(x, column_major_scales=True)
    assert torch.equal(ops.dequant_fp8(q, s), ops.per_token_group_dequant(q, s.contiguous()))
    q, s = ops.per_block_quant_fp8(x)
    assert torch.equal(ops.dequant_fp8(q, s, layout="block"), ops.per_block_dequant(q, s))
    q4, s4 = ops.per_token_group_quant_fp4(x)
    assert q4.shape == (130, 128) and s4.dtype == torch.uint8
    assert torch.equal(ops.per_token_group_dequant_fp4(q4, s4.view(torch.float8_e8m0fnu)),
                       ops.per_token_group_dequant_fp4(q4, s4))
    p, se = ops.quant_e5m6(x)
    assert p.shape == (130, 384) and se.shape == (130,)
    assert ops.dequant_e5m6(p, se).shape == (130, 256)


@pytest.mark.parametrize("op, args", [
    ("batched_transpose", lambda: (torch.randn(2, 5, 7, dtype=FP16),)),
    ("per_channel_quant_fp8", lambda: (torch.randn(130, 64, dtype=BF16), False)),
    ("per_channel_quant_fp8_transpose", lambda: (torch.randn(5, 64, dtype=BF16), True)),
    ("silu_and_mul_per_channel_quant_fp8_transpose", lambda: (torch.randn(5, 128, dtype=BF16), False)),
    ("silu_and_mul_backward_quant_fp8", lambda: (torch.randn(3, 128, dtype=BF16), torch.randn(3, 256, dtype=BF16), False)),
    ("per_token_group_quant_fp4", lambda: (torch.randn(3, 64, dtype=BF16),)),
    ("per_token_group_dequant_fp4", lambda: ref.per_token_group_quant_fp4(torch.randn(3, 64))),
    ("quant_e5m6", lambda: (torch.randn(3, 64, dtype=FP16), True)),
    ("dequant_e5m6", lambda: ref.quant_e5m6(torch.randn(3, 64))),
    ("per_channel_dequant_fp8", lambda: ref.per_channel_quant_fp8(torch.randn(130, 64))),
])
def test_opcheck(op, args, monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    from tkreg.runtime import RUNTIME
    RUNTIME.torch_op(f"tkreg.{op}")
    torch.library.opcheck(getattr(torch.ops.tkreg, op).default, args(),
                          test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))
