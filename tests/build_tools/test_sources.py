"""build_tools/sources.py: a source's hash (its compile-cache key) follows the local modules it imports."""
import sys
import textwrap

from build_tools.sources import SourceRef, local_imports


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_hash_follows_sibling_and_package_imports(tmp_path, monkeypatch):
    # a sweep-style spec file: a sibling module found through sys.path, a package with a
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
    import hashlib
    _write(tmp_path / "solo.py", "import math\nfrom tkreg.spec import OpSpec\n")
    ref = SourceRef("file", str(tmp_path / "solo.py"))
    assert ref.source_hash() == hashlib.sha256((tmp_path / "solo.py").read_bytes()).hexdigest()


def test_kernels_src_gemm_modules_share_their_imports():
    # fp8_gemm's sm_100a kernel lives in gemm_sm100: editing it must invalidate fp8_gemm's cubins
    ref = SourceRef("module", "kernels_src.fp8_gemm")
    names = [n for n, _ in local_imports(ref.path(), "kernels_src")]
    assert "kernels_src.gemm_sm100" in names and "kernels_src.gemm" in names
