"""Launch format v2 without a GPU: typed records round-trip, the codes table is the launcher's,
and the synthetic `t.probe` pack (tests/format_probe: strided input, optional tensor, scratch
sized by a variant parameter, scalar and SM-count grids, TMA) binds, validates and explains.
Its launch is tests/tkreg/test_format_gpu.py."""
from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import tkreg
from tkreg import assemble, codes, manifest
from tkreg.errors import NoKernelError, PackError
from tkreg.launch_plan import Plan
from tkreg.registry import BUILTIN_PACKS, Registry
from tkreg.runtime import Runtime
from tkreg.spec import OpSpec, Tensor

BF16 = torch.bfloat16
PROBE = Path(__file__).resolve().parents[1] / "format_probe" / "pack"


def all_manifests():
    for pack in (BUILTIN_PACKS, PROBE):
        for d in manifest.arch_dirs(pack):
            yield manifest.load(d / manifest.FILENAME)


def test_records_round_trip():
    n = 0
    for m in all_manifests():
        for name, raw in m.raw_ops.items():
            rec = m.op(name)
            assert OpSpec.from_json(rec.spec.to_json()) == rec.spec
            assert rec.to_json() == json.loads(json.dumps(raw)), name   # the manifest is the records
            for v in rec.variants:
                assert Plan.from_json(v.plan.to_json()) == v.plan
                assert manifest.VariantRecord.from_json(v.to_json()) == v
                n += 1
    assert n > 100


def test_cubin_names_are_distinct_digests():
    names = {}
    for m in all_manifests():
        for name, rec in m.ops().items():
            for v in rec.variants:
                assert v.cubin == manifest.cubin_name(name, v.key)
                assert names.setdefault((m.arch, v.cubin), (name, v.key)) == (name, v.key)


def test_the_codes_header_is_the_table():
    """The launcher includes this generated header (CMake runs `tkreg/codes.py --header`)."""
    h = codes.header()
    enums = dict(re.findall(r"(\w+) = (-?\d+)", h))
    for prefix, table in (("ROLE_", codes.ROLES), ("P_", codes.PARAMS), ("S_", codes.SLOTS),
                          ("E_", codes.ERRORS), ("R_", codes.REJECTS), ("DT_", codes.DTYPE_MODES)):
        for k, v in table.items():
            assert int(enums[prefix + k.upper()]) == v
    for k, (code, _) in codes.TYPES.items():
        assert int(enums["T_" + k.upper()]) == code
    assert int(enums["OP_CONST"]) == codes.OP_CONST and int(enums["OP_SYM"]) == codes.OP_SYM
    sizes = [int(s) for s in re.search(r"ELEM_SIZE\[NDTYPES\] = \{([^}]*)\}", h).group(1).split(",")]
    assert sizes == [codes.DTYPES[n][1] for n in sorted(codes.DTYPES, key=lambda n: codes.DTYPES[n][0])]
    arity = [int(s) for s in re.search(r"OP_ARITY\[NOPCODES\] = \{([^}]*)\}", h).group(1).split(",")]
    assert all(arity[c] == n for c, n in codes.OPCODES.values())


def test_the_header_declares_the_struct_layouts_python_fills():
    """assemble.py fills ctypes structs the launcher copies byte for byte: the header declares the
    same fields in the same order, and the launcher refuses bytes of another size."""
    import ctypes

    from tkreg.native import launcher
    h = codes.header()
    for name, cls in codes.CTYPES.items():
        decl = re.search(r"typedef struct \{ (.*?) \} " + name + ";", h).group(1)
        assert [d.split()[-1].split("[")[0] for d in decl.rstrip(";").split("; ")] == [f for f, _ in cls._fields_]
        assert ctypes.sizeof(cls) % ctypes.alignment(cls) == 0
    spec = OpSpec("t.size", (Tensor("x", ("N",), dtypes=("int8",)),))
    plan, code, names, defaults = assemble.op_args(spec)
    L = launcher()
    L.Op(spec.name, plan, code, names, defaults, (None,) * 4)
    with pytest.raises(PackError, match=r"plan struct of \d+ bytes, expected \d+"):
        L.Op(spec.name, plan[:-8], code, names, defaults, (None,) * 4)


