"""CTA rasterization of the memory-bound families' 2-D grids: T.Kernel's dims for nrb row blocks x
ncb column blocks, and how a CTA reads its (row block, column block) back.

- "rows": row blocks on grid x (neighbouring CTAs go down the rows), column blocks on y (any M).
- "cols": column blocks on x, row blocks on y: at most MAX_Y row blocks (the variant's rule).
- "flat": one index, column blocks fastest (any M): the CTAs resident at once stream whole rows.
"flat" decodes the index once into an int32 register pair (inlined into every address, TVM's
division ran at 64 bits and measured 30% slower: kernels_src/fp8.py); that costs 3-8 registers.
On the H200 (docs/quant-tuning.md): the quant family's row-streaming kernels gain 3-9% from "flat"
over "rows" (one cubin serves every M); the FP8 group quants run 2-10% faster on "cols" than on
"flat", so they keep "cols" plus a "rows" fallback; the tile kernels (per-channel, transposes)
stay on "rows".  GEMM-style groups of column blocks were no faster for the transposes
(`git show 5181a12:kernels_src/_grid.py` has them, "g<G>").
"""
MAX_Y = 65535  # CUDA's grid y limit


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
