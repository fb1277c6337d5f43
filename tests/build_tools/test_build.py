"""End to end on the build machine: specs -> lowered + compiled cubins -> pack, cache, errors."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_tools.build import BuildError, build
from tkreg import manifest
from tkreg.elf import check_cubin, cubin_sm
from tkreg.launch_plan import Constraint

from .conftest import write_module

ROOT = Path(__file__).resolve().parents[2]


def quiet(*a, **k):
    pass


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    write_module(d / "fam_a.py", ns="t")
    return d


def _build(src, out, cache, **kw):
    kw.setdefault("archs", ("sm_90a",))
    return build(out, src=str(src), cache_root=cache, namespace="t", progress=False, log=quiet, jobs=2, **kw)


def edited(tmp_path, old: str, new: str) -> Path:
    """A source folder holding the test module with `old` replaced by `new`."""
    d = tmp_path / "edited"
    d.mkdir()
    f = write_module(d / "fam.py")
    f.write_text(f.read_text().replace(old, new))
    return d


BODY = "            for i, j in T.Parallel(4, N):"   # the kernel's loop: lines inserted before it run first


def test_pack_manifest_and_cubins(src, tmp_path):
    rep = _build(src, tmp_path / "out", tmp_path / "cache", archs=("sm_90a", "sm_100a"))
    assert len(rep.compiled) == 2
    for arch in ("sm_90a", "sm_100a"):
        f = tmp_path / "out" / arch / "manifest.json"
        assert json.loads(f.read_text())["schema"] == manifest.SCHEMA == 2
        m = manifest.load(f)
        assert m.arch == arch and m.namespace == "t"
        assert m.toolchain["tilelang"] == "0.1.15" and m.toolchain["nvcc"].startswith("13.0")
        rec = m.op("t.scale")
        assert [v.key for v in rec.spec.variants] == ["N=256,dtype=bfloat16"]   # the spec, variants included
        (v,) = rec.variants
        assert v.cubin == manifest.cubin_name("t.scale", v.key)
        data = (tmp_path / "out" / arch / v.cubin).read_bytes()
        assert hashlib.sha256(data).hexdigest() == v.sha256
        check_cubin(data, arch)
        assert v.plan.constraints == (Constraint("N == 256", ("$N", 256, "==")),)
        (k,) = v.plan.kernels
        assert k.grid[0] == ("$M", 3, "+", 4, "//") and k.block == (128, 1, 1)
        assert [p.kind for p in k.params].count("scalar") == 1
        assert len(v.source_hash) == 16
    assert manifest.verify(tmp_path / "out") == []


def test_cache_hit_and_edit_recompiles_only_that_family(src, tmp_path):
    write_module(src / "fam_b.py", ns="t", tag="b").write_text(
        (src / "fam_b.py").read_text().replace('"t.scale"', '"t.scale_b"'))
    cache = tmp_path / "cache"
    first = _build(src, tmp_path / "out", cache)
    assert len(first.compiled) == 2
    t = time.time()
    again = _build(src, tmp_path / "out", cache)
    assert again.compiled == [] and len(again.cached) == 2
    assert time.time() - t < 10
    write_module(src / "fam_a.py", ns="t", tag="edited")
    edited = _build(src, tmp_path / "out", cache)
    assert [c.split("[")[0] for c in edited.compiled] == ["t.scale"]
    assert len(edited.cached) == 1


def test_two_clean_builds_are_identical(src, tmp_path):
    # different cache (and so compile) folders: nothing may depend on the path
    _build(src, tmp_path / "o1", tmp_path / "c1", archs=("sm_100a",))
    _build(src, tmp_path / "o2", tmp_path / "deeper" / "c2", archs=("sm_100a",))
    a, b = (tmp_path / o / "sm_100a" for o in ("o1", "o2"))
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for p in a.glob("*.cubin"):
        assert p.read_bytes() == (b / p.name).read_bytes(), p.name


def test_coverage_gap_fails_the_build_before_any_compile(tmp_path):
    d = tmp_path / "gap"
    d.mkdir()
    write_module(d / "fam.py", dtypes=("bfloat16", "float16"), variant_dtypes=("bfloat16",))
    with pytest.raises(BuildError, match=r"(?s)coverage gaps.*t.scale declares x=float16 but no variant for sm_90a"):
        _build(d, tmp_path / "out", tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("kernel.cubin"))   # found from the factories alone


def test_a_failing_factory_is_one_short_block(tmp_path):
    """A factory that raises for every variant and arch: one error block naming them all, cut to
    its ends, and no compile started."""
    d = tmp_path / "bad"
    d.mkdir()
    f = write_module(d / "fam.py", dtypes=("bfloat16", "float16"))
    f.write_text(f.read_text().replace("    import tilelang.language as T\n",
                                       "    import tilelang.language as T\n    raise RuntimeError('boom\\n' + 'noise\\n' * 300)\n", 1))
    with pytest.raises(BuildError) as e:
        _build(d, tmp_path / "out", tmp_path / "cache", archs=("sm_90a", "sm_100a"))
    msg = str(e.value)
    assert msg.count("RuntimeError: boom") == 1 and "4 variant build(s), 1 distinct error(s)" in msg
    assert "t.scale[N=256,dtype=float16] @ sm_100a" in msg and "lines) ..." in msg and msg.count("noise") < 60
    assert not list((tmp_path / "cache").rglob("kernel.cubin"))


def test_compile_error_names_op_variant_arch_and_nvcc_message(tmp_path):
    d = edited(tmp_path, "out[bx * 4 + i, j] = T.cast(T.cast(x[bx * 4 + i, j], \"float32\") * alpha, dtype)",
               "out[bx * 4 + i, j] = T.cast(T.call_extern(\"float32\", \"tkreg_no_such_function\"), dtype)")
    with pytest.raises(BuildError) as e:
        _build(d, tmp_path / "out", tmp_path / "cache")
    msg = str(e.value)
    assert "t.scale[N=256,dtype=bfloat16] @ sm_90a" in msg and "nvcc failed" in msg
    assert "tkreg_no_such_function" in msg


def test_too_much_shared_memory_fails_the_build(tmp_path):
    """The driver would refuse it only at the first launch (cuFuncSetAttribute: invalid argument)."""
    d = edited(tmp_path, BODY, "            s = T.alloc_shared((240 * 1024,), \"uint8\")\n            T.fill(s, 0)\n"
               "            x[bx, 0] = T.cast(s[bx], dtype)\n" + BODY)
    with pytest.raises(BuildError, match=r"needs 245760 bytes of shared memory; .* at most 232448"):
        _build(d, tmp_path / "out", tmp_path / "cache")


def test_unnamed_shared_buffers_fail_the_build_before_any_compile(tmp_path):
    """Buffers kept in a list come out unnamed, and tilelang tells shared buffers apart by name."""
    d = edited(tmp_path, BODY, "            s = [T.alloc_shared((4, N), dtype) for _ in range(2)]\n"
               "            T.fill(s[0], 0)\n            T.fill(s[1], 0)\n" + BODY)
    with pytest.raises(BuildError, match=r"shared buffers without a name of their own: ''"):
        _build(d, tmp_path / "out", tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("kernel.cubin"))


def test_spec_kernel_mismatch_is_a_clear_error(tmp_path):
    d = edited(tmp_path, 'Tensor("out", ("M", "N")', 'Tensor("y", ("M", "N")')
    with pytest.raises(BuildError, match=r"kernel tensors \['out', 'x'\] differ from the spec's \['x', 'y'\]"):
        _build(d, tmp_path / "out", tmp_path / "cache")


def test_unknown_arch_and_unknown_op(src, tmp_path):
    with pytest.raises(BuildError, match="--arch sm_77q"):
        _build(src, tmp_path / "out", tmp_path / "cache", archs=("sm_77q",))
    with pytest.raises(BuildError, match="--only.*no such op"):
        _build(src, tmp_path / "out", tmp_path / "cache", only=("nope",))


def test_elf_check_rejects_the_wrong_arch(src, tmp_path):
    _build(src, tmp_path / "out", tmp_path / "cache")
    cubin = next((tmp_path / "out" / "sm_90a").glob("*.cubin")).read_bytes()
    assert cubin_sm(cubin) == 90
    with pytest.raises(ValueError, match="expected sm_100a"):
        check_cubin(cubin, "sm_100a")
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        check_cubin(b"hello", "sm_90a")


def test_command_line(src, tmp_path):
    r = subprocess.run([sys.executable, "-m", "build_tools", "build", "--out", str(tmp_path / "out"),
                        "--src", str(src), "--namespace", "t", "--arch", "sm_90a", "--cache",
                        str(tmp_path / "cache"), "--no-progress"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "1 compiled" in r.stdout
    r = subprocess.run([sys.executable, "-m", "build_tools", "build", "--out", str(tmp_path / "o"),
                        "--src", str(src), "--arch", "sm_9"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "--arch sm_9: unknown arch" in r.stderr
    assert json.loads((tmp_path / "out" / "sm_90a" / "manifest.json").read_text())["namespace"] == "t"


@pytest.mark.slow
def test_gemm_cubins_do_not_depend_on_the_build_folder(tmp_path):
    """CUTLASS's internal symbols once hashed nvcc's source path into the sm_100a gemm cubins.
    `kernels_src.gemm` is the whole GEMM family: one op (one tcgen05 variant) keeps it short."""
    kw = dict(src="kernels_src.gemm", only=("tkreg.fp8_grouped_gemm",), namespace="tkreg", archs=("sm_100a",),
              progress=False, log=quiet, jobs=2)
    build(tmp_path / "o1", cache_root=tmp_path / "c1", **kw)
    build(tmp_path / "o2", cache_root=tmp_path / "x" / "c2", **kw)
    a, b = tmp_path / "o1" / "sm_100a", tmp_path / "o2" / "sm_100a"
    assert json.loads((a / "manifest.json").read_text())["ops"]["tkreg.fp8_grouped_gemm"]["variants"]
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()   # cubin sha256s included


STRIDED = '''
from tkreg.spec import OpSpec, Tensor, Variant


def copy_kernel(N, dtype):
    import tilelang.language as T
    M, H, sx = T.dynamic("M"), T.dynamic("H"), T.dynamic("sx")

    @T.prim_func
    def copy(x: T.StridedTensor((M, H, N), (sx, N, 1), dtype), out: T.Tensor((M, H, N), dtype)):
        with T.Kernel(M, threads=128) as bx:
            for h in T.serial(H):
                for j in T.Parallel(N):
                    out[bx, h, j] = x[bx, h, j]
    return copy


SPECS = (OpSpec(
    name="t.copy",
    tensors=(Tensor("x", ("M", "H", "N"), dtypes=("bfloat16",), strides=("sx", {stride}, 1)),
             Tensor("out", ("M", "H", "N"), dtype_of="x", role="output")),
    factory=copy_kernel,
    variants=(Variant({{"N": 256, "dtype": "bfloat16"}}),),
),)
'''


@pytest.mark.parametrize("stride, ok", [('"N"', True), ('"2 * N"', False)])
def test_strides_may_name_a_size_the_variant_bakes_in(tmp_path, stride, ok):
    """x[M, H, N] rows strided by sx, heads by N: the kernel's stride is the number N == 256."""
    d = tmp_path / "strided"
    d.mkdir()
    (d / "fam.py").write_text(STRIDED.format(stride=stride))
    if not ok:
        with pytest.raises(BuildError, match=r"`x` has strides \['sx', '256', '1'\] in the kernel but"):
            _build(d, tmp_path / "out", tmp_path / "cache")
        return
    _build(d, tmp_path / "out", tmp_path / "cache")
    (v,) = manifest.load(tmp_path / "out" / "sm_90a" / "manifest.json").op("t.copy").variants
    assert v.plan.constraints == (Constraint("N == 256", ("$N", 256, "==")),)
