"""Shared by the run-time tests: ways to break a real manifest, used by the CPU fuzz
(test_manifest_fuzz.py) and its GPU twin (test_format_gpu.py); each changes a manifest dict in
place.  The pack they break is tests/format_probe/pack (every launch-format feature).  Fixtures of
the op and module tests: `fallback` (ops on their torch references) and `compile_matches_eager`."""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest

from tkreg import manifest


@pytest.fixture
def fallback(monkeypatch):
    """Every op on its torch reference (TKREG_FALLBACK=reference) for this test."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


@pytest.fixture
def compile_matches_eager():
    """compile_matches_eager(f, inputs, leaves=inputs): the gradients of `leaves` (tensors that
    require grad) from f(*inputs).float().sum() with f under torch.compile(fullgraph=True,
    backend="aot_eager") equal eager's bit for bit (f: a function or a module)."""
    import torch

    def check(f, inputs, leaves=None):
        leaves = tuple(inputs if leaves is None else leaves)
        torch.compile(f, fullgraph=True, backend="aot_eager")(*inputs).float().sum().backward()
        got = [t.grad.clone() for t in leaves]
        for t in leaves:
            t.grad = None
        f(*inputs).float().sum().backward()
        for i, (g, t) in enumerate(zip(got, leaves)):
            assert torch.equal(g, t.grad), (f"leaf {i} {tuple(t.shape)}: compiled gradient differs from eager's by up "
                                            f"to {(g.float() - t.grad.float()).abs().max().item():.3e}")
    return check

PROBE = Path(__file__).resolve().parents[1] / "format_probe" / "pack"
OP = "t.probe"


def leaves(node, path=()):
    """Every (path, value) of a JSON tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    yield path, node


def get(node, path):
    for p in path:
        node = node[p]
    return node


def put(node, path, value):
    get(node, path[:-1])[path[-1]] = value


def plan_of(m, i=0):
    return m["ops"][OP]["variants"][i]["plan"]


# Targeted breaks, each a known hazard for a launcher that trusts its pack.
def fewer_params(m):        # the plan lists fewer parameters than the cubin's kernel takes (was a SIGSEGV)
    plan_of(m)["kernels"][0]["params"].pop()


def more_params(m):
    ks = plan_of(m)["kernels"][0]["params"]
    ks.append(copy.deepcopy(ks[-1]))


def wrong_param_size(m):    # an int32 symbol declared int64: sizes disagree with the cubin
    p = next(p for p in plan_of(m)["kernels"][0]["params"] if p["kind"] == "sym")
    p["type"] = "int64"


def missing_kernel(m):
    plan_of(m)["kernels"][1]["name"] = "no_such_kernel"


def dtype_of_itself(m):     # was a hang
    for t in m["ops"][OP]["spec"]["tensors"]:
        if t["name"] == "bias":
            t["dtype_of"] = "bias"


def tma_of_a_scalar(m):
    plan_of(m)["tma"][0]["tensor"] = "nblk"


def bad_program(m):
    plan_of(m)["kernels"][0]["grid"][0] = ["$M", "+"]


def unknown_symbol(m):
    plan_of(m)["kernels"][1]["grid"][0] = ["$Q"]


def division_by_zero(m):
    plan_of(m)["kernels"][1]["grid"][0] = ["$M", 0, "//"]


def huge_box(m):
    plan_of(m)["tma"][0]["box"][0] = 100000


def negative_index(m):
    p = next(p for p in plan_of(m)["kernels"][1]["params"] if p["kind"] == "tma")
    p["index"] = -1


TARGETED = {f.__name__: f for f in (fewer_params, more_params, wrong_param_size, missing_kernel, dtype_of_itself,
                                    tma_of_a_scalar, bad_program, unknown_symbol, division_by_zero, huge_box,
                                    negative_index)}


def garbage_cubin(pack: Path, arch="sm_90a"):
    """A cubin whose bytes past the ELF header are scrambled, its sha256 updated to match: only
    the driver can tell (cuModuleLoadData)."""
    f = pack / arch / manifest.FILENAME
    m = manifest.load(f)
    rec = m.op(OP).variants[0]
    p = pack / arch / rec.cubin
    data = bytearray(p.read_bytes())
    for i in range(64, len(data)):
        data[i] = (data[i] * 7 + 13) & 0xFF
    p.write_bytes(bytes(data))
    raw = __import__("json").loads(f.read_text())
    raw["ops"][OP]["variants"][0]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    manifest.dump_json(f, raw)
