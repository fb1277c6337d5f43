"""build_tools/compile.py: the workspace canonicalization that makes clean builds byte-identical, and
the nvcc flags a variant's tilelang pass configs imply."""
import pytest

from build_tools.compile import canonical_source, device_flags

DECLS = ("  void* workspace = ((void*)((char*)buf_dyn_shmem + 104448));\n"
         "  void* workspace_1 = ((void*)((char*)buf_dyn_shmem + 104960));\n")


def _use(op, ws, args="128, 32, 0, tl::NamedBarrier<128>"):
    return f"  m = tl::AllReduce<tl::{op}, {args}>::run(m, (&(((float*){ws})[0])));\n"


def _kernel(first, second, args2="128, 32, 0, tl::NamedBarrier<128>"):
    return (DECLS + _use("MaxOp", first) + "  m = tl::AllReduce<tl::MaxOp, 4, 1, 0, tl::NamedBarrier<128>>::run(m);\n"
            + _use("SumOp", second, args2))


def test_swapped_workspaces_canonicalize_to_one_source():
    # the two orders tilelang produces from one kernel, seen in paged_decode_attention builds
    a, b = _kernel("workspace", "workspace_1"), _kernel("workspace_1", "workspace")
    assert a != b
    assert canonical_source(a) == a                   # already in first-use order
    assert canonical_source(b) == a
    assert canonical_source(canonical_source(b)) == a


def test_slots_of_different_reductions_are_left_alone():
    # another thread count may need another slot size: swapping could overflow, so keep the text
    b = _kernel("workspace_1", "workspace", args2="256, 32, 0, tl::NamedBarrier<256>")
    assert canonical_source(b) == b


def test_sources_without_two_workspaces_are_unchanged():
    one = "  void* workspace = ((void*)((char*)buf_dyn_shmem + 0));\n" + _use("MaxOp", "workspace")
    assert canonical_source(one) == one
    assert canonical_source("extern \"C\" __global__ void k() {}\n") == "extern \"C\" __global__ void k() {}\n"


def test_a_workspace_used_outside_an_allreduce_blocks_the_rename():
    b = _kernel("workspace_1", "workspace") + "  ((float*)workspace)[3] = 0.f;\n"
    assert canonical_source(b) == b


@pytest.mark.parametrize("configs, flags", [
    ({}, ()),
    ({"tl.disable_thread_storage_sync": True}, ()),          # a lowering option: no nvcc flag
    ({"tl.enable_fast_math": True}, ("--use_fast_math",)),     # as tilelang's JIT compiles it
    ({"tl.enable_fast_math": False}, ()),
    ({"tl.ptxas_register_usage_level": 5}, ("--ptxas-options=--register-usage-level=5",)),
    ({"tl.device_compile_flags": "-lineinfo -Xptxas -O2"}, ("-lineinfo", "-Xptxas", "-O2")),
    ({"tl.device_compile_flags": ["-lineinfo", "-DX=1 -DY"], "tl.enable_fast_math": True},
     ("-lineinfo", "-DX=1", "-DY", "--use_fast_math")),
])
def test_pass_configs_map_to_the_nvcc_flags_tilelang_uses(configs, flags):
    assert device_flags(configs) == flags
