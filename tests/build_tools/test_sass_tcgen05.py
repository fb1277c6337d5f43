"""The shipped sm_100a GEMMs (kernels_src/gemm/tiles/tcgen05.py, dense and grouped) and flash attention
(kernels_src/attention/tcgen05.py) are tcgen05 kernels:
every tkreg.gemm, tkreg.fp8_gemm and grouped GEMM (bf16/fp16 and FP8) cubin in the installed wheel's sm_100a
pack has UTC*MMA instructions in its SASS and no HMMA (mma.sync), and fits sm_100's shared memory.  Nothing here runs them: no Blackwell GPU.
Needs a disassembler (nvdisasm from build_tools/requirements-build.txt, or the CUDA toolkit's)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import tkreg
from build_tools.sass import find_disassembler, mma_summary
from tkreg.spec import Variant

SMEM_MAX = 232448   # sm_100: 227 KB of dynamic shared memory per CTA


@pytest.mark.parametrize("op", ["tkreg.gemm", "tkreg.fp8_gemm", "tkreg.grouped_gemm", "tkreg.grouped_gemm_masked",
                                "tkreg.fp8_grouped_gemm", "tkreg.fp8_grouped_gemm_masked"])
def test_shipped_sm100_gemms_use_tcgen05(op):
    tool = find_disassembler()
    if tool is None:
        pytest.skip("no nvdisasm/cuobjdump (pip install nvidia-cuda-nvdisasm)")
    pack = Path(tkreg.__file__).parent / "packs" / "sm_100a"
    variants = json.loads((pack / "manifest.json").read_text())["ops"][op]["variants"]
    assert variants
    for v in variants:
        s = mma_summary((pack / v["cubin"]).read_bytes(), tool)
        assert s["tcgen05"] and s["mma_sync"] == 0, (v["key"], s)
        assert all(k["smem"][0] <= SMEM_MAX for k in v["plan"]["kernels"]), v["key"]


@pytest.mark.parametrize("op", ["tkreg.flash_attention", "tkreg.flash_attention_varlen"])
def test_shipped_sm100_attention_uses_tcgen05(op):
    """The tcgen05 attention (kernels_src/attention/tcgen05.py) serves every head dim and dtype; the tiled
    mma.sync kernel stays beside it only as the TKREG_SKIP_VARIANTS fallback (lower priority)."""
    tool = find_disassembler()
    if tool is None:
        pytest.skip("no nvdisasm/cuobjdump (pip install nvidia-cuda-nvdisasm)")
    pack = Path(tkreg.__file__).parent / "packs" / "sm_100a"
    variants = json.loads((pack / "manifest.json").read_text())["ops"][op]["variants"]
    fast = [v for v in variants if "kernel=tcgen05" in v["key"]]
    assert {(k["dim"], k["dtype"]) for k in map(Variant.parse_key, (v["key"] for v in fast))} == {
        (d, t) for d in (64, 128) for t in ("bfloat16", "float16")}
    for v in fast:
        s = mma_summary((pack / v["cubin"]).read_bytes(), tool)
        assert s["tcgen05"].get("UTCHMMA") and s["mma_sync"] == 0, (v["key"], s)
        assert all(k["smem"][0] <= SMEM_MAX for k in v["plan"]["kernels"]), v["key"]
