"""`python -m build_tools new-plugin`: the skeleton it writes is tkreg's own example plugin
(so the two cannot drift), it refuses bad names and a folder it would overwrite."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from build_tools.new_plugin import generate, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugins" / "tkreg_example"
ARGS = ("tkreg_example", "example", "tkreg-example")


def test_the_example_plugin_is_the_generated_skeleton():
    files = render(*ARGS)
    have = {str(p.relative_to(EXAMPLE)) for p in EXAMPLE.rglob("*") if p.is_file()
            and "__pycache__" not in p.parts and "packs" not in p.parts and ".pytest_cache" not in p.parts}
    assert have == set(files), "regenerate: python -m build_tools new-plugin " + " ".join(
        ["tkreg_example", "--namespace example --dist tkreg-example --out tests/plugins/tkreg_example"])
    for rel, text in files.items():
        assert (EXAMPLE / rel).read_text() == text, f"{rel} differs from the generator's output"


def test_command_line_writes_a_package(tmp_path):
    r = subprocess.run([sys.executable, "-m", "build_tools", "new-plugin", "mykern", "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p" / "mykern" / "kernels.py").read_text().count('name="mykern.') == 2
    assert 'mykern = "mykern"' in (tmp_path / "p" / "pyproject.toml").read_text()
    compile((tmp_path / "p" / "mykern" / "kernels.py").read_text(), "kernels.py", "exec")
    r = subprocess.run([sys.executable, "-m", "build_tools", "new-plugin", "mykern", "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "is not empty" in r.stderr


@pytest.mark.parametrize("name", ["my-kern", "tkreg", "1x", ""])
def test_bad_names_are_refused(name, tmp_path):
    with pytest.raises(ValueError, match="identifier"):
        generate(name, out=tmp_path / "x")
