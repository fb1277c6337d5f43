"""Fixtures the op tests share: what the installed wheel ships, and what the kernel specs define.

`shipped` reads the installed packs (`tkreg.list_ops()`); `ships_the_specs(family)` checks them
against `kernels_src.<family>.SPECS`, the build-time source, so a test that expects a variant set
derives it from the specs instead of restating it.  Where the tests run beside the wheel alone
(.ci/test-wheel: no kernels_src), the spec side skips.
"""
from __future__ import annotations

import pytest

import tkreg
from tkreg.spec import Variant


@pytest.fixture(scope="session")
def shipped():
    """op name -> its `tkreg.list_ops()` entry (archs, variants per arch, signature)."""
    return {o["op"]: o for o in tkreg.list_ops()}


@pytest.fixture
def shipped_values(shipped):
    """shipped_values("tkreg.gemm", "sm_90a", "shape_class") -> the set of values that parameter
    takes in the wheel's keys of the op on that arch."""
    def get(op: str, arch: str, param: str) -> set:
        return {Variant.parse_key(k).get(param) for k in shipped[op]["variants"][arch]}
    return get


@pytest.fixture
def family_specs():
    """family_specs("norm") -> {op name: OpSpec} of kernels_src.norm (skips without kernels_src)."""
    def get(family: str) -> dict:
        return {s.name: s for s in pytest.importorskip(f"kernels_src.{family}").SPECS}
    return get


@pytest.fixture
def ships_the_specs(shipped, family_specs):
    """ships_the_specs("norm"): every op of the family's SPECS is installed for exactly the spec's
    archs, each arch with exactly the keys of the spec's variants for that arch."""
    def check(family: str) -> dict:
        specs = family_specs(family)
        assert specs, f"kernels_src.{family} defines no op"
        for name, spec in specs.items():
            assert name in shipped, f"{name} (kernels_src.{family}) is not in the installed wheel"
            have = shipped[name]
            assert have["archs"] == sorted(spec.archs), (name, have["archs"])
            for arch in spec.archs:
                want = sorted(v.key for v in spec.variants_for(arch))
                assert want, f"{name} has no variant for {arch}"
                assert have["variants"][arch] == want, (name, arch, sorted(set(want) ^ set(have["variants"][arch])))
        return specs
    return check
