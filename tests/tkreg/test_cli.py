"""`tkreg list / doctor / verify` from a subprocess, as a user runs them (no GPU needed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tkreg.registry import BUILTIN_PACKS


def run(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "tkreg", *args], capture_output=True, text=True, env=e,
                          cwd=os.path.dirname(BUILTIN_PACKS.parent))


def test_list_json_names_ops_archs_and_dtypes():
    r = run("list", "--json")
    assert r.returncode == 0, r.stderr
    ops = {o["op"]: o for o in json.loads(r.stdout)}
    assert ops["tkreg.rms_norm"]["dtypes"] == {"x": ["bfloat16", "float16"]}
    assert set(ops["tkreg.gemm"]["variants"]) == {"sm_90a", "sm_100a"}


def test_list_table():
    r = run("list")
    assert r.returncode == 0 and "tkreg.rms_norm" in r.stdout and "sm_90a" in r.stdout


def test_doctor_works_without_a_gpu():
    r = run("doctor", env={"TKREG_FALLBACK": "reference"})
    assert r.returncode == 0, r.stderr
    assert "tkreg (built-in): loaded" in r.stdout
    assert "TKREG_FALLBACK=reference" in r.stdout
    assert "CUDA driver" in r.stdout


def test_verify_passes_then_fails_on_a_corrupt_pack(tmp_path):
    r = run("verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sha256 and ELF arch match" in r.stdout
    bad = tmp_path / "bad"
    shutil.copytree(BUILTIN_PACKS, bad)
    victim = next((bad / "sm_90a").glob("*.cubin"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    # the copy defines the same ops, so it is also a conflict warning; verify still checks it
    r = run("verify", env={"TKREG_PACKS": str(bad)})
    assert r.returncode == 1
    assert "FAIL" in r.stdout and victim.name in r.stdout


def test_readme_ops_table_matches_the_wheel():
    """README's ops table is `tkreg list --markdown` of the installed wheel (skipped outside a checkout)."""
    import pathlib

    import pytest
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    if not readme.exists():
        pytest.skip("no README.md beside the tests (they run from a copy)")
    text = readme.read_text()
    table = text.split("<!-- ops:begin -->\n", 1)[1].split("<!-- ops:end -->", 1)[0].strip()
    r = run("list", "--markdown")
    assert r.returncode == 0, r.stderr
    assert table == r.stdout.strip(), "README's ops table is stale: paste `tkreg list --markdown` into it"


def test_doctor_flags_skip_entries_that_match_no_variant():
    """A TKREG_SKIP_VARIANTS entry naming no variant (a typo, or a key spelled before the keys were
    written in words) is reported; one that matches is not."""
    r = run("doctor", env={"TKREG_FALLBACK": "reference",
                           "TKREG_SKIP_VARIANTS": "kernel=ws; tkreg.flash_attention:kernel=tcgen05;tkreg.gemm:kernel=tcgen05"})
    assert r.returncode == 0, r.stderr
    flagged = [line for line in r.stdout.splitlines() if "matches no variant" in line]
    assert len(flagged) == 2, r.stdout
    assert "'kernel=ws'" in flagged[0] and "'tkreg.gemm:kernel=tcgen05'" in flagged[1]
