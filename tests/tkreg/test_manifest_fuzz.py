"""A hostile pack never crashes or hangs the process: mutations of a real manifest (the probe
pack: two kernels, TMA, every slot kind) either have register_pack refuse the pack (PackError), or
load and then refuse calls with a clean Python error.  This is the CPU part (every check that happens
before a launch); the GPU part, where the driver has a say, runs each case in a subprocess
(test_format_gpu.py)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkreg import manifest
from tkreg.errors import PackError, TkregError
from tkreg.registry import Registry
from tkreg.runtime import Runtime

from .conftest import OP, PROBE, TARGETED, garbage_cubin, get, leaves, put

BF16 = torch.bfloat16
CLEAN = (TkregError, TypeError, ValueError)   # what a broken pack may raise: nothing else
RAW = json.loads((PROBE / "sm_90a" / manifest.FILENAME).read_text())
PATHS = [p for p, _ in leaves(RAW) if p]


def exercise(tmp_path, m: dict) -> str:
    """Load a mutated pack and use it as far as a CPU allows; 'skipped' (register_pack refused
    it), 'refused' (a call was) or 'ok'."""
    pack = tmp_path / "pack"
    shutil.rmtree(pack, ignore_errors=True)
    shutil.copytree(PROBE, pack)
    manifest.dump_json(pack / "sm_90a" / manifest.FILENAME, m)
    rt = Runtime(Registry())
    try:
        rt.register_pack(pack)
    except PackError as e:
        assert str(e).startswith(f"pack {pack} refused: ")
        return "skipped"
    x = torch.randn(10, 300, dtype=BF16)[:, 8:200]
    try:
        for args in ((x,), (x, torch.randn(192, dtype=BF16))):
            rt.explain(OP, args, {}, arch="sm_90a")
            with pytest.raises(CLEAN):
                rt.op(OP)(*args)    # CPU tensors: refused before any launch
    except CLEAN:
        return "refused"
    return "ok"


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_targeted_breaks_are_clean(tmp_path, name):
    m = json.loads(json.dumps(RAW))
    TARGETED[name](m)
    exercise(tmp_path, m)


def test_caught_on_the_cpu_where_it_can_be(tmp_path):
    """What needs no driver is refused when the pack loads, not at the first call."""
    for name in ("dtype_of_itself", "tma_of_a_scalar", "bad_program", "unknown_symbol", "huge_box", "negative_index"):
        m = json.loads(json.dumps(RAW))
        TARGETED[name](m)
        assert exercise(tmp_path, m) == "skipped", name


def test_a_garbage_cubin_never_reaches_the_driver(tmp_path):
    """Scrambled ELF tables (its sha256 updated to match) crashed cuModuleLoadData: the ELF check
    refuses it when the pack loads, and again before any first load."""
    pack = tmp_path / "pack"
    shutil.copytree(PROBE, pack)
    garbage_cubin(pack)
    with pytest.raises(PackError, match="ELF .* outside the file"):
        Runtime(Registry()).register_pack(pack)


# st.builds(dict): a fresh {} per draw (st.just({}) shares one object, which a later change could nest
# inside itself: json.dumps then fails on the test's own circular structure)
values = st.one_of(st.integers(-3, 3), st.integers(-2**63, 2**63 - 1), st.sampled_from(["", "$M", "$Q", "+", "x", "bias"]),
                   st.none(), st.booleans(), st.lists(st.integers(-2, 70), max_size=4), st.builds(dict))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_random_mutations_are_clean(tmp_path, changes):
    m = json.loads(json.dumps(RAW))
    for path, value in changes:
        try:
            put(m, path, value)
        except (KeyError, IndexError, TypeError):
            continue   # an earlier change removed this path
    exercise(tmp_path, m)
    get(m, ())      # and the process is still healthy enough to go on
