"""rms_norm_heads: RMSNorm of each head of a strided x[T, H, N] (the q or k slice of a fused qkv
output, read in place) into a contiguous out[T, H, N]: qk-norm without a copy.

The kernel is forward.py's resident-row kernel for head-dim rows (`_any_n_kernel`, the same code
and the same RESIDENT ranges and threads): row r is head r % H of token r // H, read through the
token and head strides (multiples of 8 elements: 16-byte slots) and written to row r of out.
N % 8 == 0 and N <= 256 are served; wider heads have no variant (the typed rms_norm copies them).
"""
from kernels_src.common import DTYPES
from tkreg.reference.norm import HEAD_MAX_N
from tkreg.spec import OpSpec, Tensor, Variant

from .forward import EPS, RESIDENT, _any_n_kernel

def rms_norm_heads_kernel(dtype: str, threads: int, max_n: int, preload_weight: int, threads_per_row: int):
    return _any_n_kernel(dtype, threads, fused=False, max_n=max_n, preload_weight=preload_weight,
                         threads_per_row=threads_per_row, heads=True)


_STRIDES = "(T == 1 or st % 8 == 0) and (H == 1 or sh % 8 == 0)"   # a size-1 dim's stride only multiplies 0

SPECS = (
    OpSpec(
        name="tkreg.rms_norm_heads",
        doc="RMSNorm of each head: x[T, H, N] (strided: token and head strides multiples of 8, contiguous "
            f"last dim), weight[N] -> out[T, H, N] contiguous; N % 8 == 0, N <= {HEAD_MAX_N}",
        tensors=(Tensor("x", ("T", "H", "N"), dtypes=DTYPES, strides=("st", "sh", 1)),
                 Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("out", ("T", "H", "N"), dtype_of="x", role="output")),
        scalars=(EPS,), factory=rms_norm_heads_kernel,
        variants=tuple(Variant({"dtype": d, "threads": r.threads, "max_n": r.hi, "preload_weight": r.preload_weight,
                                "threads_per_row": r.threads_per_row},
                               rule=f"N % 8 == 0 and N > {r.lo} and N <= {r.hi} and {_STRIDES}")
                       for r in RESIDENT if r.hi <= HEAD_MAX_N for d in r.dtypes),
        reference="tkreg.reference.norm:rms_norm_heads",
    ),
)
