"""build_tools tests need tilelang and nvcc (the build machine); elsewhere they skip."""
import importlib.util

import pytest

if importlib.util.find_spec("tilelang") is None:
    pytest.skip("build_tools tests need tilelang (the build venv)", allow_module_level=True)

SCALE = '''
from tkreg.spec import OpSpec, Scalar, Tensor, Variant
# {tag}


def scale_kernel(N, dtype):
    import tilelang.language as T
    M = T.dynamic("M")

    @T.prim_func
    def scale(x: T.Tensor((M, N), dtype), out: T.Tensor((M, N), dtype), alpha: T.float32):
        with T.Kernel(T.ceildiv(M, 4), threads=128) as bx:
            for i, j in T.Parallel(4, N):
                if bx * 4 + i < M:
                    out[bx * 4 + i, j] = T.cast(T.cast(x[bx * 4 + i, j], "float32") * alpha, dtype)
    return scale


SPECS = (OpSpec(
    name="{ns}.scale",
    tensors=(Tensor("x", ("M", "N"), dtypes={dtypes}), Tensor("out", ("M", "N"), dtype_of="x", role="output")),
    scalars=(Scalar("alpha", "float32", 1.0),),
    factory=scale_kernel,
    variants=tuple(Variant({{"N": 256, "dtype": d}}) for d in {variant_dtypes}),
    reference=None,
),)
'''


def write_module(path, ns="t", tag="v1", dtypes=("bfloat16",), variant_dtypes=None):
    path.write_text(SCALE.format(ns=ns, tag=tag, dtypes=tuple(dtypes),
                                 variant_dtypes=tuple(variant_dtypes or dtypes)))
    return path
