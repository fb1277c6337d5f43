"""CTA rasterization of the memory-bound families' 2-D grids: T.Kernel's dims for nrb row blocks x
ncb column blocks, and how a CTA reads its (row block, column block) back.

- "rows": row blocks on grid x (neighbouring CTAs go down the rows), column blocks on y (any M).
- "cols": column blocks on x, row blocks on y: at most MAX_Y row blocks (the variant's rule).
- "flat": one index, column blocks fastest (any M): the CTAs resident at once stream whole rows.
- "g<G>": flat, in groups of G column blocks with row blocks down each group (GEMM-style).
The flat kinds decode the index once into an int32 register pair; inlined into every address,
TVM's division ran at 64 bits and measured 30% slower (kernels_src/fp8.py).  On the H200 the
row-streaming kernels gain 3-9% from "cols" / "flat" over "rows"; the tile kernels (per-channel,
transposes) do not (docs/quant-tuning.md, "Grid order").
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
        if kind == "flat":
            rc = (b // ncb, b % ncb)
        else:
            G = int(kind[1:])
            grp = b // (G * nrb)
            gw = T.min(G, ncb - grp * G)              # the last group may be narrower
            r = b - grp * (G * nrb)
            rc = (r // gw, grp * G + r % gw)
        for i in range(2):                            # (a plain function: no T.macro assignment sugar)
            T.buffer_store(bi, rc[i], [i])
        return (bi[0], bi[1]) + blk[1:]

    dims = {"rows": (nrb, ncb), "cols": (ncb, nrb)}.get(kind, (nrb * ncb,))
    return dims, unpack
