"""The example plugin end to end, as a plugin author and its user meet it (no GPU needed).

tests/plugins/tkreg_example is `python -m build_tools new-plugin tkreg_example --namespace example
--dist tkreg-example` (tests/build_tools/test_new_plugin.py keeps it so).  Here: `pip wheel
--no-build-isolation` of it (scikit-build-core + CMake's `tkreg_add_pack`, in this build env:
tkreg with its build_tools, tilelang, nvcc), then a fresh venv holding only torch==2.13.0,
pytest, the tkreg wheel from dist/ and the plugin wheel — no tilelang — where `tkreg
list/doctor/verify` show the plugin and the plugin's own generated tests pass on the CPU.  About
a minute: one module, marked slow.  On a GPU the same generated tests run the kernels, eager and
compiled (tests/plugins/tkreg_example/tests, and test_example_gpu.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).resolve().parent / "tkreg_example"

pytestmark = pytest.mark.slow

if importlib.util.find_spec("tilelang") is None:
    pytest.skip("building a plugin needs tilelang (the build venv)", allow_module_level=True)


def run(cmd, cwd, env=None, check=True, timeout=600):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    if check and r.returncode != 0:
        raise AssertionError(f"`{' '.join(str(c) for c in cmd)}` exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def bare_env(**extra) -> dict:
    """The environment without anything that would let the repo or this venv leak in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("TKREG_")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def plugin_wheel(tmp_path_factory) -> Path:
    probe = run([sys.executable, "-c", "import build_tools, tkreg; print(build_tools.__file__)"],
                cwd=tmp_path_factory.getbasetemp(), check=False)
    if probe.returncode != 0:
        pytest.skip("the installed tkreg wheel ships no build_tools: rebuild it (python3 build_tools/wheel.py)")
    out = tmp_path_factory.mktemp("wheelhouse")
    env = dict(os.environ)
    env.setdefault("TKREG_JOBS", "1")
    env.setdefault("TKREG_CACHE_DIR", str(ROOT / "build" / "cache"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", out, EXAMPLE],
        cwd=out, env=env)
    (wheel,) = out.glob("tkreg_example-*.whl")
    return wheel


@pytest.fixture(scope="module")
def venv(plugin_wheel, tmp_path_factory) -> Path:
    wheels = sorted((ROOT / "dist").glob("tkreg-*.whl"))
    if len(wheels) != 1:
        pytest.skip(f"need exactly one tkreg wheel in {ROOT / 'dist'} (python3 build_tools/wheel.py); found {wheels}")
    d = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", d / "v"], cwd=d, env=bare_env())
    run([d / "v" / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "torch==2.13.0", "pytest", wheels[0], plugin_wheel], cwd=d, env=bare_env())
    return d / "v"


def vrun(venv: Path, *args, **env):
    return run([venv / "bin" / args[0], *args[1:]], cwd=venv.parent, env=bare_env(**env))


def test_wheel_holds_the_pack_and_the_entry_point(plugin_wheel):
    assert plugin_wheel.name.endswith("-py3-none-any.whl"), plugin_wheel.name
    ops = ["example.axpy", "example.gelu_tanh_and_mul"]
    with zipfile.ZipFile(plugin_wheel) as z:
        names = set(z.namelist())
        eps = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        for arch in ("sm_90a", "sm_100a"):
            m = json.loads(z.read(f"tkreg_example/packs/{arch}/manifest.json"))
            assert m["namespace"] == "example" and sorted(m["ops"]) == ops
            for op in ops:
                assert {v["key"] for v in m["ops"][op]["variants"]} == {"dtype=bfloat16", "dtype=float16"}
                assert all(f"tkreg_example/packs/{arch}/{v['cubin']}" in names for v in m["ops"][op]["variants"])
    assert "[tkreg.kernels]" in eps and "example = tkreg_example" in eps


def test_fresh_venv_lists_doctors_and_verifies_the_plugin(venv):
    assert vrun(venv, "python", "-c", "import importlib.util as u; assert u.find_spec('tilelang') is None")
    ls = vrun(venv, "tkreg", "list").stdout
    line = next(x for x in ls.splitlines() if x.startswith("example.gelu_tanh_and_mul"))
    assert "sm_100a,sm_90a" in line and "bfloat16/float16" in line and "plugin:example" in line
    assert "tkreg.rms_norm" in ls
    doc = vrun(venv, "tkreg", "doctor").stdout
    assert "plugin:example (tkreg-example 0.1.0): loaded; archs sm_100a, sm_90a; 2 op(s)" in doc
    assert "example = tkreg_example (tkreg-example 0.1.0): loaded" in doc
    ver = vrun(venv, "tkreg", "verify").stdout
    assert "ok   plugin:example (tkreg-example 0.1.0): 8 cubin(s)" in ver


def test_the_generated_tests_pass_in_the_fresh_venv(venv):
    """The skeleton's own tests, as its author runs them: on this CPU machine the GPU ones skip."""
    r = vrun(venv, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(EXAMPLE),
             str(EXAMPLE / "tests"))
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout


def test_switches_in_the_fresh_venv(venv):
    off = vrun(venv, "tkreg", "list", TKREG_DISABLE_PLUGINS="1").stdout
    assert "tkreg.gemm" in off and "example.axpy" not in off
    other = vrun(venv, "tkreg", "list", TKREG_PLUGINS="someone_else")
    assert "example.axpy" not in other.stdout
    assert "TKREG_PLUGINS names someone_else, which no installed package provides" in other.stderr
    assert "example.axpy" in vrun(venv, "tkreg", "list", TKREG_PLUGINS="example").stdout
