"""Registry and launcher checks that need no GPU: dispatch, validation, packs, fallback."""
from __future__ import annotations

import json
import re
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


def test_sm_count_rules_on_cpu_tensors_need_sm_count():
    a, b = torch.empty(1024, 256, dtype=BF16), torch.empty(4096, 256, dtype=BF16)
    e = tkreg.explain("gemm", a, b, arch="sm_90a")
    assert any("SM_COUNT is unknown for CPU tensors: pass sm_count=" in why for _, _, why in e.rows)
    assert "block_N=256" in tkreg.explain("gemm", a, b, arch="sm_90a", sm_count=132).chosen
    assert "block_N=256" not in tkreg.explain("gemm", a, b, arch="sm_90a", sm_count=1000).chosen


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


# ---- a refused pack says why where the user looks ---------------------------------------------
def _own_pack(tmp_path) -> Path:
    """A pack of one op, `mine.gemm`: the built-in gemm's spec and cubins under another name."""
    root = tmp_path / "mine"
    for arch in ("sm_90a", "sm_100a"):
        src = json.loads((BUILTIN_PACKS / arch / "manifest.json").read_text())
        op = src["ops"]["tkreg.gemm"]
        op["spec"]["name"] = "mine.gemm"
        (root / arch).mkdir(parents=True)
        for v in op["variants"]:
            shutil.copy(BUILTIN_PACKS / arch / v["cubin"], root / arch / v["cubin"])
        manifest.dump_json(root / arch / "manifest.json", {**src, "namespace": "mine", "ops": {"mine.gemm": op}})
    return root


def _variant(p: Path, arch: str) -> dict:
    return json.loads((p / arch / "manifest.json").read_text())["ops"]["mine.gemm"]["variants"][0]


def _flip_cubin(p: Path, arch="sm_100a"):
    f = p / arch / _variant(p, arch)["cubin"]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def _sm100_cubin_as_sm90(p: Path):
    """sm_100a code under an sm_90a record, its sha256 updated: only the ELF check sees it."""
    import hashlib
    f = p / "sm_90a" / "manifest.json"
    m = json.loads(f.read_text())
    v = m["ops"]["mine.gemm"]["variants"][0]
    data = (p / "sm_100a" / _variant(p, "sm_100a")["cubin"]).read_bytes()
    (p / "sm_90a" / v["cubin"]).write_bytes(data)
    v["sha256"] = hashlib.sha256(data).hexdigest()
    manifest.dump_json(f, m)


def _edit(p: Path, arch: str, fn):
    f = p / arch / "manifest.json"
    f.write_text(fn(f.read_text()))


# case -> (how the pack breaks, what the reason says)
REFUSALS = {
    "manifest not json": (lambda p: _edit(p, "sm_90a", lambda t: "{not json"), r"corrupt manifest \S*sm_90a/manifest\.json"),
    "cubin sha256 mismatch": (_flip_cubin, r"mine\.gemm\[.*\]: cubin \S* has sha256 .*the pack is corrupt"),
    "schema too new": (lambda p: _edit(p, "sm_100a", lambda t: json.dumps({**json.loads(t), "schema": 99})),
                       r"schema 99, newer than this tkreg reads \(2\); upgrade tkreg"),
    "cubin of another arch": (_sm100_cubin_as_sm90, r"mine\.gemm\[.*expected sm_90a"),
    "no manifest": (lambda p: [shutil.rmtree(p / a) for a in ("sm_90a", "sm_100a")], "no <arch>/manifest.json under"),
}


@pytest.mark.parametrize("loaded", [False, True], ids=["on first use", "after the load"])
@pytest.mark.parametrize("case", list(REFUSALS))
def test_register_pack_raises_why_and_adds_nothing(tmp_path, monkeypatch, case, loaded):
    """A broken pack given to register_pack raises PackError naming the pack and the reason (no
    warning besides); the registry is as it was, and the pack registers once fixed."""
    monkeypatch.delenv("TKREG_PACKS", raising=False)
    brk, why = REFUSALS[case]
    p = _own_pack(tmp_path)
    brk(p)
    r = Registry()
    if loaded:
        r.ensure()
    before = (len(r.sources), sorted(r.entries))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PackError, match=rf"(?s)^pack {re.escape(str(p))} refused: .*{why}") as info:
            r.register_pack(p)
    assert info.value.pack == str(p)
    if loaded:
        assert (len(r.sources), sorted(r.entries)) == before
    assert all(s.path != p for s in r.sources)                  # doctor and verify never see it
    assert r.entry("tkreg.gemm").owner == "tkreg (built-in)"    # the other packs loaded
    with pytest.raises(NoKernelError, match="unknown op 'mine.gemm'"):
        r.entry("mine.gemm")
    shutil.rmtree(p)
    _own_pack(tmp_path)
    assert r.register_pack(p).state == "loaded" and r.entry("mine.gemm").owner == f"register_pack:{p}"


def test_tkreg_register_pack_raises_for_a_broken_pack(tmp_path):
    """The public call, on the process's own registry: the refusal changes nothing there."""
    p = _own_pack(tmp_path)
    _flip_cubin(p)
    with pytest.raises(PackError, match=rf"^pack {re.escape(str(p))} refused: mine\.gemm\[.*sha256"):
        tkreg.register_pack(p)
    assert not any(o["op"] == "mine.gemm" for o in tkreg.list_ops())


# case -> (how the TKREG_PACKS pack breaks, whether a call can name it: its manifests list the op)
SKIPS = {
    "cubin sha256 mismatch": (_flip_cubin, True),
    "schema too new": (REFUSALS["schema too new"][0], True),
    "one manifest not json": (REFUSALS["manifest not json"][0], True),   # sm_100a's still lists it
    "no manifest parses": (lambda p: [_edit(p, a, lambda t: "{not json") for a in ("sm_90a", "sm_100a")], False),
}


@pytest.mark.parametrize("case", list(SKIPS))
def test_a_call_to_an_op_of_a_skipped_pack_names_the_pack_and_why(tmp_path, monkeypatch, case):
    from tkreg import runtime
    brk, named = SKIPS[case]
    p = _own_pack(tmp_path)
    brk(p)
    monkeypatch.setenv("TKREG_PACKS", str(p))
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    r = Registry()
    with pytest.warns(RuntimeWarning, match=rf"TKREG_PACKS:{re.escape(str(p))}: skipped: "):
        r.ensure()
    (src,) = [s for s in r.sources if s.path == p]
    monkeypatch.setattr(runtime.RUNTIME, "registry", r)
    try:
        with pytest.raises(NoKernelError) as info:
            tkreg.call("mine.gemm", torch.empty(2, 64, dtype=BF16), torch.empty(3, 64, dtype=BF16))
    finally:
        runtime.RUNTIME.reset()
    text = str(info.value)
    if named:
        assert text.startswith(f"op 'mine.gemm' is in a pack tkreg skipped:\n  TKREG_PACKS:{p}: {src.state}\n")
        assert "registered ops" not in text
    else:   # nothing says which pack held it: every registered op, then every skipped pack
        assert text.startswith("unknown op 'mine.gemm'; registered ops: ") and "tkreg.gemm" in text
        assert text.endswith(f"Skipped packs (one may have held it):\n  TKREG_PACKS:{p}: {src.state}")
    with pytest.raises(NoKernelError, match=r"(?s)^unknown op 'mine\.other'; registered ops: .*Skipped packs"):
        r.entry("mine.other")    # an op the skipped pack does not list
