"""build_tools/sources.py: what `--src` resolves to, and a source's hash (its compile-cache key)
following the local modules it imports -- kernels_src's family packages and tkreg/reference/."""
import hashlib
import importlib
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from build_tools import sources
from build_tools.sources import SourceRef, local_imports

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {"activation", "attention", "engram", "gemm", "mhc", "moe", "norm", "quant", "rotary"}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_hash_follows_sibling_and_package_imports(tmp_path, monkeypatch):
    # a spec file outside any package: a sibling module found through sys.path, a package with a
    # relative import, and imports that are not local (stdlib, tkreg) which must not count
    _write(tmp_path / "helper.py", "X = 1\n")
    _write(tmp_path / "pkg/__init__.py", "")
    _write(tmp_path / "pkg/a.py", "from .b import Y\n")
    _write(tmp_path / "pkg/b.py", "Y = 2\n")
    _write(tmp_path / "spec.py", """
        import os, json
        import helper
        from pkg import a
        from tkreg.spec import OpSpec

        def factory():
            import pkg.b   # function-level imports count too
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in ("helper", "pkg", "pkg.a", "pkg.b"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    ref = SourceRef("file", str(tmp_path / "spec.py"))
    assert [n for n, _ in local_imports(ref.path(), None)] == ["", "helper", "pkg", "pkg.a", "pkg.b"]
    h0 = ref.source_hash()
    (tmp_path / "pkg/b.py").write_text("Y = 3\n")      # two imports away
    h1 = ref.source_hash()
    (tmp_path / "helper.py").write_text("X = 2\n")
    assert len({h0, h1, ref.source_hash()}) == 3


def test_hash_of_a_file_without_local_imports_is_its_bytes(tmp_path):
    _write(tmp_path / "solo.py", "import math\nfrom tkreg.spec import OpSpec\nimport tkreg.manifest\n")
    ref = SourceRef("file", str(tmp_path / "solo.py"))
    assert ref.source_hash() == hashlib.sha256((tmp_path / "solo.py").read_bytes()).hexdigest()


def test_kernels_src_resolves_to_one_source_per_family_package():
    refs = sources.resolve("kernels_src")
    packages = {r.name.rpartition(".")[2] for r in refs if r.path().name == "__init__.py"}
    assert packages == FAMILIES == {p.parent.name for p in (ROOT / "kernels_src").glob("*/__init__.py")}
    assert len(refs) == len({r.name for r in refs})
    for r in refs:   # anything else (common.py) is a shared module listing no ops
        if r.path().name != "__init__.py":
            assert sources.specs_of(r) == [], r.name
    assert sources.resolve("kernels_src.norm") == [SourceRef("module", "kernels_src.norm")]
    assert sources.resolve(str(ROOT / "kernels_src" / "norm")) == [SourceRef("module", "kernels_src.norm")]


def test_a_family_package_hash_covers_its_modules():
    # the sm_100a tcgen05 tile bodies live in gemm/tiles/: editing them must rebuild fp8_gemm's cubins
    ref = SourceRef("module", "kernels_src.gemm")
    names = [n for n, _ in local_imports(ref.path(), "kernels_src.gemm")]
    for m in ("kernels_src.gemm.fp8", "kernels_src.gemm.dense", "kernels_src.gemm.grouped",
              "kernels_src.gemm.tiles.tcgen05", "kernels_src.gemm.tiles.warp_specialized", "kernels_src.common"):
        assert m in names, m
    assert not any(n.split(".")[0] not in ("", "kernels_src", "tkreg") for n in names), names


@pytest.fixture
def gemm_copy(tmp_path, monkeypatch):
    """kernels_src/gemm copied as a top-level package of its own name (its relative imports stay
    inside the copy; `kernels_src.common` is still the checkout's)."""
    name = "_tkreg_test_gemm_" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:8]
    shutil.copytree(ROOT / "kernels_src" / "gemm", tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name, tmp_path / name
    for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[m]


def test_editing_any_module_of_a_family_package_changes_its_hash(gemm_copy):
    name, folder = gemm_copy
    ref = SourceRef("module", name)
    hashes = [ref.source_hash()]
    assert ref.source_hash() == hashes[0]   # deterministic
    for f in ("tiles/tcgen05.py", "fp8.py", "split_k.py", "__init__.py"):
        with open(folder / f, "a") as fh:
            fh.write("# edited\n")
        hashes.append(ref.source_hash())
    assert len(set(hashes)) == len(hashes)


def test_tkreg_reference_imports_are_part_of_the_hash(tmp_path):
    """Kernels take the formats' constants from tkreg/reference/quant.py and the MoE limits from
    tkreg/reference/moe.py: those modules count as the source's own; the rest of tkreg does not."""
    import tkreg.reference.moe as ref_moe
    import tkreg.reference.quant as ref_quant
    _write(tmp_path / "kern.py", """
        from tkreg.reference.moe import MAX_EXPERTS
        from tkreg.spec import OpSpec
        import tkreg.manifest

        def factory():
            from tkreg.reference import quant
        """)
    ref = SourceRef("file", str(tmp_path / "kern.py"))
    found = dict(local_imports(ref.path(), None))
    assert {"tkreg.reference.moe", "tkreg.reference.quant"} <= set(found)
    assert all(n == "" or n.startswith("tkreg.reference") for n in found), sorted(found)   # not tkreg.spec
    assert found["tkreg.reference.moe"].resolve() == Path(ref_moe.__file__).resolve()
    h = hashlib.sha256((tmp_path / "kern.py").read_bytes())
    for n, p in sorted(found.items())[1:]:
        h.update(b"\0" + n.encode() + b"\0" + p.read_bytes())
    assert ref.source_hash() == h.hexdigest()
    assert Path(ref_quant.__file__).resolve() == found["tkreg.reference.quant"].resolve()

    # the shipped kernels: MoE limits and the FP8 constants come in through the hash
    moe = [n for n, _ in local_imports(SourceRef("module", "kernels_src.moe").path(), "kernels_src.moe")]
    assert {"kernels_src.moe.limits", "tkreg.reference.moe", "tkreg.reference.quant"} <= set(moe)
    assert "tkreg.spec" not in moe
