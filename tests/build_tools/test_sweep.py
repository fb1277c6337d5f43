"""build_tools/sweep.py, the tuning harness: the sweep op it builds from a shipped op, the bytes a
timed call moves, and a sweep file built into a pack (the GPU half, `run`, needs a GPU: not here)."""
from __future__ import annotations

import textwrap

import pytest

from build_tools import sources
from build_tools.build import build
from build_tools.sweep import Sweep, _dtypes, bytes_moved
from tkreg import manifest
from tkreg.spec import Scalar

OP = "tkreg.rotary_embedding"
RULE = "NQ % 128 == 0 and NK % 128 == 0"
CONFIGS = [dict(D=128, dtype="bfloat16"), dict(D=128, dtype="float16")]


def shipped(op: str):
    return next(s for r in sources.resolve("kernels_src") for s in sources.specs_of(r) if s.name == op)


def test_specs_is_the_shipped_op_plus_cfg_one_variant_a_config():
    base = shipped(OP)
    (spec,) = Sweep(OP, configs=CONFIGS, rule=RULE, arch="sm_100a").specs()
    assert spec.name == "sweep.rotary_embedding" and spec.archs == ("sm_100a",)
    assert spec.tensors == base.tensors and spec.factory is base.factory and spec.reference == base.reference
    assert spec.scalars == base.scalars + (Scalar("cfg", "int32", 0),)
    assert [v.kwargs() for v in spec.variants] == CONFIGS
    assert [v.rule for v in spec.variants] == [f"cfg == 0 and ({RULE})", f"cfg == 1 and ({RULE})"]
    (plain,) = Sweep(OP, configs=CONFIGS).specs()
    assert [v.rule for v in plain.variants] == ["cfg == 0", "cfg == 1"] and plain.archs == ("sm_90a",)


def test_dtypes_follow_the_configs_and_bytes_count_in_place_tensors_twice():
    torch = pytest.importorskip("torch")
    sweep = Sweep(OP, configs=[CONFIGS[1]], rule=RULE)
    (spec,) = sweep.specs()
    assert _dtypes(spec, sweep) == dict(positions=torch.int64, q=torch.float16, k=torch.float16,
                                        cos_sin_cache=torch.float16)
    assert _dtypes(spec, Sweep(OP, configs=[dict(D=128)]))["q"] == getattr(torch, shipped(OP).tensors[1].dtypes[0])
    sizes = dict(T=3, NQ=256, NK=128, P=5, D=128)
    # positions read; q and k (in place) read and written; the cache read
    assert bytes_moved(spec, sweep, sizes) == 3 * 8 + 2 * (3 * 256 * 2) + 2 * (3 * 128 * 2) + 5 * 128 * 2


SWEEP_FILE = f'''
from build_tools.sweep import Sweep

SWEEP = Sweep({OP!r}, rule={RULE!r}, configs={CONFIGS!r},
              checks=[dict(T=3, NQ=256, NK=128, P=5, D=128)], shapes=[dict(T=4096, NQ=4096, NK=1024, P=4096, D=128)])
specs = SWEEP.specs
'''


def test_a_sweep_file_builds_into_a_pack(tmp_path):
    f = tmp_path / "rotary_sweep.py"
    f.write_text(textwrap.dedent(SWEEP_FILE))
    rep = build(tmp_path / "pack", archs=("sm_90a",), src=str(f), namespace="sweep", cache_root=tmp_path / "cache",
                progress=False, log=lambda *a, **k: None, jobs=2)
    assert len(rep.compiled) == len(CONFIGS)
    m = manifest.load(tmp_path / "pack" / "sm_90a" / manifest.FILENAME)
    assert m.namespace == "sweep"
    rec = m.op("sweep.rotary_embedding")
    assert [s.name for s in rec.spec.scalars] == ["is_neox", "cfg"]
    assert sorted(v.key for v in rec.variants) == sorted(v.key for v in Sweep(OP, CONFIGS).specs()[0].variants)
    assert {v.rule for v in rec.spec.variants} == {f"cfg == {i} and ({RULE})" for i in range(len(CONFIGS))}
    assert manifest.verify(tmp_path / "pack") == []