@pytest.mark.parametrize("field, value, match", [
    ("rank", 6, r"Tma.rank = 6, expected an integer in \[1, 6\)"),
    ("box", (0,), r"Tma.box = 0"),
    ("estr", (9,), r"Tma.estr = 9"),
    ("rank", True, r"Tma.rank = True"),
    ("dims", [None] * 6, r"Tma.dims: 6 entries, at most 5"),
])
def test_struct_checks_every_value_against_its_range(field, value, match):
    with pytest.raises(ValueError, match=match):
        codes.struct("Tma", **{field: value})


def test_a_plan_value_out_of_range_is_a_packerror_naming_the_field():
    from tkreg.launch_plan import Launch, Plan
    spec = OpSpec("t.range", (Tensor("x", ("N",), dtypes=("int8",)),))
    for block, match in (((0, 1, 1), "Kernel.block = 0"), ((2048, 1, 1), "Kernel.block = 2048")):
        plan = Plan({"x": "int8"}, (), (Launch("k", ([1], [1], [1]), block, [0]),))
        with pytest.raises(PackError, match=r"t.range\[v\]: the plan does not fit the op .*" + match):
            assemble.variant_args(spec, {}, plan, "t.range[v]")
    deep = [1] * 40 + ["+"] * 39   # 40 constants on the stack; the launcher's holds 32
    plan = Plan({"x": "int8"}, (), (Launch("k", (deep, [1], [1]), (1, 1, 1), [0]),))
    with pytest.raises(PackError, match="stack deeper than 32"):
        assemble.variant_args(spec, {}, plan, "t.range[v]")


def test_no_code_table_is_copied_by_hand():
    """Python modules take their codes from tkreg/codes.py (the C side gets the generated header)."""
    import tkreg as pkg
    root = Path(pkg.__file__).parent
    for f in root.glob("*.py"):
        if f.name == "codes.py":
            continue
        text = f.read_text()
        assert not re.search(r'\{"input": 0|"ptr": 0|"float32": \(0|"\+": \(2', text), f.name


# ---- the probe pack, on the CPU ---------------------------------------------------------------
@pytest.fixture
def rt():
    r = Runtime(Registry())
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a sound pack loads without a word
        r.register_pack(PROBE)
    return r


def x_view(m=10, n=192, pad=100, dtype=BF16):
    """A strided view: columns 8.. of a wider buffer (row stride n + pad)."""
    return torch.randn(m, n + pad, dtype=dtype)[:, 8:8 + n]


def rows(rt, *args, **kw):
    return rt.explain("t.probe", args, kw, arch="sm_90a")


def test_presence_and_scalar_rules_pick_the_variant(rt):
    x = x_view()
    (a, b) = rows(rt, x)
    assert a == ("splits=2,with_bias=false", True, "accepted")
    assert b[1] is False and b[2] == "needs has_bias and nblk >= 1"
    chosen = [k for k, c, _ in rows(rt, x, torch.empty(192, dtype=BF16)) if c]
    assert chosen == ["splits=4,with_bias=true"]
    assert not any(c for _, c, _ in rows(rt, x, nblk=0))


def test_strided_input_is_checked_against_its_declared_strides(rt):
    base = torch.randn(10, 300, dtype=BF16)
    rows(rt, base[:, 8:200])                     # row stride 300: bound as sx
    rows(rt, base[:, :192].contiguous())         # a contiguous tensor is a strided one too
    with pytest.raises(ValueError, match=r"`x` has strides \(1, 300\); expected stride 1 in dim 1"):
        rows(rt, base.t())


def test_scratch_is_never_passed_and_variant_sized(rt):
    x = x_view()
    with pytest.raises(TypeError, match="`acc` is scratch space the launcher allocates"):
        rows(rt, x, acc=torch.empty(2, 192))
    with pytest.raises(ValueError, match=r"`bias` has shape \(5,\); expected \(192,\)"):
        rows(rt, x, torch.empty(5, dtype=BF16))
    with pytest.raises(TypeError, match="scalar `nblk` must be a number that fits int32"):
        rows(rt, x, nblk=2**40)


def test_int32_range_unless_the_op_declares_int64(rt, tmp_path):
    big = torch.empty(2**21, 1025, dtype=BF16, device="meta")[:, :1024]
    with pytest.raises(ValueError, match="index with int32"):
        rows(rt, big)
    pack = tmp_path / "p64"
    shutil.copytree(PROBE, pack)
    f = pack / "sm_90a" / manifest.FILENAME
    m = json.loads(f.read_text())
    m["ops"]["t.probe"]["spec"]["index64"] = True
    manifest.dump_json(f, m)
    r = Runtime(Registry())
    r.register_pack(pack)
    with pytest.raises(ValueError, match="on the CPU"):    # past every size check
        r.op("t.probe")(big)


