"""Registry and launcher checks that need no GPU: dispatch, validation, packs, fallback."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tkreg
from tkreg import manifest, reference
from tkreg.errors import NoKernelError, PackError, UnsupportedDeviceError
from tkreg.registry import ARCH_OF_CAPABILITY, BUILTIN_PACKS, Registry
from tkreg.runtime import Runtime

BF16, FP16 = torch.bfloat16, torch.float16


def test_arch_mapping():
    assert ARCH_OF_CAPABILITY[(9, 0)] == "sm_90a"
    assert ARCH_OF_CAPABILITY[(10, 0)] == "sm_100a"
    assert (8, 0) not in ARCH_OF_CAPABILITY


def test_builtin_packs_hold_both_archs():
    ops = {o["op"]: o for o in tkreg.list_ops()}
    for name in ("tkreg.rms_norm", "tkreg.gemm"):
        assert ops[name]["archs"] == ["sm_100a", "sm_90a"], ops[name]


# (arch, M, N) -> the gemm shape class and tile it gets on a 132-SM GPU (kernels_src/gemm.py CLASSES)
GEMM_CLASSES = [("sm_90a", 1, 1000, "decode-16", "block_M=16,"), ("sm_90a", 32, 4096, "decode-32", "block_M=32,"),
                ("sm_90a", 8, 16384, "decode-wide", "block_N=256,"), ("sm_90a", 64, 8192, "small", "block_M=64,block_N=64,"),
                ("sm_90a", 128, 8192, "mid-64", "block_M=64,block_N=128,"),
                ("sm_90a", 256, 8192, "mid-128", "block_K=64,block_M=128,block_N=128,"),
                ("sm_90a", 256, 7168, "mid-112", "block_M=128,block_N=112,"),
                ("sm_90a", 1024, 4096, "large", "block_M=128,block_N=256,"),
                ("sm_90a", 2048, 7168, "large-224", "block_M=128,block_N=224,"),
                ("sm_90a", 16384, 7168, "large", "block_M=128,block_N=256,"),
                ("sm_90a", 100000, 8, "mid-112", "block_M=128,block_N=112,"),   # the narrowest tile wastes least
                ("sm_100a", 1, 1000, "small", "block_M=128,block_N=128,"),
                ("sm_100a", 1024, 4096, "large", "block_M=128,block_N=256,")]


@pytest.mark.parametrize("arch, m, n, cls, tile", GEMM_CLASSES)
def test_gemm_shape_classes(arch, m, n, cls, tile):
    """What an H200 (132 SMs) would run, asked on the CPU: `sm_count=` stands in for the device.
    The chosen key names the class (explain's answer to "which class does this shape get")."""
    a, b = torch.empty(m, 256, dtype=BF16), torch.empty(n, 256, dtype=BF16)
    e = tkreg.explain("gemm", a, b, arch=arch, sm_count=132)
    assert f"shape_class={cls}," in e.chosen and tile in e.chosen and "bias=false" in e.chosen, e
    with_bias = tkreg.explain("gemm", a.half(), b.half(), torch.empty(n, dtype=FP16), arch=arch, sm_count=132)
    assert tile in with_bias.chosen and "bias=true" in with_bias.chosen and "float16" in with_bias.chosen


# (M, N, K) -> the fp8_gemm shape class on a 132-SM GPU (kernels_src/fp8_gemm.py CLASSES)
FP8_CLASSES = [(1, 4096, 14336, "decode-ws-split"), (16, 1000, 8192, "decode-ws-split"), (1, 4096, 4096, "decode-ws"),
               (16, 28672, 4096, "decode-ws"), (8, 5120, 1024, "decode-ws"), (17, 4096, 14336, "decode-ws-32-split"),
               (64, 4096, 8192, "decode-ws-32-split"), (32, 28672, 4096, "decode-ws-32"), (64, 4096, 4096, "decode-ws-32"),
               (33, 8192, 8192, "decode-ws-64"), (64, 5120, 2048, "decode-ws-64"), (64, 28672, 4096, "mid-64"),
               (48, 1000, 512, "decode-ws-32"), (100, 1000, 512, "small"), (128, 8192, 1024, "mid-64"), (4096, 8192, 640, "ws-128")]


@pytest.mark.parametrize("m, n, k, cls", FP8_CLASSES)
def test_fp8_gemm_shape_classes(m, n, k, cls):
    f8, kb = torch.float8_e4m3fn, (k + 127) // 128
    e = tkreg.explain("fp8_gemm", torch.empty(m, k, dtype=f8), torch.empty(m, kb), torch.empty(n, k, dtype=f8),
                      torch.empty((n + 127) // 128, kb), arch="sm_90a", sm_count=132)
    assert f"shape_class={cls}," in e.chosen, e


# (M, N, K) -> the sm_100a class on a 148-SM B200: split-K into the most runs (8, 4, 2) whose CTAs fit
# in one wave, each at least 1024 deep (kernels_src/gemm.py split_k_classes); gemm / fp8_gemm names
SM100_SPLITS = [(1, 4096, 14336, "split-4", "split-4"), (64, 2048, 8192, "split-8", "split-8"),
                (1, 7168, 2048, "split-2", "split-2"), (16, 8192, 8192, "split-2", "split-2"),
                (1, 4096, 1024, "small", "tcgen05"), (1, 28672, 4096, "large", "tcgen05"),
                (4096, 4096, 4096, "large", "tcgen05")]


@pytest.mark.parametrize("m, n, k, cls, cls8", SM100_SPLITS)
def test_sm100_splits_k_where_tiles_leave_sms_idle(m, n, k, cls, cls8):
    a, b = torch.empty(m, k, dtype=BF16), torch.empty(n, k, dtype=BF16)
    for bias in ((), (torch.empty(n, dtype=BF16),)):
        e = tkreg.explain("gemm", a, b, *bias, arch="sm_100a", sm_count=148)
        assert f"shape_class={cls}," in e.chosen and f"bias={'true' if bias else 'false'}" in e.chosen, e
    f8, kb = torch.float8_e4m3fn, (k + 127) // 128
    e = tkreg.explain("fp8_gemm", torch.empty(m, k, dtype=f8), torch.empty(m, kb), torch.empty(n, k, dtype=f8),
                      torch.empty((n + 127) // 128, kb), arch="sm_100a", sm_count=148)
    assert f"shape_class={cls8}," in e.chosen, e


def test_sm_count_rules_on_cpu_tensors_need_sm_count():
    a, b = torch.empty(1024, 256, dtype=BF16), torch.empty(4096, 256, dtype=BF16)
    e = tkreg.explain("gemm", a, b, arch="sm_90a")
    assert any("SM_COUNT is unknown for CPU tensors: pass sm_count=" in why for _, _, why in e.rows)
    assert "block_N=256" in tkreg.explain("gemm", a, b, arch="sm_90a", sm_count=132).chosen
    assert "block_N=256" not in tkreg.explain("gemm", a, b, arch="sm_90a", sm_count=1000).chosen


@pytest.mark.parametrize("n", [1024, 4096, 7168])
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_rms_norm_picks_hidden_size_and_dtype(n, dt):
    e = tkreg.explain("rms_norm", torch.empty(3, n, dtype=dt), torch.empty(n, dtype=dt), arch="sm_90a")
    # 4096-7168: the resident-row kernel at that N (kernels_src/norm.py WPRE), 4096 two rows a CTA
    want = {1024: "threads=128", 4096: "max_n=4096,rows=2,threads=128,wpre=1", 7168: "max_n=8192,threads=256,wpre=1"}[n]
    assert e.chosen == f"N={n},dtype={str(dt)[6:]},{want}"
    assert sum(c for _, c, _ in e.rows) == 1


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm"])
@pytest.mark.parametrize("n", [8, 1000, 2040, 2056, 2880, 3584, 4088, 6144, 16384, 16392])
def test_other_hidden_sizes_take_the_any_n_kernel(n, op, dt):
    """Register-resident for 2048 < N <= 4096 (bf16: 4 slots a thread, the weight loaded with the row)
    and 8192 < N <= 16384, the two-pass kernel otherwise."""
    args = [torch.empty(3, n, dtype=dt)] * (2 if op == "fused_add_rms_norm" else 1) + [torch.empty(n, dtype=dt)]
    e = tkreg.explain(op, *args, arch="sm_90a")
    d = str(dt)[6:]
    want = (f"N=0,dtype={d},max_n=4096,threads=128,wpre=1" if 2048 < n <= 4096 and dt == BF16 else
            f"N=0,dtype={d},max_n=16384,threads=256" if 8192 < n <= 16384 else f"N=0,dtype={d},threads=256")
    assert e.chosen == want, str(e)


def test_no_variant_lists_every_candidate_with_a_reason():
    e = tkreg.explain("rms_norm", torch.empty(3, 1004, dtype=BF16), torch.empty(1004, dtype=BF16), arch="sm_90a")
    assert e.chosen is None
    assert all(why.startswith(("needs N ==", "needs N % 8 == 0", "`x` is")) for _, _, why in e.rows)
    assert any(why == "needs N % 8 == 0" for _, _, why in e.rows)
    assert "no variant accepts" in str(e)


def test_cpu_tensors_are_refused_naming_the_fix(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(ValueError, match="TKREG_FALLBACK=reference"):
        tkreg.ops.rms_norm(torch.randn(2, 1024, dtype=BF16), torch.randn(1024, dtype=BF16))


def test_calls_route_to_the_reference_on_the_cpu(monkeypatch, seed):
    """Routing, not math: typed, out= and tkreg.call reach the reference with TKREG_FALLBACK=reference."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x, w = torch.randn(5, 2048, dtype=BF16), torch.randn(2048, dtype=BF16)
    torch.testing.assert_close(tkreg.ops.rms_norm(x, w, 1e-5), reference.rms_norm(x, w, 1e-5), rtol=0, atol=0)
    out = torch.empty_like(x)
    assert tkreg.ops.rms_norm(x, w, out=out) is out
    a, b = torch.randn(7, 64, dtype=BF16), torch.randn(24, 64, dtype=BF16)
    torch.testing.assert_close(tkreg.call("tkreg.gemm", a, b), reference.gemm(a, b))


def test_unsupported_arch_message(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    rt = Runtime(Registry())
    monkeypatch.setattr(rt, "arch_of", lambda dev: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    e = rt.registry.entry("tkreg.rms_norm")
    with pytest.raises(UnsupportedDeviceError, match=r"8\.0.*sm_100a.*sm_90a.*TKREG_FALLBACK"):
        rt.resolve(e, 0)
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    assert rt.resolve(e, 0) is None


# ---- bad input, each class -------------------------------------------------------------------
def rms(x, w, **kw):
    return tkreg.ops.rms_norm(x, w, **kw)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: rms(torch.randn(2, 1024), torch.randn(1024)), TypeError, "`x` has dtype torch.float32; expected torch.float16 or torch.bfloat16"),
    (lambda: rms(torch.randn(2, 1024, dtype=BF16), torch.randn(1024, dtype=FP16)), TypeError, "`weight` has dtype torch.float16; expected torch.bfloat16, the dtype of `x`"),
    (lambda: rms(torch.randn(1024, dtype=BF16), torch.randn(1024, dtype=BF16)), ValueError, "`x` must have 2 dims"),
    (lambda: rms(torch.randn(2, 1024, dtype=BF16), torch.randn(512, dtype=BF16)), ValueError, r"`weight` has shape \(512,\); expected \(1024,\)"),
    (lambda: rms(torch.randn(1024, 2, dtype=BF16).t(), torch.randn(1024, dtype=BF16)), ValueError, "`x` must be contiguous"),
    (lambda: rms(torch.randn(2, 1025, dtype=BF16)[:, 1:], torch.randn(1024, dtype=BF16)), ValueError, "`x` must be contiguous"),
    (lambda: rms(torch.randn(2 * 1024 + 1, dtype=BF16)[1:].view(2, 1024), torch.randn(1024, dtype=BF16)), ValueError, "not 16-byte aligned"),
    (lambda: rms(torch.empty(2**21, 1024, dtype=BF16, device="meta"), torch.empty(1024, dtype=BF16, device="meta")), ValueError, "int32"),
    (lambda: rms("x", torch.randn(1024, dtype=BF16)), TypeError, "`x` must be a torch.Tensor"),
    (lambda: rms(None, torch.randn(1024, dtype=BF16)), TypeError, "`x` is required"),
    (lambda: rms(torch.randn(2, 1024, dtype=BF16), torch.randn(1024, dtype=BF16), out=torch.empty(3, 1024, dtype=BF16)), ValueError, "`out` has shape"),
    (lambda: rms(torch.randn(2, 1024, dtype=BF16), torch.randn(1024, dtype=BF16), out=torch.empty(2, 1024)), TypeError, "`out` has dtype"),
    (lambda: tkreg.ops.gemm(torch.randn(4, 8), torch.randn(4, 8)), TypeError, "`a` has dtype torch.float32; expected torch.float16 or torch.bfloat16"),
    (lambda: tkreg.ops.gemm(torch.randn(4, 8, dtype=BF16), torch.randn(4, 16, dtype=BF16)), ValueError, r"`b` has shape \(4, 16\); expected \(4, 8\)"),
    (lambda: tkreg.call("tkreg.gemm", torch.randn(4, 8, dtype=BF16)), TypeError, "missing tensor `b`"),
    (lambda: tkreg.call("tkreg.rms_norm", torch.randn(4, 8, dtype=BF16), torch.randn(8, dtype=BF16), epsilon=1.0), TypeError, "unexpected argument"),
    (lambda: tkreg.call("tkreg.nope"), NoKernelError, "unknown op 'tkreg.nope'"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input_classes(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


dims = st.integers(0, 9)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=dims, n=st.sampled_from([1024, 2048, 5120]), wn=st.sampled_from([1024, 2048, 5120]),
       dtx=st.sampled_from([BF16, FP16, torch.float32]), dtw=st.sampled_from([BF16, FP16, torch.float32]),
       transpose=st.booleans(), offset=st.sampled_from([0, 1, 8]))
def test_bad_inputs_never_reach_the_gpu(m, n, wn, dtx, dtw, transpose, offset, monkeypatch):
    """Whatever the mix, a CPU call either fails a named check or reaches the device check."""
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    x = torch.randn(m * n + offset, dtype=dtx)[offset:]
    x = x.view(n, m).t() if transpose and m > 1 else x.view(m, n)
    w = torch.randn(wn, dtype=dtw)
    valid = dtx in (BF16, FP16) and dtw == dtx and wn == n and not (transpose and m > 1) \
        and (offset * x.element_size() % 16 == 0 or m == 0)
    with pytest.raises((TypeError, ValueError)) as info:
        rms(x, w)
    text = str(info.value)
    assert text.startswith("tkreg.rms_norm")
    assert ("on the CPU" in text) == valid, text


# ---- packs -----------------------------------------------------------------------------------
def _copy_pack(tmp_path) -> Path:
    dst = tmp_path / "pack"
    shutil.copytree(BUILTIN_PACKS, dst)
    return dst


def test_builtin_packs_verify():
    assert manifest.verify(BUILTIN_PACKS) == []


def test_missing_and_corrupt_cubin(tmp_path):
    p = _copy_pack(tmp_path)
    m = manifest.load(p / "sm_90a" / "manifest.json")
    v = m.op("tkreg.gemm").variants[0]
    (p / "sm_90a" / v.cubin).write_bytes(b"\x7fELF garbage")
    with pytest.raises(PackError, match="sha256"):
        manifest.read_cubin(p / "sm_90a", v, "tkreg.gemm")
    (p / "sm_90a" / v.cubin).unlink()
    with pytest.raises(PackError, match="missing"):
        manifest.read_cubin(p / "sm_90a", v, "tkreg.gemm")
    problems = manifest.verify(p)
    assert len(problems) == 1 and "missing" in problems[0]


def test_elf_arch_mismatch_is_caught(tmp_path):
    p = _copy_pack(tmp_path)
    m90 = json.loads((p / "sm_90a" / "manifest.json").read_text())
    v = m90["ops"]["tkreg.gemm"]["variants"][0]
    m100 = json.loads((p / "sm_100a" / "manifest.json").read_text())
    data = (p / "sm_100a" / m100["ops"]["tkreg.gemm"]["variants"][0]["cubin"]).read_bytes()  # sm_100a code in sm_90a
    (p / "sm_90a" / v["cubin"]).write_bytes(data)
    import hashlib
    v["sha256"] = hashlib.sha256(data).hexdigest()
    manifest.dump_json(p / "sm_90a" / "manifest.json", m90)
    assert any("expected sm_90a" in x for x in manifest.verify(p))


@pytest.mark.parametrize("corrupt, msg", [
    (lambda t: "{not json", "corrupt manifest"),
    (lambda t: json.dumps({**json.loads(t), "schema": 99}), "newer than this tkreg"),
    (lambda t: json.dumps({**json.loads(t), "schema": 1}), "schema 1 .*rebuild the pack"),
    (lambda t: json.dumps({**json.loads(t), "arch": "sm_80"}), "sits in folder"),
    (lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "ops"}), "`ops` missing"),
])
def test_broken_pack_is_skipped_and_builtins_keep_working(tmp_path, corrupt, msg):
    p = _copy_pack(tmp_path)
    f = p / "sm_90a" / "manifest.json"
    f.write_text(corrupt(f.read_text()))
    r = Registry().ensure()
    with pytest.warns(RuntimeWarning, match=msg):
        r._add_pack(p, "test:broken")
    assert r.sources[-1].state.startswith("skipped")
    assert r.entry("tkreg.gemm").owner == "tkreg (built-in)"


def test_duplicate_op_without_extends_keeps_the_builtin(tmp_path):
    r = Registry().ensure()
    builtin = len(r.entry("tkreg.gemm").candidates("sm_90a"))
    with pytest.warns(RuntimeWarning, match="also defines tkreg.gemm"):
        r._add_pack(_copy_pack(tmp_path), "test:dup")
    assert r.entry("tkreg.gemm").owner == "tkreg (built-in)"
    assert len(r.entry("tkreg.gemm").candidates("sm_90a")) == builtin   # the copy's variants not added


def test_register_pack_adds_ops(tmp_path):
    p = _copy_pack(tmp_path)
    for arch in ("sm_90a", "sm_100a"):
        f = p / arch / "manifest.json"
        m = json.loads(f.read_text())
        op = m["ops"].pop("tkreg.gemm")
        op["spec"]["name"] = "mine.gemm"
        m["ops"] = {"mine.gemm": op}
        manifest.dump_json(f, m)
    r = Registry()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a sound pack loads without a word
        r.register_pack(p)
    assert r.entry("mine.gemm").owner.startswith("register_pack:")
    assert "tkreg.rms_norm" in r.entries


@pytest.mark.parametrize("setting, op, key, skipped", [
    ("kernel=tcgen05", "tkreg.flash_attention", "dim=64,dtype=bfloat16,kernel=tcgen05,varlen=false", True),
    ("kernel=tcgen05", "tkreg.flash_attention", "dim=64,dtype=bfloat16,kernel=tiled,varlen=false", False),
    (" tkreg.gemm:splits=4 ; kernel=tcgen05 ", "tkreg.gemm", "dtype=bfloat16,splits=4", True),
    ("tkreg.gemm:splits=4", "tkreg.fp8_gemm", "splits=4", False),          # scoped to another op
    ("dim=64,kernel=ws", "tkreg.flash_attention", "dim=128,kernel=ws", False),   # every pair must match
    ("dim=64,kernel=ws", "tkreg.flash_attention", "dim=64,kernel=ws,tree=8", True),
    ("plug:ns.op:v=1", "plug:ns.op", "v=1", True),                           # a plugin's registry name
    ("", "tkreg.gemm", "splits=4", False), (";", "tkreg.gemm", "splits=4", False),
])
def test_skip_variants_setting(monkeypatch, setting, op, key, skipped):
    from tkreg import env
    monkeypatch.setenv("TKREG_SKIP_VARIANTS", setting)
    assert env.skipped_variant(op, key) is skipped
