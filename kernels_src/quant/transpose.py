"""Batched transpose x[B, M, N] -> out[B, N, M] of 1-, 2- and 4-byte elements (the typed op views
other dtypes of those sizes as uint8 / float16 / int32: a transpose only moves bits).

- 2-byte elements at aligned pitches: 64 x 64 shared-memory tiles, 16-byte vectors both ways
  (_tile_transpose; where M % 16 == 8 the odd output rows' pieces shift by 8 elements so no
  32-byte sector is written by two CTAs: partial-sector writes cost up to 25%).
- 1-byte elements at odd M: the same idea for any pitch on 64 x 128 tiles (_tile_transpose_any).
- Otherwise no shared memory (transpose_kernel): a thread loads an R x C block (R rows, one
  C-element 16-byte vector each) into 32-bit words, transposes it by PRMT and stores C vectors of
  R elements.  Lanes go in pairs along a row (the pair reads one full 32-byte sector a row) and 16
  pairs down the rows, so a warp's store writes 16 consecutive R-element pieces of an output row;
  the aligned kernels run 8 lanes along a row (whole 128-byte row reads; 1-byte elements then at 16
  rows a lane, so an output piece stays 16 bytes).  Pitches that are no multiple of the vectors
  (an odd token count): the same kernel with funnel-shifted loads and stores that each lane aligns
  with its neighbour's bytes (UNALIGNED).  Blocks at the edge take a per-element path.
Row blocks stay on grid x: the flat order was slower for these transposing writes.
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .device import PRELUDE, REFERENCE, prmt

# The transpose at unaligned pitches.  Loads: the two aligned vectors around a misaligned 16-byte
# row (the second an L1 hit: the next lane's) funnel-shifted, branch-free so a thread's loads all
# issue before the first returns.  Stores: the lanes of a warp hold consecutive vectors of one
# output row, so each lane stores the aligned vector straddling its own and the next lane's bytes
# (shuffled over); the run's first lane adds its head, the last its tail, as naturally aligned
# 1/2/4/8-byte pieces.
UNALIGNED = r"""
__device__ __forceinline__ void tk_fsh(const unsigned* w, unsigned b, unsigned* r) {  // bytes [b, b + 16) of w[0..7]
  unsigned v0 = b & 8 ? w[2] : w[0], v1 = b & 8 ? w[3] : w[1], v2 = b & 8 ? w[4] : w[2], v3 = b & 8 ? w[5] : w[3];
  unsigned v4 = b & 8 ? w[6] : w[4], v5 = b & 8 ? w[7] : w[5];
  unsigned u0 = b & 4 ? v1 : v0, u1 = b & 4 ? v2 : v1, u2 = b & 4 ? v3 : v2, u3 = b & 4 ? v4 : v3, u4 = b & 4 ? v5 : v4;
  unsigned s = (b & 3) * 8;
  r[0] = __funnelshift_r(u0, u1, s); r[1] = __funnelshift_r(u1, u2, s);
  r[2] = __funnelshift_r(u2, u3, s); r[3] = __funnelshift_r(u3, u4, s);
}
__device__ __forceinline__ void tk_ld16u(const void* p, void* d) {
  unsigned long long a = (unsigned long long)p; unsigned b = a & 15u;
  const uint4* q = (const uint4*)(a - b);
  uint4 x = __ldg(q), y = __ldg(q + (b != 0));
  unsigned w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
  tk_fsh(w, b, (unsigned*)d);
}
// n < 16 bytes (lo first) at 16-byte-aligned c, largest pieces first
__device__ __forceinline__ void tk_tail(unsigned char* c, unsigned long long lo, unsigned long long hi, unsigned n) {
  if (n & 8) { *(unsigned long long*)c = lo; lo = hi; c += 8; }
  if (n & 4) { *(unsigned*)c = (unsigned)lo; lo >>= 32; c += 4; }
  if (n & 2) { *(unsigned short*)c = (unsigned short)lo; lo >>= 16; c += 2; }
  if (n & 1) { *c = (unsigned char)lo; }
}
// the bytes from misaligned c up to the next NB-byte boundary (lo first), smallest pieces first
template <int NB> __device__ __forceinline__ void tk_head(unsigned char* c, unsigned long long lo, unsigned long long hi) {
  if ((unsigned long long)c & 1) { *c = (unsigned char)lo; lo = (lo >> 8) | (hi << 56); hi >>= 8; c += 1; }
  if ((unsigned long long)c & 2) { *(unsigned short*)c = (unsigned short)lo; lo = (lo >> 16) | (hi << 48); hi >>= 16; c += 2; }
  if ((unsigned long long)c & 4) { *(unsigned*)c = (unsigned)lo; lo = (lo >> 32) | (hi << 32); c += 4; }
  if (NB == 16 && ((unsigned long long)c & 8)) { *(unsigned long long*)c = lo; }
}
#define TK_U64(w, i) (((unsigned long long)(w)[(i) + 1] << 32) | (w)[i])
// this lane's NB-byte vector `own` belongs at p; `next` is the next lane's (at p + NB)
template <int NB> __device__ __forceinline__ void tk_strun(void* p, const void* own_, const void* next_, int first, int last) {
  const unsigned* own = (const unsigned*)own_;
  const unsigned* next = (const unsigned*)next_;
  unsigned char* c = (unsigned char*)p;
  unsigned b = (unsigned)(unsigned long long)c & (NB - 1);
  if (b == 0) {
    if (NB == 16) *(uint4*)c = make_uint4(own[0], own[1], own[2], own[3]);
    else *(uint2*)c = make_uint2(own[0], own[1]);
    return;
  }
  if (first) tk_head<NB>(c, TK_U64(own, 0), NB == 16 ? TK_U64(own, 2) : 0ull);
  unsigned char* e = c + NB - b;
  if (NB == 16) {
    unsigned w[8] = {own[0], own[1], own[2], own[3], next[0], next[1], next[2], next[3]}, r[4];
    tk_fsh(w, 16 - b, r);
    if (last) tk_tail(e, TK_U64(r, 0), TK_U64(r, 2), b);
    else *(uint4*)e = make_uint4(r[0], r[1], r[2], r[3]);
  } else {
    unsigned long long o = TK_U64(own, 0) >> (8 * (8 - b)), n = TK_U64(next, 0) << (8 * b);
    if (last) tk_tail(e, o, 0ull, b);
    else *(unsigned long long*)e = o | n;
  }
}
"""


def _t4x4(T, src, i0, step):
    """4 x 4 byte transpose of the words src[i0 + r * step] (rows r = 0..3) -> 4 words, word c =
    byte c of each row (8 PRMT)."""
    x0, x1, x2, x3 = (src[i0 + r * step] for r in range(4))
    t0, t1 = prmt(T, x0, x1, 0x5140), prmt(T, x0, x1, 0x7362)
    t2, t3 = prmt(T, x2, x3, 0x5140), prmt(T, x2, x3, 0x7362)
    return (prmt(T, t0, t2, 0x5410), prmt(T, t0, t2, 0x7632), prmt(T, t1, t3, 0x5410), prmt(T, t1, t3, 0x7632))


# element size -> (kernel dtype, R rows per thread = store vector, C columns = load vector)
TRANSPOSE = {1: ("uint8", 8, 16), 2: ("float16", 8, 8), 4: ("int32", 4, 4)}
# aligned kernels' lanes along a row (2-byte elements at aligned pitches: _tile_transpose): 8
# (128-byte row reads) for 4-byte elements, +2-4% of copy; 1-byte elements at 8 lanes need 16
# rows a lane (16-byte output pieces): M % 16 == 0 runs that kernel on 128 threads
LANES = {"uint8": 2, "int32": 8}


def _tile_transpose(bm: int, bn: int, threads: int, sector: int):
    """2-byte x[B, M, N] -> out[B, N, M] through a bm x bn shared-memory tile (M % 8 == 0 and
    N % 8 == 0): each thread loads 16-byte row vectors into the tile (16-bit values as 32-bit
    words, 16-byte chunks XOR-swizzled by the row's 8-row group, so the column reads below hit 16
    distinct banks), then after one barrier gathers 8 values down a column (8 word reads, 4 PRMT)
    and stores one 16-byte output vector; a warp's store writes bm * 2 bytes of each of
    32 / (bm / 8) output rows.
    sector: when M % 16 == 8 every odd output row starts half-way into a 32-byte sector, so a tile's
    bm-element pieces of those rows begin and end in sectors that another CTA writes the rest of.
    The tile then holds 8 more rows (m0 - 8 ..) and the rows that start mid-sector take their piece
    8 elements earlier, so every CTA writes whole sectors only (the extra rows come from L2: the
    CTA before loaded them)."""
    import tilelang.language as T

    B, M, N = T.dynamic("B"), T.dynamic("M"), T.dynamic("N")
    cpr = bn // 8                           # 16-byte chunks a tile row
    v = bm * bn // 8 // threads             # vectors a thread, each way
    assert v * threads * 8 == bm * bn
    ext = 8 if sector else 0                # extra tile rows above m0
    vl = -(-(bm + ext) * cpr // threads)    # vectors a thread to load

    @T.prim_func
    def batched_transpose(x: T.Tensor((B, M, N), "float16"), out: T.Tensor((B, N, M), "float16")):
        with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), B, threads=threads, prelude=PRELUDE) as (bx, by, bb):
            tile = T.alloc_shared(((bm + ext) * bn // 2,), "uint32")
            w = T.alloc_local((8,), "uint32")
            o = T.alloc_local((4,), "uint32")
            tx = T.get_thread_binding()
            m0, n0 = bx * bm, by * bn
            for k in T.unroll(vl):
                q = tx + k * threads
                i, cv = q // cpr, q % cpr           # tile row, its chunk
                at = i * (bn // 2) + (cv ^ ((i // 8) % cpr)) * 4
                if ext:
                    # rows m0 - 8 .. m0 - 1 only where M % 16 == 8 (some output rows start mid-sector)
                    if q < (bm + ext) * cpr and m0 - ext + i >= 0 and m0 - ext + i < M and n0 + cv * 8 < N and (
                            i >= ext or M % 16 != 0):
                        tile[T.Ramp(at, 1, 4)] = T.ldg128(x[bb, m0 - ext + i, n0 + cv * 8])
                else:
                    if m0 + i < M and n0 + cv * 8 < N:
                        tile[T.Ramp(at, 1, 4)] = T.ldg128(x[bb, m0 + i, n0 + cv * 8])
            T.sync_threads()
            for k in T.unroll(v):
                q = tx + k * threads
                j, mv = q // (bm // 8), q % (bm // 8)      # output row n0 + j, its vector mv
                # the row's shift back: 8 elements where (bb * N + n0 + j) * M is 8 mod 16 (N is even)
                sh = T.if_then_else(M % 16 != 0 and (n0 + j) % 2 == 1, ext, 0)
                if m0 - sh + mv * 8 >= 0 and m0 - sh + mv * 8 < M and n0 + j < N:
                    for e in T.unroll(8):
                        r = mv * 8 + ext - sh + e
                        w[e] = tile[r * (bn // 2) + ((j // 8) ^ ((r // 8) % cpr)) * 4 + (j % 8) // 2]
                    half = T.if_then_else(j % 2 == 0, T.uint32(0x5410), T.uint32(0x7632))
                    for h in T.unroll(4):                # the j-th 16-bit half of each pair of words
                        o[h] = prmt(T, w[2 * h], w[2 * h + 1], half)
                    T.stg128(out[bb, n0 + j, m0 - sh + mv * 8], o[T.Ramp(0, 1, 4)])

    return batched_transpose


def _tile_transpose_any(bm: int, bn: int, threads: int):
    """1-byte x[B, M, N] -> out[B, N, M] for any M (N a whole number of 16-byte vectors),
    through a shared-memory tile, writing whole 32-byte sectors: output row n's piece of tile m0
    starts s(n) = (n * M) mod E elements early (E elements a sector), so every piece begins and ends
    on a sector boundary and its 16-byte stores are aligned even where the pitch M is odd;
    only the two vectors at a row's ends (before 0, past M) go element by element.  The tile holds
    E more rows above m0 (from L2: the CTA before loaded them); one more CTA column covers the
    last rows.  A thread gathers 16 bytes down one tile column (one 32-bit word a row, PRMT).
    (Its 2-byte form lost to the register kernels: docs/quant-tuning.md.)"""
    import tilelang.language as T

    B, M, N = T.dynamic("B"), T.dynamic("M"), T.dynamic("N")
    dt, V, E, per = "uint8", 16, 32, 4      # elements a 16-byte vector, a 32-byte sector, a word
    cpr, wpr = bn // V, bn // per           # 16-byte chunks, words a tile row
    rows = bm + E
    vl = -(-rows * cpr // threads)          # vectors a thread loads
    vs = bm * bn // V // threads            # vectors a thread stores
    assert vs * threads * V == bm * bn

    @T.prim_func
    def batched_transpose(x: T.Tensor((B, M, N), dt), out: T.Tensor((B, N, M), dt)):
        with T.Kernel(T.ceildiv(M + E - 1, bm), T.ceildiv(N, bn), B, threads=threads, prelude=PRELUDE) as (bx, by, bb):
            tile = T.alloc_shared((rows * wpr,), "uint32")
            w = T.alloc_local((V,), "uint32")
            o = T.alloc_local((4,), "uint32")
            tx = T.get_thread_binding()
            m0, n0 = bx * bm, by * bn
            for k in T.unroll(vl):
                q = tx + k * threads
                t, cv = q // cpr, q % cpr           # tile row (input row m0 - E + t), its chunk
                if q < rows * cpr and m0 - E + t >= 0 and m0 - E + t < M and n0 + cv * V < N:
                    tile[T.Ramp(t * wpr + (cv ^ (t % cpr)) * 4, 1, 4)] = T.ldg128(x[bb, m0 - E + t, n0 + cv * V])
            T.sync_threads()
            for k in T.unroll(vs):
                q = tx + k * threads
                j, mv = q // (bm // V), q % (bm // V)      # output row n0 + j, its vector mv
                sh = ((bb % E) * (N % E) + n0 + j) % E * (M % E) % E     # (bb * N + n) * M mod E
                ms = m0 - sh + mv * V                      # the vector's first output column
                wj = j // per                              # the word of tile column j
                if n0 + j < N and ms + V > 0 and ms < M:
                    for e in T.unroll(V):
                        t = E - sh + mv * V + e
                        w[e] = tile[t * wpr + ((wj // 4) ^ (t % cpr)) * 4 + wj % 4]
                    sel = T.cast((j % 4) | ((j % 4 + 4) << 4), "uint32")   # byte j % 4 of 4 rows -> a word
                    for h in T.unroll(4):
                        o[h] = prmt(T, prmt(T, w[4 * h], w[4 * h + 1], sel),
                                     prmt(T, w[4 * h + 2], w[4 * h + 3], sel), 0x5410)
                    if ms >= 0 and ms + V <= M:
                        T.stg128(out[bb, n0 + j, ms], o[T.Ramp(0, 1, 4)])
                    else:                                  # a row's first or last vector
                        for e in T.unroll(V):
                            if ms + e >= 0 and ms + e < M:
                                out[bb, n0 + j, ms + e] = T.cast((o[e // 4] >> (8 * (e % 4))) & T.uint32(255), "uint8")

    return batched_transpose


def transpose_kernel(dtype: str, rows: int = 8, cols: int = 8, threads: int = 256, unaligned: int = 0,
                     lanes: int = 2, tile: int = 0, sector: int = 0, any_m: int = 0):
    """x[B, M, N] -> out[B, N, M]; a thread moves an R-row x 16-byte block (R x C elements).

    The R x 16-byte block lives in 32-bit words and moves by PRMT (one byte-permute instruction
    per output word pair): 1-byte elements as 4 x 4 byte transposes (8 PRMT per 4 words), 2-byte as
    2 x 2 (one PRMT a word), 4-byte by renaming registers.  Byte-typed register arrays cost the
    1-byte kernel 144 registers (1 CTA/SM); words take 48 (5 CTAs/SM, 71-73% -> 84-87% of copy on
    the H200).  Both pitches whole 16-byte vectors (M % R == 0 and N % C == 0, the variant's rule):
    plain vector loads and stores.  unaligned: any pitches, through UNALIGNED's loads and stores.
    lanes: lanes along a row (a warp's load reads 16 * lanes bytes of 32 / lanes rows; its store
    writes 32 / lanes consecutive R-element pieces of lanes output rows); aligned pitches only.
    tile: 2-byte elements at aligned pitches through a tile x tile shared-memory tile instead
    (_tile_transpose; rows, cols, lanes unused); sector: its whole-sector form for M % 16 == 8.
    any_m: 1-byte elements at odd M through the sector-aligned 64 x 128 tile (_tile_transpose_any).
    Measured tables: docs/quant-tuning.md.
    """
    import tilelang.language as T

    if any_m:
        assert dtype == "uint8"
        return _tile_transpose_any(64, 128, threads)
    if tile:
        assert dtype == "float16" and not unaligned
        return _tile_transpose(tile, tile, threads, sector)

    B, M, N = T.dynamic("B"), T.dynamic("M"), T.dynamic("N")
    nbytes = 16 // cols
    ow = rows * nbytes // 4                      # words per output column (2 or 4)
    warps = threads // 32
    assert lanes == 2 or not unaligned
    tm, tn = (32 // lanes) * rows, warps * lanes * cols   # CTA tile: 32 / lanes lane groups down, warps across

    @T.prim_func
    def batched_transpose(x: T.Tensor((B, M, N), dtype), out: T.Tensor((B, N, M), dtype)):
        with T.Kernel(T.ceildiv(M, tm), T.ceildiv(N, tn), B, threads=threads,
                      prelude=PRELUDE + UNALIGNED if unaligned else PRELUDE) as (bm, bn, bb):
            tx = T.get_thread_binding()
            m0 = bm * tm + (tx % 32) // lanes * rows
            n0 = bn * tn + (tx // 32) * (lanes * cols) + (tx % lanes) * cols
            a = T.alloc_local((rows * 4,), "uint32")          # a[r * 4 + w]: word w of row r
            o = T.alloc_local((cols * ow,), "uint32")         # o[c * ow + h]: word h of column c
            if m0 + rows <= M and n0 + cols <= N and (unaligned or (N % cols == 0 and M % rows == 0)):
                for r in T.unroll(rows):      # explicit 16-byte loads: alignment is a run-time fact
                    if unaligned:
                        T.call_extern("handle", "tk_ld16u", T.address_of(x[bb, m0 + r, n0]), T.address_of(a[r * 4]))
                    else:
                        a[T.Ramp(r * 4, 1, 4)] = T.ldg128(x[bb, m0 + r, n0])
                for w in T.unroll(4):
                    for h in T.unroll(ow):
                        if nbytes == 1:        # rows 4h..4h+3, columns 4w..4w+3
                            y = _t4x4(T, a, 16 * h + w, 4)
                            o[(4 * w) * ow + h] = y[0]
                            o[(4 * w + 1) * ow + h] = y[1]
                            o[(4 * w + 2) * ow + h] = y[2]
                            o[(4 * w + 3) * ow + h] = y[3]
                        elif nbytes == 2:      # rows 2h, 2h+1, columns 2w, 2w+1
                            o[(2 * w) * ow + h] = prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x5410)
                            o[(2 * w + 1) * ow + h] = prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x7632)
                        else:
                            o[w * ow + h] = a[h * 4 + w]
                if not unaligned:             # (unaligned: below, where the whole warp shuffles)
                    for c in T.unroll(cols):
                        if ow == 4:
                            T.stg128(out[bb, n0 + c, m0], o[T.Ramp(c * 4, 1, 4)])
                        else:
                            T.stg64(out[bb, n0 + c, m0], o[T.Ramp(c * 2, 1, 2)])
            else:                             # lanes past an edge: element by element
                for c in T.unroll(cols):
                    for r in T.unroll(rows):
                        if m0 + r < M and n0 + c < N:
                            out[bb, n0 + c, m0 + r] = x[bb, m0 + r, n0 + c]
            if unaligned:                     # lanes 2p, 2p + 1: vector p (0..15) of their columns' output rows
                nx = T.alloc_local((ow,), "uint32")
                p = (tx % 32) // 2
                for c in T.unroll(cols):
                    for h in T.unroll(ow):
                        nx[h] = T.shfl_down(o[c * ow + h], 2)
                    if m0 + rows <= M and n0 + cols <= N:
                        T.call_extern("handle", f"tk_strun<{ow * 4}>", T.address_of(out[bb, n0 + c, m0]),
                                      T.address_of(o[c * ow]), T.address_of(nx[0]), p == 0,
                                      T.Or(p == 15, m0 + 2 * rows > M))

    return batched_transpose


_AT_MOST_B = "B <= 65535"    # B rides on grid z


def _variants():
    tiles = (
        Variant(dict(dtype="uint8", rows=16, cols=16, lanes=8, threads=128),
                rule=f"{_AT_MOST_B} and M % 16 == 0 and N % 16 == 0", priority=3),
        # 2-byte at aligned pitches: 64 x 64 shared-memory tiles on 256 threads, 1.03-1.12x
        # torch.compile at 1024-4096 x 4096-7168 (docs/quant-tuning.md)
        Variant(dict(dtype="float16", tile=64, threads=256), rule=f"{_AT_MOST_B} and M % 8 == 0 and N % 8 == 0",
                priority=3),
        # M % 16 == 8 (odd output rows start mid-sector): whole-sector pieces, 16376 x 7168 0.75 ->
        # 0.91 of a copy; 2-3% behind the plain tile where M % 16 == 0, so only there
        Variant(dict(dtype="float16", tile=64, threads=256, sector=1),
                rule=f"{_AT_MOST_B} and M % 16 == 8 and N % 8 == 0", priority=4),
        # 1-byte at odd M: sector-aligned 64 x 128 tiles (4095 x 4096: 0.48 -> 0.66 of a same-size
        # copy against the unaligned register kernel); at M % 16 == 8 its column gathers hit 8-way
        # bank conflicts, so odd M only
        Variant(dict(dtype="uint8", any_m=1, threads=256), rule=f"{_AT_MOST_B} and M % 2 == 1 and N % 16 == 0",
                priority=2))
    aligned = tuple(Variant(dict(dtype=d, rows=r, cols=c, **({"lanes": LANES[d]} if LANES[d] != 2 else {})),
                            rule=f"{_AT_MOST_B} and M % {r} == 0 and N % {c} == 0", priority=2)
                    for d, r, c in TRANSPOSE.values() if d != "float16")
    # unaligned M, aligned N: 128 threads measured 5-11% ahead for 1- and 2-byte elements
    unaligned_m = tuple(Variant(dict(dtype=d, rows=r, cols=c, threads=128, unaligned=1),
                                rule=f"{_AT_MOST_B} and N % {c} == 0", priority=1)
                        for d, r, c in TRANSPOSE.values() if d != "int32")
    unaligned = tuple(Variant(dict(dtype=d, rows=r, cols=c, unaligned=1), rule=_AT_MOST_B)
                      for d, r, c in TRANSPOSE.values())
    return tiles + aligned + unaligned_m + unaligned


SPECS = (
    OpSpec(
        name="tkreg.batched_transpose",
        doc="x[B, M, N] -> [B, N, M] for 1-, 2- and 4-byte elements (the typed ops view other dtypes "
            "of those sizes as uint8 / float16 / int32)",
        tensors=(Tensor("x", ("B", "M", "N"), dtypes=tuple(d for d, _, _ in TRANSPOSE.values())),
                 Tensor("out", ("B", "N", "M"), dtype_of="x", role="output")),
        factory=transpose_kernel, variants=_variants(),
        reference=REFERENCE + "batched_transpose"),
)
