"""What several kernel families share: dtypes, FP8 constants (defined in tkreg/reference/quant.py,
beside the semantics they belong to), the CTA rasterization of 2-D grids and
the evict-first store helpers (CUDA source given to `T.Kernel(prelude=...)`).

Rasterization of a memory-bound kernel's grid of nrb row blocks x ncb column blocks:
- "rows": row blocks on grid x (neighbouring CTAs go down the rows), column blocks on y (any M).
- "cols": column blocks on x, row blocks on y: at most MAX_Y row blocks (the variant's rule).
- "flat": one index, column blocks fastest (any M): the CTAs resident at once stream whole rows.
"flat" decodes the index once into an int32 register pair, inlined into every address (TVM's
division ran at 64 bits and 30% slower); that costs 3-8 registers.  Which family uses which order,
and what it gained: docs/quant-tuning.md.
"""
from tkreg.reference.quant import AMAX_FLOOR, FP8_MAX, GROUP as SCALE_GROUP  # noqa: F401  (the formats' constants)

DTYPES = ("bfloat16", "float16")          # the activation dtypes every family serves
FP8 = "float8_e4m3fn"
MAX_Y = 65535                              # CUDA's grid y limit


def raster(T, kind, nrb, ncb):
    """(dims, unpack): `with T.Kernel(*dims, ...) as blk: rb, cb, *rest = unpack(blk)`; extra dims
    after the first two (or one) pass through as `rest`."""
    def unpack(blk):
        blk = tuple(blk) if isinstance(blk, (tuple, list)) else (blk,)
        if kind == "rows":
            return blk
        if kind == "cols":
            return (blk[1], blk[0]) + blk[2:]
        b = blk[0]
        bi = T.alloc_local((2,), "int32")
        assert kind == "flat", kind
        rc = (b // ncb, b % ncb)
        for i in range(2):                            # (a plain function: no T.macro assignment sugar)
            T.buffer_store(bi, rc[i], [i])
        return (bi[0], bi[1]) + blk[1:]

    dims = {"rows": (nrb, ncb), "cols": (ncb, nrb)}.get(kind, (nrb * ncb,))
    return dims, unpack


# Evict-first stores of 16, 8 and 4 bytes (st.global.cs): for outputs written once and not read
# back by the kernel, so they do not push its inputs out of L2.  ST16_CS alone where a kernel
# stores only 16-byte vectors.
ST16_CS = r"""
__device__ __forceinline__ void tk_st16_cs(void* dst, const void* src) {
  uint4 v = *(const uint4*)src;
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory"); }
"""
STORE_CS = ST16_CS + r"""__device__ __forceinline__ void tk_st8_cs(void* dst, const void* src) {
  uint2 v = *(const uint2*)src;
  asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" :: "l"(dst), "r"(v.x), "r"(v.y) : "memory"); }
__device__ __forceinline__ void tk_st4_cs(void* dst, unsigned v) {
  asm volatile("st.global.cs.b32 [%0], %1;" :: "l"(dst), "r"(v) : "memory"); }
"""
