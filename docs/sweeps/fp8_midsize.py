"""Sweep pack for issue #17's mid-size item: per_token_group_quant_fp8 / silu_and_mul_quant_fp8
configs (not part of the wheel).  Build here, run on the GPU box beside the installed wheel:

    python -m build_tools build --src docs/sweeps/fp8_midsize.py --namespace sw --out /tmp/swpack --arch sm_90a
    TKREG_PACKS=/tmp/swpack python docs/sweeps/fp8_midsize_run.py

Each config is one variant with rule `cfg == i` (kernels_src/fp8.py's factory, bf16, row scales).
"""
from kernels_src.fp8 import DTYPES, FP8, group_quant_kernel  # noqa: F401
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

# (unroll, threads, min_blocks, grid): today's shipped config is unroll 2 (4 with silu), 128, 8, cols
CONFIGS = [(u, t, b, g) for u in (1, 2, 4) for t in (128, 256) for b in (4, 8) for g in ("cols",)]


def _spec(name, silu):
    x = Tensor("x", ("M", "N" if silu else "K"), dtypes=("bfloat16",))
    k, kg = ("N // 2", "N // 256") if silu else ("K", "K // 128")
    return OpSpec(
        name=f"sw.{name}", tensors=(x, Tensor("q", ("M", k), dtype=FP8, role="output"),
                                    Tensor("s", ("M", kg), dtype="float32", role="output")),
        scalars=(Scalar("ue8m0", "bool", False), Scalar("cfg", "int32", 0)), factory=group_quant_kernel,
        variants=tuple(Variant(dict(dtype="bfloat16", layout="row", silu=int(silu), unroll=u, threads=t,
                                    min_blocks=b, grid=g), rule=f"cfg == {i}")
                       for i, (u, t, b, g) in enumerate(CONFIGS)))


SPECS = (_spec("quant", False), _spec("silu_quant", True))