def test_no_variant_names_each_rule(rt, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    monkeypatch.setattr(rt, "arch_of", lambda dev: "sm_90a")
    monkeypatch.setattr(rt, "resolve", lambda e, dev: (rt.table(e, "sm_90a"), 132))
    rt.reset()
    with pytest.raises(NoKernelError, match=r"(?s)no variant accepts.*M=10, N=192.*needs not has_bias and nblk >= 1"):
        rt.op("t.probe")(x_view(), nblk=0)


def test_a_schema_1_pack_is_refused_with_the_fix(tmp_path):
    pack = tmp_path / "old"
    shutil.copytree(PROBE, pack)
    f = pack / "sm_90a" / manifest.FILENAME
    f.write_text(json.dumps({**json.loads(f.read_text()), "schema": 1}))
    with pytest.raises(PackError, match="schema 1 .*rebuild the pack"):
        manifest.load(f)
    with pytest.raises(PackError, match=f"pack {pack} refused: .*rebuild the pack"):
        Runtime(Registry()).register_pack(pack)


def test_import_spec_loads_no_pack():
    import subprocess
    import sys
    code = ("import sys, tkreg.spec, tkreg.manifest, tkreg.launch_plan; "
            "print(sorted(m for m in sys.modules if m.startswith('tkreg')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    mods = eval(out.stdout)
    assert not {"tkreg.registry", "tkreg.runtime", "tkreg.plugins", "tkreg.torch_library"} & set(mods), mods


def test_register_pack_rebuilds_the_ops(rt):
    before = rt.op("t.probe")
    assert rt.op("t.probe") is before
    with pytest.warns(RuntimeWarning, match="also defines t.probe"):
        rt.register_pack(PROBE)    # ops are rebuilt so they see a new pack's variants
    assert rt.op("t.probe") is not before


def test_typed_ops_and_call_share_the_binder():
    """tkreg.call and the typed op take the same calling convention: inputs, scalars, outputs."""
    import os
    os.environ["TKREG_FALLBACK"] = "reference"
    try:
        x, w = torch.randn(3, 1024, dtype=BF16), torch.randn(1024, dtype=BF16)
        out = torch.empty_like(x)
        assert tkreg.call("tkreg.rms_norm", x, w, 1e-5, out) is out
        assert tkreg.call("tkreg.rms_norm", x, w, out=out, eps=1e-5) is out
        assert tkreg.ops.rms_norm(x, w, 1e-5, out=out) is out
        with pytest.raises(TypeError, match="`eps` given twice"):
            tkreg.call("tkreg.rms_norm", x, w, 1e-5, eps=1e-6)
    finally:
        del os.environ["TKREG_FALLBACK"]


def test_an_input_dim_may_be_a_multiple_of_a_symbol():
    """`x[M, 2 * N] -> out[M, N]` (a gated activation): N binds as the dim // 2, the shape check
    refuses an odd dim, and the fake implementation solves it the same way."""
    from tkreg import assemble, diagnose
    from tkreg.native import launcher
    from tkreg.launch_plan import Launch, Plan
    from tkreg.spec import Tensor
    from tkreg.torch_library import fake_outputs
    spec = OpSpec("t.gated", (Tensor("x", ("M", "2 * N"), dtypes=("bfloat16",)),
                              Tensor("out", ("M", "N"), dtype_of="x", role="output")))
    assert spec.symbols() == {"M", "N"}
    names = assemble.slots(spec).names

    def on_error(code, index, detail, bound, env):
        raise diagnose.refusal(spec, code, index, detail, bound, env, names)
    L = launcher()
    op = L.Op(spec.name, *assemble.op_args(spec), (None, None, None, on_error))
    plan = Plan({"x": "bfloat16", "out": "bfloat16"}, (), (Launch("k", ([1], [1], [1]), (1, 1, 1), [0]),))
    v = L.Variant("v", *assemble.variant_args(spec, {}, plan, "t.gated"), None)
    _, _, env, rows = op.check((torch.empty(3, 10, dtype=BF16),), {}, (v,))
    assert dict(zip(names, env))["N"] == 5 and rows[0][1] == 0
    with pytest.raises(ValueError, match=r"`x` has shape \(3, 9\); expected \(3, 8\)"):
        op.check((torch.empty(3, 9, dtype=BF16),), {}, (v,))
    assert fake_outputs(spec, {"x": torch.empty(3, 10, dtype=BF16, device="meta")}).shape == (3, 5)
