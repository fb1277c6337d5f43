"""Launch format v2 at build time: the committed probe pack is what its source builds to (so the
GPU test launches current code), a temp-dir build of it registers and explains, and a variant's
factory arch, pass configs and nvcc flags reach the compile."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from build_tools.build import build
from tkreg import manifest
from tkreg.errors import SpecError
from tkreg.registry import Registry
from tkreg.runtime import Runtime
from tkreg.spec import OpSpec, Tensor, Variant

from .conftest import write_module

ROOT = Path(__file__).resolve().parents[2]
PROBE_SRC = ROOT / "tests" / "format_probe" / "kernels.py"
PROBE_PACK = ROOT / "tests" / "format_probe" / "pack"
REGEN = ("python -m build_tools build --src tests/format_probe/kernels.py --namespace t "
         "--out tests/format_probe/pack --arch sm_90a")


def quiet(*a, **k):
    pass


def _build(src, out, cache, **kw):
    kw.setdefault("archs", ("sm_90a",))
    return build(out, src=str(src), cache_root=cache, progress=False, log=quiet, jobs=2, **kw)


def test_committed_probe_pack_is_what_the_source_builds(tmp_path):
    _build(PROBE_SRC, tmp_path / "out", ROOT / "build" / "cache", namespace="t")
    got, want = tmp_path / "out" / "sm_90a", PROBE_PACK / "sm_90a"
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in want.iterdir()), f"regenerate: {REGEN}"
    for p in got.iterdir():
        assert p.read_bytes() == (want / p.name).read_bytes(), f"{p.name} is stale; regenerate: {REGEN}"


def test_temp_dir_build_registers_and_explains(tmp_path):
    _build(PROBE_SRC, tmp_path / "out", ROOT / "build" / "cache", namespace="t")
    rt = Runtime(Registry())
    assert rt.register_pack(tmp_path / "out").state == "loaded"
    x = torch.randn(6, 200, dtype=torch.bfloat16)[:, :128]
    rows = rt.explain("t.probe", (x,), {}, arch="sm_90a")
    assert [k for k, c, _ in rows if c] == ["splits=2,with_bias=false"]
    rec = manifest.load(tmp_path / "out" / "sm_90a" / manifest.FILENAME).op("t.probe")
    plan = {v.key: v.plan for v in rec.variants}["splits=4,with_bias=true"]
    assert set(plan.uses) == {"x", "bias", "out", "acc"}
    assert "bias" not in {v.key: v.plan for v in rec.variants}["splits=2,with_bias=false"].uses
    k0, k1 = plan.kernels
    assert k0.grid[0] == ("$nblk", "$SM_COUNT", "min")                     # scalar and device symbol
    assert any(p.kind == "sym" and p.name == "SM_COUNT" for p in k0.params)
    (tma,) = plan.tma
    assert tma.tensor == "x" and tma.strides == (("$sx", 2, "*"),)           # a strided TMA load
    assert any(p.kind == "tma" for p in k1.params)


def test_factory_arch_pass_configs_and_nvcc_flags_reach_the_compile(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "probe.py").write_text(PROBE_SRC.read_text().replace(
        '''    variants=(Variant({"with_bias": True, "splits": 4}, rule="has_bias and nblk >= 1"),''',
        '''    variants=(Variant({"with_bias": True, "splits": 4}, rule="has_bias and nblk >= 1",
                      pass_configs={"tl.disable_warp_specialized": True}, nvcc_flags=("-lineinfo",)),'''))
    _build(src, tmp_path / "out", tmp_path / "cache", namespace="t")
    rec = manifest.load(tmp_path / "out" / "sm_90a" / manifest.FILENAME).op("t.probe")
    mine = {v.key: v for v in rec.variants}["splits=4,with_bias=true"]
    base = manifest.load(PROBE_PACK / "sm_90a" / manifest.FILENAME).op("t.probe")
    theirs = {v.key: v for v in base.variants}["splits=4,with_bias=true"]
    assert theirs.plan.kernels[1].block == (256, 1, 1)   # a producer warpgroup ...
    assert mine.plan.kernels[1].block == (128, 1, 1)     # ... that the pass config turned off
    assert mine.sha256 != theirs.sha256 and b".debug_line" in (tmp_path / "out" / "sm_90a" / mine.cubin).read_bytes()
    assert dict(rec.spec.variants[0].pass_configs) == {"tl.disable_warp_specialized": True}


def test_a_factory_gets_the_arch_it_builds_for(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    f = write_module(d / "fam.py")
    f.write_text(f.read_text().replace("def scale_kernel(N, dtype):", "def scale_kernel(N, dtype, arch):\n"
                                       "    N = N if arch == 'sm_90a' else 2 * N"))
    _build(d, tmp_path / "out", tmp_path / "cache", namespace="t", archs=("sm_90a", "sm_100a"))
    texts = {a: [c.text for c in manifest.load(tmp_path / "out" / a / manifest.FILENAME).op("t.scale").variants[0].plan.constraints]
             for a in ("sm_90a", "sm_100a")}
    assert texts == {"sm_90a": ["N == 256"], "sm_100a": ["N == 512"]}


def test_a_rule_naming_a_symbol_the_op_lacks_fails_the_build(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    f = write_module(d / "fam.py")
    f.write_text(f.read_text().replace('Variant({{"N": 256, "dtype": d}})'.replace("{{", "{").replace("}}", "}"),
                                       'Variant({"N": 256, "dtype": d}, rule="K <= 64")'))
    with pytest.raises(SpecError, match=r"rule 'K <= 64' names \['K'\], which the op does not have"):
        _build(d, tmp_path / "out", tmp_path / "cache", namespace="t")
    with pytest.raises(SpecError, match="names"):
        OpSpec("t.x", (Tensor("x", ("M",), dtypes=("bfloat16",)),), variants=(Variant({}, rule="has_x"),))
