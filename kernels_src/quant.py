"""Quant formats and layout ops: (batched) transpose, per-channel FP8 (+ transpose, + SwiGLU),
SwiGLU backward + FP8, MXFP4 (e2m1 + E8M0 scales), E5M6, and FP8 cast back in those layouts.

Exact semantics (rounding, scale rules, bit layouts): tkreg/reference/quant.py, which matches
DeepSeek TileKernels' torch references bit for bit where TileKernels has the op.  Every kernel
reads its input once, keeps it in registers and rounds each output once; the SwiGLU ones use the
FP8 family's fast-math silu (kernels_src/fp8.py says why and what it costs in exactness).

Layouts (thread-level kernels, 16-byte loads; byte shuffles by PRMT, one instruction a word):
- batched_transpose, 2-byte elements at aligned pitches: 64 x 64 shared-memory tiles, 16-byte
  vectors both ways (_tile_transpose; where M % 16 == 8 the odd output rows' pieces shift by 8
  elements so no 32-byte sector is written by two CTAs: partial-sector writes cost up to 25%).
  1-byte elements at odd M: the same idea for any pitch on 64 x 128 tiles (_tile_transpose_any).
  Otherwise no shared memory: a thread loads an R x C block (R rows, one C-element 16-byte vector each) into 32-bit words, transposes it by PRMT and
  stores C vectors of R elements.  Lanes go in pairs along a row (the pair reads one full 32-byte sector per row) and
  16 pairs down the rows, so a warp's store writes 16 consecutive R-element pieces of an output
  row; the aligned kernels run 8 lanes along a row (whole 128-byte row reads; 1-byte elements then
  at 16 rows a lane, so an output piece stays 16 bytes).  One kernel per element size (1, 2, 4 bytes: the typed op views other dtypes of that size
  as uint8 / float16 / int32; a transpose only moves bits).  Pitches that are no multiple of the
  vectors (an odd token count): the same kernel with funnel-shifted loads and stores that each
  lane aligns with its neighbour's bytes (UNALIGNED).  Blocks at the edge take a per-element path.
- per-channel FP8 (one kernel, channel_quant_kernel): a 256-thread CTA owns 128 tokens x 128
  channels (8 x 8 a thread, only the inputs held in registers, 3 CTAs/SM; the amax on packed
  bf16x2 / fp16x2 words, e4m3 bytes four per cvt pair); the per-warp amaxes meet in shared memory
  and 128 threads compute each channel's scale once.  _transpose: q^T through an
  8 KB swizzled shared tile, 16-byte stores (the warp-local register transpose it replaced:
  `git show 3a6112f:kernels_src/quant.py`, 6-10% slower).  The SwiGLU _transpose op: the same
  kernel with evict-first stores (`ns = 2`, two 128-token slabs a CTA with the second's loads
  issued first, is the sweeps' older form: at 128 registers it held 2 CTAs/SM and lost 10-20%).
- group kernels (FP4, SwiGLU backward): a warp per row as in fp8.py (SwiGLU backward: two rows a
  warp; FP4 from 2048 (bf16) / 4096 (fp16) tokens: two row tiles a CTA, the second's loads first,
  evict-first stores); FP4 groups are 32 elements = 4 lanes (two shfl_xor), e2m1 codes as the min
  of three magic-rounded lines, two values at a time in bf16x2 / fp16x2 (equal to comparing against the RNE
  midpoints, TileKernels' bit-level convert: tests/tkreg/ops/test_quant_cpu.py checks both); the
  dequant is PRMT table lookups and a packed bf16 multiply by the power-of-two scale.
- E5M6: one CTA per token (the scale is per token), 128 threads x 8 vectors for K <= 8192 and
  256 x 8 at 3 CTAs/SM up to K = 16384, a block-wide amax, the fp16 step by cvt.rz.f16x2, 12 bytes (three
  32-bit stores) per 8 values.

Measured on the H200 (BENCHMARKS.md, % of copy at 16384 x 7168 / 8192 x 16384; tuning history in
docs/quant-tuning.md): transpose 1-byte 86%, 2-byte 91-92% (shared-memory tiles), 4-byte 92%,
per-channel 94 / 96%, its _transpose 98 / 99%, + SwiGLU 95%, SwiGLU backward 96-99%, FP4 quant
96-97%, FP4 dequant 92%, E5M6 95 / 94%, E5M6 dequant 98%, per-channel dequant 93-95%.

Grid order (kernels_src/_grid.py; docs/sweeps/raster.py on the H200): the row-streaming kernels
(the dequants, SwiGLU backward) run one flat grid with column blocks fastest, so the CTAs resident
at once stream whole rows: +3-9% of a same-size copy.  The tile kernels (per-channel, transposes) keep
row blocks on x: the flat order was no faster for them with occupancy held, and slower for the
transposing writes (per-channel transpose 0.85 -> 0.72-0.79).

Sizes served: see each spec's rule; token dims are run-time everywhere, M = 0 launches nothing.
"""
from kernels_src._grid import raster as _raster
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

FP8 = "float8_e4m3fn"
DTYPES = ("bfloat16", "float16")
FP8_MAX, AMAX_FLOOR = 448.0, 1e-4
FP4_FLOOR = 6.0 * 2.0 ** -126
FP4_FLOOR_BITS = 0x01C00000            # its fp32 bits
E5M6_MAX = 65024.0
_REF = "tkreg.reference.quant:"
_UE8M0 = Scalar("ue8m0", "bool", False)


def _scale(T, amax, floor, qmax, ue8m0):
    """(s, inv) fp32 from a group amax (kernels_src/fp8.py's rule for any max code value)."""
    a = T.max(amax, T.float32(floor))
    sf = T.ieee_fdiv(a, T.float32(qmax))
    if ue8m0 is None:
        return sf, T.ieee_fdiv(T.float32(qmax), a)
    e = ((T.reinterpret(sf, "uint32") - T.uint32(1)) >> T.uint32(23)) + T.uint32(1)
    return (T.if_then_else(ue8m0, T.reinterpret(e << T.uint32(23), "float32"), sf),
            T.if_then_else(ue8m0, T.reinterpret((T.uint32(254) - e) << T.uint32(23), "float32"),
                           T.ieee_fdiv(T.float32(qmax), a)))


def _silu(T, g, u, fsilu=0):
    """fast-math silu(g) * u in fp32 (kernels_src/fp8.py); fsilu: the same on SILU's ftz helpers."""
    if fsilu:
        return T.call_extern("float32", "tk_silu", g, u)
    return T.call_extern("float32", "__fdividef", g, T.float32(1) + T.__exp(-g)) * u


def _sigmoid(T, g, fsilu=0):
    if fsilu:
        return T.call_extern("float32", "tk_sigmoid", g)
    return T.call_extern("float32", "__fdividef", T.float32(1), T.float32(1) + T.__exp(-g))


# __fdividef(g, 1 + __expf(-g)) (* u) on the flush-to-zero ex2 / rcp: one MUFU each, where the
# non-ftz forms nvcc emits without --use_fast_math add range fix-ups (a compare and two predicated
# multiplies around the ex2, more around the rcp).  Equal wherever 1 + e^-g <= 2^126 (g > -87.3);
# below, both are zeros (their signs may differ).
SILU = r"""
__device__ __forceinline__ float tk_sigmoid(float g) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.44269504088896340736f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r; }
__device__ __forceinline__ float tk_silu(float g, float u) { return g * tk_sigmoid(g) * u; }
"""


# PRMT (byte permute), RZ / RN fp16x2 conversions, packed bf16 multiply, fp16x2 FMA and min: one
# instruction each (the RN conversion, FMA and min: the FP4 quant's e2m1 lines).
PRELUDE = r"""
__device__ __forceinline__ unsigned tk_prmt(unsigned a, unsigned b, unsigned s) { return __byte_perm(a, b, s); }
__device__ __forceinline__ unsigned tk_f16x2_rz(float lo, float hi) {
  unsigned r; asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ __forceinline__ unsigned tk_bmul2(unsigned a, unsigned b) {
  unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned tk_f16x2_rn(float lo, float hi) {
  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ __forceinline__ unsigned tk_hfma2(unsigned a, unsigned b, unsigned c) {
  unsigned r; asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned tk_hmin2(unsigned a, unsigned b) {
  unsigned r; asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
# Evict-first stores (16, 8, 4 bytes), as the MoE expand ships them: the kernels with a `cs` parameter.
STORE_CS = r"""
__device__ __forceinline__ void tk_st16_cs(void* dst, const void* src) {
  uint4 v = *(const uint4*)src;
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory"); }
__device__ __forceinline__ void tk_st8_cs(void* dst, const void* src) {
  uint2 v = *(const uint2*)src;
  asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" :: "l"(dst), "r"(v.x), "r"(v.y) : "memory"); }
__device__ __forceinline__ void tk_st4_cs(void* dst, unsigned v) {
  asm volatile("st.global.cs.b32 [%0], %1;" :: "l"(dst), "r"(v) : "memory"); }
"""
PRELUDE_CS = PRELUDE + STORE_CS
# Packed bf16x2 FMA, min and max (the bf16 FP4 quant's e2m1 lines and amax): one instruction each.
BF16X2 = r"""
__device__ __forceinline__ unsigned tk_bfma2(unsigned a, unsigned b, unsigned c) {
  unsigned r; asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned tk_bmin2(unsigned a, unsigned b) {
  unsigned r; asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned tk_bmax2(unsigned a, unsigned b) {
  unsigned r; asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
# Four fp32 -> four e4m3 bytes (a lowest) by two cvt.rn.satfinite.e4m3x2: the rounding of
# T.cast(y, FP8) (one F2FP a value plus the PRMTs that pack the bytes), half the instructions.
E4M3X4 = r"""
__device__ __forceinline__ unsigned tk_e4m3x4(float a, float b, float c, float d) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return (unsigned)lo | ((unsigned)hi << 16); }
__device__ __forceinline__ void tk_st1(void* dst, unsigned v) { *(unsigned char*)dst = (unsigned char)v; }
__device__ __forceinline__ unsigned tk_hmax2(unsigned a, unsigned b) {
  unsigned r; asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
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


def _prmt(T, a, b, sel):
    return T.call_extern("uint32", "tk_prmt", a, b, T.uint32(sel) if isinstance(sel, int) else sel)


def _t4x4(T, src, i0, step):
    """4 x 4 byte transpose of the words src[i0 + r * step] (rows r = 0..3) -> 4 words, word c =
    byte c of each row (8 PRMT)."""
    x0, x1, x2, x3 = (src[i0 + r * step] for r in range(4))
    t0, t1 = _prmt(T, x0, x1, 0x5140), _prmt(T, x0, x1, 0x7362)
    t2, t3 = _prmt(T, x2, x3, 0x5140), _prmt(T, x2, x3, 0x7362)
    return (_prmt(T, t0, t2, 0x5410), _prmt(T, t0, t2, 0x7632), _prmt(T, t1, t3, 0x5410), _prmt(T, t1, t3, 0x7632))


# ---- transpose -----------------------------------------------------------------------------------
# element size -> (kernel dtype, R rows per thread = store vector, C columns = load vector)
TRANSPOSE = {1: ("uint8", 8, 16), 2: ("float16", 8, 8), 4: ("int32", 4, 4)}
# aligned kernels' lanes along a row (2-byte elements at aligned pitches: _tile_transpose): 8
# (128-byte row reads) for 4-byte elements, +2-4% of copy; 1-byte elements at 8 lanes need 16
# rows a lane (16-byte output pieces): M % 16 == 0 runs that kernel on 128 threads, +3-7%
# (docs/sweeps/r21.py)
LANES = {"uint8": 2, "int32": 8}


def _tile_transpose(bm: int, bn: int, threads: int, sector: int = 0):
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
                        o[h] = _prmt(T, w[2 * h], w[2 * h + 1], half)
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
    (Its 2-byte form lost to the register kernels: docs/sweeps/r24u.py, built against 334dd42.)"""
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
                        o[h] = _prmt(T, _prmt(T, w[4 * h], w[4 * h + 1], sel),
                                     _prmt(T, w[4 * h + 2], w[4 * h + 3], sel), 0x5410)
                    if ms >= 0 and ms + V <= M:
                        T.stg128(out[bb, n0 + j, ms], o[T.Ramp(0, 1, 4)])
                    else:                                  # a row's first or last vector
                        for e in T.unroll(V):
                            if ms + e >= 0 and ms + e < M:
                                out[bb, n0 + j, ms + e] = T.cast((o[e // 4] >> (8 * (e % 4))) & T.uint32(255), "uint8")

    return batched_transpose


def transpose_kernel(dtype: str, rows: int = 8, cols: int = 8, threads: int = 256, unaligned: int = 0,
                     raster: str = "rows", lanes: int = 2, tile: int = 0, sector: int = 0, any_m: int = 0):
    """x[B, M, N] -> out[B, N, M]; a thread moves an R-row x 16-byte block (R x C elements).

    The R x 16-byte block lives in 32-bit words and moves by PRMT (one byte-permute instruction
    per output word pair): 1-byte elements as 4 x 4 byte transposes (8 PRMT per 4 words), 2-byte as
    2 x 2 (one PRMT a word), 4-byte by renaming registers.  Byte-typed register arrays cost the
    1-byte kernel 144 registers (1 CTA/SM); words take 48 (5 CTAs/SM): 71-73% -> 84-87% of copy
    on the H200 (docs/quant-tuning.md).  Both pitches whole 16-byte vectors (M % R == 0 and
    N % C == 0, the variant's rule): plain vector loads and stores.  unaligned: any pitches, through
    UNALIGNED's loads and stores; on the H200 1.0-2.8x the shared-memory tile it replaced and
    1.0-1.8x torch.compile at odd sizes (docs/sweeps/transpose_unaligned.py, docs/quant-tuning.md).
    lanes: lanes along a row (a warp's load reads 16 * lanes bytes of 32 / lanes rows; its store
    writes 32 / lanes consecutive R-element pieces of lanes output rows); aligned pitches only.
    tile: 2-byte elements at aligned pitches through a tile x tile shared-memory tile instead
    (_tile_transpose; rows, cols, lanes unused); sector: its whole-sector form for M % 16 == 8.
    any_m: 1-byte elements at odd M through the sector-aligned 64 x 128 tile (_tile_transpose_any).
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
    grid, unpack = _raster(T, raster, T.ceildiv(M, tm), T.ceildiv(N, tn))

    @T.prim_func
    def batched_transpose(x: T.Tensor((B, M, N), dtype), out: T.Tensor((B, N, M), dtype)):
        with T.Kernel(*grid, B, threads=threads,
                      prelude=PRELUDE + UNALIGNED if unaligned else PRELUDE) as blk:
            bm, bn, bb = unpack(blk)
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
                            o[(2 * w) * ow + h] = _prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x5410)
                            o[(2 * w + 1) * ow + h] = _prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x7632)
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


# ---- per-channel FP8 (128-token groups) --------------------------------------------------------
def _channel_io(T, silu):
    M = T.dynamic("M")
    if silu:
        N = T.dynamic("N")
        return M, N, N // 2, (M, N)
    K = T.dynamic("K")
    return M, K, K, (M, K)


def _channel_load(T, dtype, nv, rpt):
    """Both per-channel kernels' load: a thread's rpt rows x nv channels (zeros past the edges;
    with silu also the up half)."""
    @T.macro
    def load(x, g, h, r0, k0, M, K, silu):
        for i in T.unroll(rpt):
            if r0 + i < M and k0 < K:
                for v in T.vectorized(nv):
                    g[i * nv + v] = x[r0 + i, k0 + v]
                if silu:
                    for v in T.vectorized(nv):
                        h[i * nv + v] = x[r0 + i, K + k0 + v]
            else:
                for v in T.vectorized(nv):
                    g[i * nv + v] = T.cast(0, dtype)
                if silu:
                    for v in T.vectorized(nv):
                        h[i * nv + v] = T.cast(0, dtype)

    return load


def channel_quant_kernel(dtype: str, transpose: int = 0, silu: int = 0, rpt: int = 4, cw: int = 128, ns: int = 1,
                         cs: int = 0, minb: int = 0, fsilu: int = 0, raster: str = "rows", pk: int = 0):
    """x[M, K] (or [M, 2K] with silu: silu(x[:, :K]) * x[:, K:]) -> q[M, K] (transpose: q^T[K, M])
    e4m3, s[ceil(M / 128), K] fp32.

    A CTA owns ns 128-token slabs x cw channels, a thread rpt tokens x 8 channels ((cw / 8) *
    (128 / rpt) threads; a warp's rows are 256 contiguous bytes at cw = 128).  Only the bf16/fp16
    inputs stay in registers: y (and silu) is recomputed after the amax, since an fp32 copy held the
    old kernel at 2 CTAs/SM.  The per-warp amaxes go to shared memory and cw threads combine them
    and compute s and 1/s once per channel; a second barrier hands 1/s back.  transpose: q^T through
    a cw x 128-byte XOR-swizzled shared tile, 16-byte stores.  ns = 2: the next slab's loads go out
    into a second register buffer before this one is computed and stored (the MoE expand's lesson:
    loads stall behind the write stream); cs: evict-first stores (st.global.cs); minb:
    __launch_bounds__(threads, minb).  Round 2, rpt = 4: 73% -> 88% of copy (plain), 61% -> 73%
    (SwiGLU + transpose); round 3, SwiGLU + transpose at cw = 64, ns = 2, cs, minb = 2 (256
    threads held to 126 registers, 2 CTAs/SM): 71% -> 81% (docs/quant-tuning.md).  The defaults
    are round 2's kernel byte for byte (the plain op ships them).
    pk (no silu): the amax on the bf16x2 / fp16x2 words as loaded (|x| by clearing the sign bits,
    one packed max a pair: equal to the fp32 max, both widen exactly) and the e4m3 bytes four at a
    time (E4M3X4); with transpose a word is one channel's 4 tokens, written straight into the tile.
    """
    import tilelang.language as T

    M, N, K, x_shape = _channel_io(T, silu)
    q_shape = (K, M) if transpose else (M, K)
    nv = 8
    ncc = cw // 8                          # 8-channel chunks a row
    threads = ncc * (128 // rpt)
    warps = threads // 32
    assert threads % 32 == 0 and threads <= 1024 and 32 % ncc == 0
    assert not transpose or rpt == 4 or rpt == 8
    assert not pk or not silu
    max2 = "tk_bmax2" if dtype == "bfloat16" else "tk_hmax2"
    U = T.uint32

    def word(g, i):                        # values i, i + 1 as one 32-bit word (i even)
        return T.reinterpret(g[T.Ramp(i, 1, 2)], "uint32")

    def widen(w, hi):                      # the low / high 16-bit float of word w -> fp32, exactly
        if dtype == "bfloat16":
            return T.reinterpret(w & U(0xFFFF0000) if hi else w << U(16), "float32")
        return T.cast(T.reinterpret(T.cast(w >> U(16) if hi else w & U(0xFFFF), "uint16"), "float16"), "float32")

    def e4m3x4(a, b, c, d):
        return T.call_extern("uint32", "tk_e4m3x4", a, b, c, d)

    def yq(g, inv, i, v):                  # pk: token i, channel v, scaled
        return T.cast(g[i * nv + v], "float32") * inv[v]
    SL = T.ceildiv(M, 128)
    load = _channel_load(T, dtype, nv, rpt)
    grid, unpack = _raster(T, raster, T.ceildiv(M, 128 * ns), T.ceildiv(K, cw))

    def yv(g, h, i, yb):
        if fsilu:                          # computed once below (nvcc does not merge the two asm uses)
            return yb[i]
        gv = T.cast(g[i], "float32")
        return _silu(T, gv, T.cast(h[i], "float32")) if silu else gv

    @T.macro
    def store_tile(q, qt, o, tx, sl, bk):
        """The q^T tile -> q: per pass a thread's two 8-byte slots of one channel's 128 tokens, one
        16-byte store (qt: the byte tile, or with pk its words; o: 16 bytes, or with pk 4 words)."""
        for p in T.unroll(cw * 8 // threads):
            c = p * (threads // 8) + tx // 8
            ch = (tx % 8) * 2              # logical 8-byte slots ch, ch + 1
            sw = c // 8
            if pk:
                for i in T.vectorized(2):
                    o[i] = qt[c, (ch ^ sw) * 2 + i]
                for i in T.vectorized(2):
                    o[2 + i] = qt[c, ((ch + 1) ^ sw) * 2 + i]
            else:
                for i in T.vectorized(8):
                    o[i] = qt[c, (ch ^ sw) * 8 + i]
                for i in T.vectorized(8):
                    o[8 + i] = qt[c, ((ch + 1) ^ sw) * 8 + i]
            kk = bk * cw + c
            mm = sl * 128 + ch * 8
            if kk < K:
                if M % 16 == 0 and mm + 16 <= M:
                    if cs:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(q[kk, mm]), T.address_of(o[0]))
                    elif pk:
                        T.stg128(q[kk, mm], o[T.Ramp(0, 1, 4)])
                    else:
                        T.stg128(q[kk, mm], T.reinterpret(o[T.Ramp(0, 1, 16)], "uint32x4"))
                else:
                    for i in T.unroll(16):
                        if mm + i < M:
                            if pk:
                                T.call_extern("handle", "tk_st1", T.address_of(q[kk, mm + i]), o[i // 4] >> U(8 * (i % 4)))
                            else:
                                q[kk, mm + i] = o[i]

    @T.macro
    def proc(g, h, sl, bk, tx, cc, rg, k0, r0, q, s, ue8m0, am, inv, ql, red, sc, qs, t8, o, a, yb, wa, qw, qs32):
        if sl < SL:                        # uniform over the CTA (barriers inside)
            if fsilu:
                for i in T.unroll(rpt * nv):
                    yb[i] = _silu(T, T.cast(g[i], "float32"), T.cast(h[i], "float32"), fsilu)
            if pk:
                for w in T.unroll(nv // 2):
                    wa[w] = word(g, 2 * w) & U(0x7FFF7FFF)
                    for i in T.unroll(1, rpt):
                        wa[w] = T.call_extern("uint32", max2, wa[w], word(g, i * nv + 2 * w) & U(0x7FFF7FFF))
                for o_ in T.unroll(5 - (ncc.bit_length() - 1)):
                    for w in T.unroll(nv // 2):
                        wa[w] = T.call_extern("uint32", max2, wa[w], T.shfl_xor(wa[w], ncc << o_))
                for w in T.unroll(nv // 2):
                    am[2 * w] = widen(wa[w], 0)
                    am[2 * w + 1] = widen(wa[w], 1)
            else:
                for v in T.unroll(nv):
                    am[v] = T.float32(0)
                for i in T.unroll(rpt):
                    for v in T.unroll(nv):
                        am[v] = T.max(am[v], T.abs(yv(g, h, i * nv + v, yb)))
                for o_ in T.unroll(5 - (ncc.bit_length() - 1)):
                    for v in T.unroll(nv):
                        am[v] = T.max(am[v], T.shfl_xor(am[v], ncc << o_))
            if tx % 32 < ncc:
                for v in T.vectorized(nv):
                    red[tx // 32, cc * nv + v] = am[v]
            T.sync_threads()
            if tx < cw:                    # thread c: channel c's amax, s and 1/s
                a[0] = red[0, tx]
                for w in T.unroll(warps):
                    a[0] = T.max(a[0], red[w, tx])
                sc[tx] = _scale(T, a[0], AMAX_FLOOR, FP8_MAX, ue8m0)[1]
                if bk * cw + tx < K:
                    s[sl, bk * cw + tx] = _scale(T, a[0], AMAX_FLOOR, FP8_MAX, ue8m0)[0]
            T.sync_threads()
            for v in T.vectorized(nv):
                inv[v] = sc[cc * nv + v]
            if pk:
                if not transpose:             # words: 4 channels of a token
                    for i in T.unroll(rpt):
                        for h2 in T.unroll(2):
                            qw[i * 2 + h2] = e4m3x4(*(yq(g, inv, i, 4 * h2 + j) for j in range(4)))
                    for i in T.unroll(rpt):
                        if r0 + i < M and k0 < K:
                            if cs:
                                T.call_extern("handle", "tk_st8_cs", T.address_of(q[r0 + i, k0]), T.address_of(qw[i * 2]))
                            else:
                                T.stg64(q[r0 + i, k0], qw[T.Ramp(i * 2, 1, 2)])
                else:                         # words: a channel's 4 tokens, straight into its slot
                    for v in T.unroll(nv):
                        if rpt == 4:
                            qs32[cc * nv + v, ((rg // 2) ^ cc) * 2 + rg % 2] = e4m3x4(*(yq(g, inv, i, v) for i in range(4)))
                        else:
                            for j in T.unroll(2):
                                qs32[cc * nv + v, (rg ^ cc) * 2 + j] = e4m3x4(*(yq(g, inv, 4 * j + i, v) for i in range(4)))
                    T.sync_threads()
                    store_tile(q, qs32, qw, tx, sl, bk)
            else:
                for i in T.unroll(rpt):
                    for v in T.unroll(nv):
                        ql[i * nv + v] = T.cast(yv(g, h, i * nv + v, yb) * inv[v], FP8)
                if not transpose:
                    for i in T.unroll(rpt):
                        if r0 + i < M and k0 < K:
                            if cs:
                                T.call_extern("handle", "tk_st8_cs", T.address_of(q[r0 + i, k0]), T.address_of(ql[i * nv]))
                            else:
                                for v in T.vectorized(nv):
                                    q[r0 + i, k0 + v] = ql[i * nv + v]
                else:
                    # q^T tile [cw channels][128 tokens]: channel c's tokens rg*rpt.. go to rpt-byte slot
                    # rg ^ cc (rpt = 8) -- for rpt = 4 slot (rg ^ cc) of 4 bytes (16-way conflict-free).
                    for v in T.unroll(nv):
                        for i in T.unroll(rpt):
                            t8[i] = ql[i * nv + v]
                        slot = (rg ^ cc) if rpt == 8 else ((rg // 2) ^ cc) * 2 + rg % 2
                        for i in T.vectorized(rpt):
                            qs[cc * nv + v, slot * rpt + i] = t8[i]
                    T.sync_threads()
                    store_tile(q, qs, o, tx, sl, bk)

    @T.prim_func
    def channel_quant(x: T.Tensor(x_shape, dtype), q: T.Tensor(q_shape, FP8),
                      s: T.Tensor(((M + 127) // 128, K), "float32"), ue8m0: T.bool):
        with T.Kernel(*grid, threads=threads,
                      prelude=PRELUDE_CS + (SILU if fsilu else "") + (BF16X2 + E4M3X4 if pk else "")) as blk:
            bm, bk = unpack(blk)
            T.assume(N % (16 if silu else 8) == 0)
            if minb:                       # __launch_bounds__(threads, minb): a statement of the body
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            cc, rg = tx % ncc, tx // ncc
            k0 = bk * cw + cc * nv
            gA = T.alloc_local((rpt * nv,), dtype)
            hA = T.alloc_local((rpt * nv,), dtype)
            gB = T.alloc_local((rpt * nv,), dtype)
            hB = T.alloc_local((rpt * nv,), dtype)
            am = T.alloc_local((nv,), "float32")
            inv = T.alloc_local((nv,), "float32")
            ql = T.alloc_local((rpt * nv,), FP8)
            a = T.alloc_local((1,), "float32")
            t8 = T.alloc_local((rpt,), FP8)
            o = T.alloc_local((16,), FP8)
            yb = T.alloc_local((rpt * nv,), "float32") if fsilu else None
            wa = T.alloc_local((nv // 2,), "uint32") if pk else None
            qw = T.alloc_local((rpt * 2,), "uint32") if pk else None
            red = T.alloc_shared((warps, cw), "float32")
            sc = T.alloc_shared((cw,), "float32")
            qs = T.alloc_shared((cw, 128), FP8) if not pk else None
            qs32 = T.alloc_shared((cw, 32), "uint32") if pk and transpose else None
            load(x, gA, hA, (bm * ns) * 128 + rg * rpt, k0, M, K, silu)
            if ns == 1:
                proc(gA, hA, bm, bk, tx, cc, rg, k0, bm * 128 + rg * rpt, q, s, ue8m0, am, inv, ql, red, sc, qs, t8, o, a, yb, wa, qw, qs32)
            else:
                for j in T.unroll(ns // 2):       # slab 2j from A, 2j + 1 from B; each next one's loads first
                    load(x, gB, hB, (bm * ns + 2 * j + 1) * 128 + rg * rpt, k0, M, K, silu)
                    proc(gA, hA, bm * ns + 2 * j, bk, tx, cc, rg, k0, (bm * ns + 2 * j) * 128 + rg * rpt,
                         q, s, ue8m0, am, inv, ql, red, sc, qs, t8, o, a, yb, wa, qw, qs32)
                    if 2 * j + 2 < ns:
                        load(x, gA, hA, (bm * ns + 2 * j + 2) * 128 + rg * rpt, k0, M, K, silu)
                    proc(gB, hB, bm * ns + 2 * j + 1, bk, tx, cc, rg, k0, (bm * ns + 2 * j + 1) * 128 + rg * rpt,
                         q, s, ue8m0, am, inv, ql, red, sc, qs, t8, o, a, yb, wa, qw, qs32)

    return channel_quant


# ---- SwiGLU backward + per-token-group FP8 -----------------------------------------------------
def silu_backward_quant_kernel(dtype: str, threads: int = 128, rows: int = 2, fsilu: int = 0, raster: str = "rows",
                               minb: int = 0):
    """(dy[M, I], x[M, 2I]) -> dx[M, 2I] in fp32 -> q[M, 2I] e4m3, s[M, 2I // 128] (I % 128 == 0).

    A warp per row, `rows` rows a warp (warps apart) with every load issued before the first use;
    a half-warp owns a 128-wide group of dg (from g, u, dy) and the matching group of du, so each
    lane loads 16 bytes of g, u and dy per row and produces 8 codes of each half.  Two rows: 89%
    -> 95% of copy (docs/quant-tuning.md: more bytes in flight per SM; four rows lose occupancy).
    """
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")
    I = N // 2  # noqa: E741
    IG = I // 128
    warps, nv = threads // 32, 8
    grid, unpack = _raster(T, raster, T.ceildiv(M, warps * rows), T.ceildiv(IG, 2))

    @T.prim_func
    def silu_backward_quant(x: T.Tensor((M, N), dtype), dy: T.Tensor((M, I), dtype),
                            q: T.Tensor((M, N), FP8), s: T.Tensor((M, N // 128), "float32"), ue8m0: T.bool):
        with T.Kernel(*grid, threads=threads, **(dict(prelude=SILU) if fsilu else {})) as blk:
            bx, by = unpack(blk)
            T.assume(N % 256 == 0)
            if minb:
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            kg = by * 2 + (tx % 32) // 16
            col = kg * 128 + (tx % 16) * nv
            g = T.alloc_local((rows * nv,), dtype)
            u = T.alloc_local((rows * nv,), dtype)
            d = T.alloc_local((rows * nv,), dtype)
            y = T.alloc_local((2 * nv,), "float32")
            ql = T.alloc_local((2 * nv,), FP8)
            am = T.alloc_local((2,), "float32")
            sf = T.alloc_local((2,), "float32")
            inv = T.alloc_local((2,), "float32")
            for r in T.unroll(rows):
                row = (bx * rows + r) * warps + tx // 32
                if row < M and kg < IG:
                    for v in T.vectorized(nv):
                        g[r * nv + v] = x[row, col + v]
                    for v in T.vectorized(nv):
                        u[r * nv + v] = x[row, I + col + v]
                    for v in T.vectorized(nv):
                        d[r * nv + v] = dy[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        g[r * nv + v] = T.cast(0, dtype)
                        u[r * nv + v] = T.cast(0, dtype)
                        d[r * nv + v] = T.cast(0, dtype)
            for r in T.unroll(rows):
                row = (bx * rows + r) * warps + tx // 32
                am[0] = T.float32(0)
                am[1] = T.float32(0)
                for v in T.unroll(nv):
                    gf = T.cast(g[r * nv + v], "float32")
                    df = T.cast(d[r * nv + v], "float32")
                    sg = _sigmoid(T, gf, fsilu)
                    y[v] = df * T.cast(u[r * nv + v], "float32") * sg * (T.float32(1) + gf * (T.float32(1) - sg))
                    y[nv + v] = df * gf * sg
                    am[0] = T.max(am[0], T.abs(y[v]))
                    am[1] = T.max(am[1], T.abs(y[nv + v]))
                for j in T.unroll(2):
                    for o in T.unroll(4):
                        am[j] = T.max(am[j], T.shfl_xor(am[j], 8 >> o))
                for j in T.unroll(2):
                    sf[j] = _scale(T, am[j], AMAX_FLOOR, FP8_MAX, ue8m0)[0]
                    inv[j] = _scale(T, am[j], AMAX_FLOOR, FP8_MAX, ue8m0)[1]
                    for v in T.vectorized(nv):
                        ql[j * nv + v] = T.cast(y[j * nv + v] * inv[j], FP8)
                    if row < M and kg < IG:
                        for v in T.vectorized(nv):
                            q[row, j * I + col + v] = ql[j * nv + v]
                        if tx % 16 == 0:
                            s[row, j * IG + kg] = sf[j]

    return silu_backward_quant


# ---- MXFP4 ---------------------------------------------------------------------------------------
def fp4_quant_kernel(dtype: str, threads: int = 128, unroll: int = 4, nt: int = 1, cs: int = 0, minb: int = 0,
                     packed: int = 0):
    """x[M, K] -> q[M, K // 2] uint8 (2 codes a byte), s[M, K // 32] uint8 E8M0 (K % 32 == 0).

    A warp per row, nt row tiles a CTA (tile t: rows (bx * nt + t) * warps + warp; with nt = 2 the
    next tile's loads go out before this one is computed and stored), cs: evict-first 4-byte code
    stores, minb: __launch_bounds__(threads, minb).
    e2m1 code magnitude = RNE(g(|y|)) with g = min(2a, a + 2, a / 2 + 4), the piecewise-linear map
    of the e2m1 grid (step 0.5 below 2, 1 in [2, 4), 2 from 4) onto 0..7; RNE is monotone, so it
    is the min of the three lines each rounded by a magic add (equal to tkreg/reference/quant.py's
    compares with the midpoints; tests/tkreg/ops/test_quant_cpu.py checks every fp16 |y| <= 6).
    Two values at a time in fp16x2: y = x * 2^-e is exact in fp16 (8 or 11 significant bits; only
    |y| < 2^-14, far below the first midpoint 0.25, can round, and keeps its sign), a line is one
    fma.rn.f16x2 with the 1024 magic add (fp16's step is 1 in [1024, 2048)), then two min.f16x2,
    and the sign is the fp16 sign bit.  Exact for |y| <= 6, which the scale guarantees.  The same
    lines in fp32 took 24.5 instructions a value and were issue-bound: 78% -> 82% of copy
    (docs/quant-tuning.md, round 2); round 3, nt = 2 + cs: 82% -> 88% at 16384 rows, 81% -> 85% at
    4096, but 82% -> 78% at 1024 (half the CTAs).  The defaults are round 2's kernel byte for byte.
    packed (bf16 only): the same lines on bf16x2 pairs as loaded (440 instead of 720 SASS
    instructions for a lane's 32 values; 0.86 -> 0.96 of a same-size copy at 16384 x 7168):
    amax by max.bf16x2 over |x| (sign bit cleared), then over the halves as integers (bit
    patterns of non-negative floats order as their values); the scale exponent from the amax bits
    without a division (fl(a / 6) is a power of two only when a / 6 is, so ceil(log2(a / 6)) =
    E - 2, plus 1 when a's mantissa exceeds 1.5: ((bits + 0x3FFFFF) >> 23) - 2, equal to the fp32
    rule for every bf16 amax); each line one fma.rn.bf16x2 of |x| by 2^-e x (2, 1, 1/2) plus the
    magic 128 (bf16's step is 1 in [128, 256)): the product is exact inside the FMA, so the one
    rounding is the line's RNE (no fp16 step; checked against the reference for every bf16 |x| and
    scale).  Codes: the min minus 128 in each half, the sign bit of x shifted in.
    """
    import tilelang.language as T

    M, K = T.dynamic("M"), T.dynamic("K")
    warps, nv = threads // 32, 8
    span = 32 * nv                        # elements a warp covers per load
    U = T.uint32

    def hf(a, b, c):
        return T.call_extern("uint32", "tk_hfma2", a, U(b), U(c))

    @T.macro
    def load(x, g, row, by, tx):
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            if row < M and col < K:
                for v in T.vectorized(nv):
                    g[u * nv + v] = x[row, col + v]
            else:
                for v in T.vectorized(nv):
                    g[u * nv + v] = T.cast(0, dtype)

    @T.macro
    def store(row, col, tx, q, s, pk, e):
        # a lane's 8 codes (4 bytes) and, from one lane of the group's four, its E8M0 scale
        if row < M and col < K:
            if cs:
                T.call_extern("handle", "tk_st4_cs", T.address_of(q[row, col // 2]), pk)
            else:
                T.stg32(q[row, col // 2], pk)
            if tx % 4 == 0:
                s[row, col // 32] = T.cast(e, "uint8")

    @T.macro
    def proc(g, row, by, tx, q, s, am, bt):
        for u in T.unroll(unroll):
            am[u] = T.float32(0)
            for v in T.unroll(nv):
                am[u] = T.max(am[u], T.abs(T.cast(g[u * nv + v], "float32")))
            am[u] = T.max(am[u], T.shfl_xor(am[u], 2))
            am[u] = T.max(am[u], T.shfl_xor(am[u], 1))
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            sf = T.ieee_fdiv(T.max(am[u], T.float32(FP4_FLOOR)), T.float32(6.0))
            e = ((T.reinterpret(sf, "uint32") - U(1)) >> U(23)) + U(1)
            inv = T.reinterpret((U(254) - e) << U(23), "float32")
            for p in T.unroll(4):      # values 2p, 2p + 1: fp16 halves of h2
                h2 = T.call_extern("uint32", "tk_f16x2_rn", T.cast(g[u * nv + 2 * p], "float32") * inv,
                                   T.cast(g[u * nv + 2 * p + 1], "float32") * inv)
                a2 = h2 & U(0x7FFF7FFF)
                # 2a + 1024, a + 1026, a / 2 + 1028: the code is the min's low 3 mantissa bits
                m = T.call_extern("uint32", "tk_hmin2", T.call_extern("uint32", "tk_hmin2",
                                  hf(a2, 0x40004000, 0x64006400), hf(a2, 0x3C003C00, 0x64026402)),
                                  hf(a2, 0x38003800, 0x64046404))
                c = (m & U(0x00070007)) | ((h2 >> U(12)) & U(0x00080008))
                bt[p] = c | (c >> U(12))           # low byte: code 2p | code 2p + 1 << 4
            pk = _prmt(T, _prmt(T, bt[0], bt[1], 0x0040), _prmt(T, bt[2], bt[3], 0x0040), 0x5410)
            store(row, col, tx, q, s, pk, e)

    assert not packed or dtype == "bfloat16"

    def b2(op, *a):                # BF16X2's packed bf16 FMA / min / max
        return T.call_extern("uint32", "tk_b" + op, *a)

    def word(g, i):                # bf16 values i, i + 1 as one 32-bit word (i even)
        return T.reinterpret(g[T.Ramp(i, 1, 2)], "uint32")

    @T.macro
    def proc_packed(g, row, by, tx, q, s, am, bt, wa):
        for u in T.unroll(unroll):
            for p in T.unroll(4):
                wa[u * 4 + p] = word(g, u * nv + 2 * p) & U(0x7FFF7FFF)
            m4 = b2("max2", b2("max2", wa[u * 4], wa[u * 4 + 1]), b2("max2", wa[u * 4 + 2], wa[u * 4 + 3]))
            m1 = T.max(m4 & U(0xFFFF), m4 >> U(16))
            m2 = T.max(m1, T.shfl_xor(m1, 2))
            am[u] = T.max(m2, T.shfl_xor(m2, 1)) << U(16)   # fp32 bits of the group's amax
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            # int32 (every value here is < 2^31): the simplifier turns compares into subtractions
            # whose negative literals a uint32 expression rejects
            fb = T.max(T.reinterpret(am[u], "int32"), FP4_FLOOR_BITS)
            e = T.if_then_else(fb >= 0x7F800000, 255, ((fb + 0x3FFFFF) >> 23) - 2)
            k2 = T.reinterpret((255 - e) * 0x00800080, "uint32")          # 2^-e x 2, both halves
            k1 = T.reinterpret((254 - e) * 0x00800080, "uint32")
            kh = T.reinterpret(T.if_then_else(e >= 253, 0x00400040, (253 - e) * 0x00800080), "uint32")   # subnormal at 253
            for h in T.unroll(2):        # values 4h .. 4h + 3 -> 16 bits of codes
                for r in T.unroll(2):
                    a2 = wa[u * 4 + 2 * h + r]
                    m = b2("min2", b2("min2", b2("fma2", a2, k2, U(0x43004300)), b2("fma2", a2, k1, U(0x43024302))),
                           b2("fma2", a2, kh, U(0x43044304)))
                    bt[r] = m - U(0x43004300) + ((word(g, u * nv + 4 * h + 2 * r) >> U(12)) & U(0x00080008))
                z = bt[0] + (bt[1] << U(8))                  # codes at bits 0, 16, 8, 24
                bt[2 + h] = z | (z >> U(12))
            store(row, col, tx, q, s, _prmt(T, bt[2], bt[3], 0x5410), e)

    @T.macro
    def run(g, row, by, tx, q, s, am, bt, wa):
        if packed:
            proc_packed(g, row, by, tx, q, s, am, bt, wa)
        else:
            proc(g, row, by, tx, q, s, am, bt)

    @T.prim_func
    def fp4_quant(x: T.Tensor((M, K), dtype), q: T.Tensor((M, K // 2), "uint8"),
                  s: T.Tensor((M, K // 32), "uint8")):
        with T.Kernel(T.ceildiv(M, warps * nt), T.ceildiv(K, span * unroll), threads=threads,
                      prelude=PRELUDE_CS + BF16X2 if packed else PRELUDE_CS) as (bx, by):
            T.assume(K % 32 == 0)
            if minb:                       # __launch_bounds__(threads, minb)
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            gA = T.alloc_local((unroll * nv,), dtype)
            gB = T.alloc_local((unroll * nv,), dtype)
            am = T.alloc_local((unroll,), "uint32" if packed else "float32")
            bt = T.alloc_local((4,), "uint32")
            wa = T.alloc_local((unroll * 4,), "uint32") if packed else None
            w = tx // 32
            load(x, gA, (bx * nt) * warps + w, by, tx)
            if nt == 1:
                run(gA, bx * warps + w, by, tx, q, s, am, bt, wa)
            else:
                for j in T.unroll(nt // 2):       # tile 2j from A, 2j + 1 from B; each next one's loads first
                    load(x, gB, (bx * nt + 2 * j + 1) * warps + w, by, tx)
                    run(gA, (bx * nt + 2 * j) * warps + w, by, tx, q, s, am, bt, wa)
                    if 2 * j + 2 < nt:
                        load(x, gA, (bx * nt + 2 * j + 2) * warps + w, by, tx)
                    run(gB, (bx * nt + 2 * j + 1) * warps + w, by, tx, q, s, am, bt, wa)

    return fp4_quant


def fp4_dequant_kernel(threads: int = 256, unroll: int = 8, cs: int = 0, raster: str = "rows"):
    """q[M, K // 2] uint8, s[M, K // 32] uint8 -> out[M, K] bf16 (8 values a lane, 16-byte stores).

    8 codes -> 4 bf16x2 words by PRMT: the two bytes of each e2m1 magnitude in bf16 are 8-entry
    byte tables indexed by the 3 magnitude bits, one more PRMT moves the sign bits, then
    mul.rn.bf16x2 by 2^(s - 127) (exact: a 2-significant-bit value times a power of two rounds
    nowhere, as the reference's fp32 product and bf16 rounding).  ~19 instructions per 8 values
    (was ~100): 59% -> 88% of copy; unroll 8 keeps 8 independent 4-byte loads in flight a lane.
    cs: evict-first stores (st.global.cs), as the MoE expand ships them.
    """
    import tilelang.language as T

    M, H = T.dynamic("M"), T.dynamic("H")
    K = 2 * H
    warps, nv = threads // 32, 8
    span = 32 * nv
    U = T.uint32
    grid, unpack = _raster(T, raster, T.ceildiv(M, warps), T.ceildiv(K, span * unroll))

    @T.prim_func
    def fp4_dequant(q: T.Tensor((M, H), "uint8"), s: T.Tensor((M, H // 16), "uint8"),
                    out: T.Tensor((M, K), "bfloat16")):
        with T.Kernel(*grid, threads=threads, prelude=PRELUDE_CS if cs else PRELUDE) as blk:
            bx, by = unpack(blk)
            T.assume(H % 16 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            w = T.alloc_local((unroll,), "uint32")
            sb = T.alloc_local((unroll,), "uint32")
            o = T.alloc_local((4,), "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    w[u] = T.reinterpret(T.ldg32(q[row, col // 2]), "uint32")
                    sb[u] = T.cast(s[row, col // 32], "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    m = w[u] & U(0x77777777)
                    hb0 = _prmt(T, U(0x3F3F3F00), U(0x40404040), m)            # high bytes, codes 0-3
                    hb1 = _prmt(T, U(0x3F3F3F00), U(0x40404040), m >> U(16))   # codes 4-7
                    lb0 = _prmt(T, U(0xC0800000), U(0xC0804000), m)            # low bytes
                    lb1 = _prmt(T, U(0xC0800000), U(0xC0804000), m >> U(16))
                    w4 = w[u] << U(4)
                    hs0 = hb0 | (_prmt(T, w4, w[u], 0x5140) & U(0x80808080))   # sign bits
                    hs1 = hb1 | (_prmt(T, w4, w[u], 0x7362) & U(0x80808080))
                    sc2 = (sb[u] << U(7)) | (sb[u] << U(23))                  # 2^(s - 127) twice in bf16
                    o[0] = T.call_extern("uint32", "tk_bmul2", _prmt(T, lb0, hs0, 0x5140), sc2)
                    o[1] = T.call_extern("uint32", "tk_bmul2", _prmt(T, lb0, hs0, 0x7362), sc2)
                    o[2] = T.call_extern("uint32", "tk_bmul2", _prmt(T, lb1, hs1, 0x5140), sc2)
                    o[3] = T.call_extern("uint32", "tk_bmul2", _prmt(T, lb1, hs1, 0x7362), sc2)
                    if cs:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(out[row, col]), T.address_of(o[0]))
                    else:
                        T.stg128(out[row, col], o[T.Ramp(0, 1, 4)])

    return fp4_dequant


# ---- E5M6 ----------------------------------------------------------------------------------------
def _e5m6(T, y):
    """12-bit E5M6 codes of the fp32 pair y = (y0, y1) (tkreg/reference/quant.py: fp16 RTZ, then
    RNE on the fp32's 17 dropped bits).  The fp16 step is one cvt.rz.f16x2.f32 for two values: RZ,
    fp16 subnormals, inf for inf, sign kept, the reference's rule for every |y| < 65536 (the scale
    keeps |y| <= 65024; only a NaN's sign can differ: the hardware gives 0x7FFF).  ~12
    instructions a value, against ~35 for the integer fp32 -> fp16 rebase."""
    U = T.uint32
    h2 = T.call_extern("uint32", "tk_f16x2_rz", y[0], y[1])
    out = []
    for h, v in ((h2, y[0]), (h2 >> U(16), y[1])):
        c = (h >> U(4)) & U(0xFFF)
        up = ((T.reinterpret(v, "uint32") & U(0x1FFFF)) + U(0xFFFF) + (c & U(1))) >> U(17)
        out.append((c + up) & U(0xFFF))
    return out


def e5m6_quant_kernel(dtype: str, threads: int = 256, vecs: int = 8, minb: int = 0):
    """x[M, K] -> p[M, 3K/2] uint8, s[M] fp32 (one scale per token; K % 8 == 0, K <= threads*8*vecs).

    One CTA per token, `vecs` 16-byte vectors a thread held in registers across the block amax.
    vecs = 4 took half the registers of vecs = 8: 61% -> 91% of copy at K = 7168 (256 threads); then
    (docs/sweeps/e5m6_threads.py, same-size copy = 1): K <= 8192 on 128 threads x 8 vectors 0.92 ->
    0.97 at 16384 x 7168, K <= 16384 on 512 x 4 0.85 -> 0.87 at 8192 x 16384 (1024 x 2: 0.57).
    minb: __launch_bounds__(threads, minb).
    """
    import tilelang.language as T

    M, K = T.dynamic("M"), T.dynamic("K")
    warps, nv = threads // 32, 8
    U = T.uint32

    @T.prim_func
    def e5m6_quant(x: T.Tensor((M, K), dtype), p: T.Tensor((M, K * 3 // 2), "uint8"),
                   s: T.Tensor((M,), "float32"), ue8m0: T.bool):
        with T.Kernel(M, threads=threads, prelude=PRELUDE) as row:
            T.assume(K % 8 == 0)
            if minb:
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            g = T.alloc_local((vecs * nv,), dtype)
            hc = T.alloc_local((nv,), "uint32")
            yy = T.alloc_local((nv,), "float32")
            am = T.alloc_local((1,), "float32")
            red = T.alloc_shared((warps,), "float32")
            for i in T.unroll(vecs):
                col = (i * threads + tx) * nv
                if col < K:
                    for v in T.vectorized(nv):
                        g[i * nv + v] = x[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        g[i * nv + v] = T.cast(0, dtype)
            am[0] = T.float32(0)
            for i in T.unroll(vecs * nv):
                am[0] = T.max(am[0], T.abs(T.cast(g[i], "float32")))
            for o in T.unroll(5):
                am[0] = T.max(am[0], T.shfl_xor(am[0], 16 >> o))
            if tx % 32 == 0:
                red[tx // 32] = am[0]
            T.sync_threads()
            for w in T.unroll(warps):
                am[0] = T.max(am[0], red[w])
            sf = T.alloc_local((2,), "float32")
            sf[0] = _scale(T, am[0], AMAX_FLOOR, E5M6_MAX, ue8m0)[0]
            sf[1] = _scale(T, am[0], AMAX_FLOOR, E5M6_MAX, ue8m0)[1]
            if tx == 0:
                s[row] = sf[0]
            for i in T.unroll(vecs):
                col = (i * threads + tx) * nv
                if col < K:
                    for v in T.unroll(nv):
                        yy[v] = T.cast(g[i * nv + v], "float32") * sf[1]
                    for v in T.unroll(nv // 2):
                        c2 = _e5m6(T, (yy[2 * v], yy[2 * v + 1]))
                        hc[2 * v] = c2[0]
                        hc[2 * v + 1] = c2[1]
                    off = col // 8 * 12
                    T.stg32(p[row, off], (hc[0] << U(20)) | (hc[1] << U(8)) | (hc[2] >> U(4)))
                    T.stg32(p[row, off + 4], (hc[2] << U(28)) | (hc[3] << U(16)) | (hc[4] << U(4)) | (hc[5] >> U(8)))
                    T.stg32(p[row, off + 8], (hc[5] << U(24)) | (hc[6] << U(12)) | hc[7])

    return e5m6_quant


def e5m6_dequant_kernel(threads: int = 256, unroll: int = 2, raster: str = "rows"):
    """p[M, 3K/2] uint8, s[M] fp32 -> out[M, K] bf16 (8 values = 12 bytes a lane)."""
    import tilelang.language as T

    M, P = T.dynamic("M"), T.dynamic("P")
    K = P // 3 * 2
    warps, nv = threads // 32, 8
    span = 32 * nv
    U = T.uint32
    grid, unpack = _raster(T, raster, T.ceildiv(M, warps), T.ceildiv(K, span * unroll))

    @T.prim_func
    def e5m6_dequant(p: T.Tensor((M, P), "uint8"), s: T.Tensor((M,), "float32"),
                     out: T.Tensor((M, K), "bfloat16")):
        with T.Kernel(*grid, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(P % 12 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            w = T.alloc_local((unroll * 3,), "uint32")
            hc = T.alloc_local((nv,), "uint32")
            o = T.alloc_local((nv,), "bfloat16")
            sc = T.alloc_local((1,), "float32")
            if row < M:
                sc[0] = s[row]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    for j in T.unroll(3):
                        w[u * 3 + j] = T.reinterpret(T.ldg32(p[row, col // 8 * 12 + 4 * j]), "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    hc[0] = w[u * 3] >> U(20)
                    hc[1] = w[u * 3] >> U(8)
                    hc[2] = (w[u * 3] << U(4)) | (w[u * 3 + 1] >> U(28))
                    hc[3] = w[u * 3 + 1] >> U(16)
                    hc[4] = w[u * 3 + 1] >> U(4)
                    hc[5] = (w[u * 3 + 1] << U(8)) | (w[u * 3 + 2] >> U(24))
                    hc[6] = w[u * 3 + 2] >> U(12)
                    hc[7] = w[u * 3 + 2]
                    for v in T.unroll(nv):
                        f = T.reinterpret(T.cast((hc[v] & U(0xFFF)) << U(4), "uint16"), "float16")
                        o[v] = T.cast(T.cast(f, "float32") * sc[0], "bfloat16")
                    T.stg128(out[row, col], T.reinterpret(o[T.Ramp(0, 1, 8)], "uint32x4"))

    return e5m6_dequant


# ---- FP8 cast back in the new layouts ----------------------------------------------------------
def fp8_dequant_kernel(layout: str, threads: int = 256, unroll: int = 2, cs: int = 0, raster: str = "rows"):
    """layout "group": q[R, C], s[R, ceil(C / 128)] with any strides (ss0, ss1);
    "channel": q[M, K], s[ceil(M / 128), K] (scale per column per 128-row group).
    cs: evict-first stores (st.global.cs)."""
    import tilelang.language as T

    R, C = T.dynamic("R"), T.dynamic("C")
    warps, nv = threads // 32, 8
    span = 32 * nv
    if layout == "group":
        ss0, ss1 = T.dynamic("ss0"), T.dynamic("ss1")
        S = T.StridedTensor((R, (C + 127) // 128), (ss0, ss1), "float32")
    else:
        S = T.Tensor(((R + 127) // 128, C), "float32")
    grid, unpack = _raster(T, raster, T.ceildiv(R, warps), T.ceildiv(C, span * unroll))

    @T.prim_func
    def fp8_dequant(q: T.Tensor((R, C), FP8), s: S, out: T.Tensor((R, C), "bfloat16")):
        with T.Kernel(*grid, threads=threads, **(dict(prelude=STORE_CS) if cs else {})) as blk:
            bx, by = unpack(blk)
            T.assume(C % 8 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            ql = T.alloc_local((unroll * nv,), FP8)
            sc = T.alloc_local((unroll * nv,), "float32")
            o = T.alloc_local((nv,), "bfloat16")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < C:
                    for v in T.vectorized(nv):
                        ql[u * nv + v] = q[row, col + v]
                    if layout == "group":
                        sc[u * nv] = s[row, col // 128]
                    else:
                        for v in T.vectorized(nv):
                            sc[u * nv + v] = s[row // 128, col + v]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < C:
                    if layout == "group":
                        for v in T.unroll(nv):
                            o[v] = T.cast(T.cast(ql[u * nv + v], "float32") * sc[u * nv], "bfloat16")
                    else:
                        for v in T.unroll(nv):
                            o[v] = T.cast(T.cast(ql[u * nv + v], "float32") * sc[u * nv + v], "bfloat16")
                    if cs:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(out[row, col]), T.address_of(o[0]))
                    else:
                        T.stg128(out[row, col], T.reinterpret(o[T.Ramp(0, 1, 8)], "uint32x4"))

    return fp8_dequant


# ---- specs ---------------------------------------------------------------------------------------
def _x(shape):
    return Tensor("x", shape, dtypes=DTYPES)


SPECS = (
    OpSpec(
        name="tkreg.batched_transpose",
        doc="x[B, M, N] -> [B, N, M] for 1-, 2- and 4-byte elements (the typed ops view other dtypes "
            "of those sizes as uint8 / float16 / int32)",
        tensors=(Tensor("x", ("B", "M", "N"), dtypes=tuple(d for d, _, _ in TRANSPOSE.values())),
                 Tensor("out", ("B", "N", "M"), dtype_of="x", role="output")),
        factory=transpose_kernel,
        variants=(Variant(dict(dtype="uint8", rows=16, cols=16, lanes=8, threads=128),
                          rule="B <= 65535 and M % 16 == 0 and N % 16 == 0", priority=3),
                  # 2-byte at aligned pitches: 64 x 64 shared-memory tiles on 256 threads; against the
                  # register transposes it replaced (64 x 128 up to 22 M elements, 32 x 512 above)
                  # 0.90-1.07 -> 1.03-1.12x torch.compile at 1024-4096 x 4096-7168, 0.92 -> 0.95 of a
                  # copy at 16384 x 7168 / 8192 x 16384 (docs/sweeps/r23s.py)
                  Variant(dict(dtype="float16", tile=64, threads=256), rule="B <= 65535 and M % 8 == 0 and N % 8 == 0",
                          priority=3),
                  # M % 16 == 8 (odd output rows start mid-sector): whole-sector pieces, 3000 x 7168
                  # 0.90 -> 0.96 of a same-size copy, 16376 x 7168 0.75 -> 0.91 of a copy; 2-3% behind
                  # the plain tile where M % 16 == 0 (docs/sweeps/r24s.py)
                  Variant(dict(dtype="float16", tile=64, threads=256, sector=1),
                          rule="B <= 65535 and M % 16 == 8 and N % 8 == 0", priority=4))
        # 1-byte at odd M: sector-aligned 64 x 128 tiles, of a same-size copy 4097 x 7168 0.70 -> 0.72,
        # 4095 x 4096 0.48 -> 0.66, 1001 x 7168 0.72 -> 0.84 against the unaligned register kernel; at
        # M % 16 == 8 its column gathers hit 8-way bank conflicts (0.37), so odd M only (docs/sweeps/r24u.py)
        + (Variant(dict(dtype="uint8", any_m=1, threads=256), rule="B <= 65535 and M % 2 == 1 and N % 16 == 0",
                   priority=2),)
        + tuple(Variant(dict(dtype=d, rows=r, cols=c, **({"lanes": LANES[d]} if LANES[d] != 2 else {})),
                               rule=f"B <= 65535 and M % {r} == 0 and N % {c} == 0", priority=2)
                       for d, r, c in TRANSPOSE.values() if d != "float16")
        # unaligned M, aligned N: 128 threads measured 5-11% ahead for 1- and 2-byte elements
        + tuple(Variant(dict(dtype=d, rows=r, cols=c, threads=128, unaligned=1), rule=f"B <= 65535 and N % {c} == 0",
                        priority=1) for d, r, c in TRANSPOSE.values() if d != "int32")
        + tuple(Variant(dict(dtype=d, rows=r, cols=c, unaligned=1), rule="B <= 65535") for d, r, c in TRANSPOSE.values()),
        reference=_REF + "batched_transpose"),
    OpSpec(
        name="tkreg.per_channel_quant_fp8",
        doc="x[M, K] -> q[M, K] e4m3, s[ceil(M / 128), K] fp32: amax per channel over groups of 128 "
            "tokens (TileKernels' per_channel_cast; K % 8 == 0)",
        tensors=(_x(("M", "K")), Tensor("q", ("M", "K"), dtype=FP8, role="output"),
                 Tensor("s", ("(M + 127) // 128", "K"), dtype="float32", role="output")),
        scalars=(_UE8M0,), factory=channel_quant_kernel,
        # 128 channels x 8 tokens a thread, 3 CTAs/SM, packed amax and e4m3 conversion, evict-first
        # stores: 0.88 -> 0.93 of a same-size copy at 16384 x 7168 (docs/sweeps/r21.py)
        variants=tuple(Variant(dict(dtype=d, cw=128, rpt=8, minb=3, pk=1, cs=1), rule="K % 8 == 0") for d in DTYPES),
        reference=_REF + "per_channel_quant_fp8"),
    OpSpec(
        name="tkreg.per_channel_quant_fp8_transpose",
        doc="x[M, K] -> q^T[K, M] e4m3, s[ceil(M / 128), K] fp32 (per-channel, 128-token groups; "
            "for weight-gradient GEMMs; K % 8 == 0)",
        tensors=(_x(("M", "K")), Tensor("q", ("K", "M"), dtype=FP8, role="output"),
                 Tensor("s", ("(M + 127) // 128", "K"), dtype="float32", role="output")),
        scalars=(_UE8M0,), factory=channel_quant_kernel,
        # q^T through the shared-memory tile (+6-10% over the warp-local register transpose it
        # replaced, docs/sweeps/tile2.py), 128 channels x 8 tokens a thread, 3 CTAs/SM, packed:
        # 0.91 -> 0.97 of a same-size copy at 16384 x 7168 (docs/sweeps/r21.py)
        variants=tuple(Variant(dict(dtype=d, transpose=1, cw=128, rpt=8, minb=3, pk=1), rule="K % 8 == 0") for d in DTYPES),
        reference=_REF + "per_channel_quant_fp8_transpose"),
    OpSpec(
        name="tkreg.silu_and_mul_per_channel_quant_fp8_transpose",
        doc="x[M, 2I] -> silu(x[:, :I]) * x[:, I:] (fp32, fast-math silu) -> q^T[I, M] e4m3, "
            "s[ceil(M / 128), I] fp32 (I % 8 == 0)",
        tensors=(_x(("M", "N")), Tensor("q", ("N // 2", "M"), dtype=FP8, role="output"),
                 Tensor("s", ("(M + 127) // 128", "N // 2"), dtype="float32", role="output")),
        scalars=(_UE8M0,), factory=channel_quant_kernel,
        # 64 channels, one slab a 256-thread CTA held to 64 registers (4 CTAs/SM, no prefetch),
        # evict-first, silu on the ftz MUFU forms: 0.76-0.84 -> 0.92-0.95 of a same-size copy against
        # round 3's two prefetched slabs at 2 CTAs/SM (docs/sweeps/tile2.py)
        variants=tuple(Variant(dict(dtype=d, silu=1, transpose=1, cw=64, cs=1, minb=4, fsilu=1), rule="N % 16 == 0")
                       for d in DTYPES),
        reference=_REF + "silu_and_mul_per_channel_quant_fp8_transpose"),
    OpSpec(
        name="tkreg.silu_and_mul_backward_quant_fp8",
        doc="(dy[M, I], x[M, 2I]) -> dx = [dy*u*s*(1+g*(1-s)) | dy*g*s] in fp32 (s = sigmoid(g), fast "
            "math) -> q[M, 2I] e4m3, s[M, 2I // 128] fp32 (I % 128 == 0)",
        tensors=(Tensor("dy", ("M", "N // 2"), dtypes=DTYPES), Tensor("x", ("M", "N"), dtype_of="dy"),
                 Tensor("q", ("M", "N"), dtype=FP8, role="output"),
                 Tensor("s", ("M", "N // 128"), dtype="float32", role="output")),
        scalars=(_UE8M0,), factory=silu_backward_quant_kernel,
        # sigmoid on the ftz MUFU forms: +1-2% (docs/sweeps/silu_ftz.py); column blocks first, held to
        # 64 registers (8 CTAs/SM) as before: +0-6% (docs/sweeps/raster.py)
        variants=tuple(Variant(dict(dtype=d, fsilu=1, raster="flat", minb=8), rule="N % 256 == 0") for d in DTYPES),
        reference=_REF + "silu_and_mul_backward_quant_fp8"),
    OpSpec(
        name="tkreg.per_token_group_quant_fp4",
        doc="x[M, K] -> q[M, K // 2] uint8 (OCP MXFP4 e2m1, RNE, two a byte, low nibble first), "
            "s[M, K // 32] uint8 E8M0 = 2^ceil(log2(amax / 6)) (K % 32 == 0)",
        tensors=(_x(("M", "K")), Tensor("q", ("M", "K // 2"), dtype="uint8", role="output"),
                 Tensor("s", ("M", "K // 32"), dtype="uint8", role="output")),
        factory=fp4_quant_kernel,
        # fp16: two row tiles a CTA (next prefetched) + evict-first from M >= 4096 (H200, K = 7168: 85 /
        # 88% of copy at 4096 / 16384 rows against 81 / 82%; at 1024 rows it halves too few CTAs).
        # bf16: the lines on packed bf16x2 (docs/sweeps/fp4_packed.py, time of a same-size copy / time:
        # 16384 x 7168 0.86 -> 0.96, 2048 x 7168 0.81 -> 0.95, 1024 x 7168 0.82 -> 0.93), two tiles a
        # CTA from 2048 rows, evict-first stores throughout.
        variants=(Variant(dict(dtype="bfloat16", packed=1, nt=2, cs=1), rule="K % 32 == 0 and M >= 2048", priority=1),
                  Variant(dict(dtype="bfloat16", packed=1, cs=1), rule="K % 32 == 0"),
                  Variant(dict(dtype="float16", nt=2, cs=1), rule="K % 32 == 0 and M >= 4096", priority=1),
                  Variant(dict(dtype="float16"), rule="K % 32 == 0")),
        reference=_REF + "per_token_group_quant_fp4"),
    OpSpec(
        name="tkreg.per_token_group_dequant_fp4",
        doc="q[M, K // 2] uint8 e2m1 pairs, s[M, K // 32] uint8 E8M0 -> bf16 (exact)",
        tensors=(Tensor("q", ("M", "H"), dtypes=("uint8",)),
                 Tensor("s", ("M", "H // 16"), dtype="uint8"),
                 Tensor("out", ("M", "2 * H"), dtype="bfloat16", role="output")),
        # evict-first stores: +0.7-1.5 points of a same-size copy (docs/sweeps/dequant_cs.py); column
        # blocks first: +0-4% (docs/sweeps/raster.py)
        factory=fp4_dequant_kernel, variants=(Variant(dict(cs=1, raster="flat"), rule="H % 16 == 0"),),
        reference=_REF + "per_token_group_dequant_fp4"),
    OpSpec(
        name="tkreg.quant_e5m6",
        doc="x[M, K] -> p[M, 3K/2] uint8 (12-bit E5M6 codes, 8 per 12 bytes), s[M] fp32 per token "
            "(TileKernels' per_token_cast_to_e5m6; K % 8 == 0, K <= 16384)",
        tensors=(_x(("M", "K")), Tensor("p", ("M", "K * 3 // 2"), dtype="uint8", role="output"),
                 Tensor("s", ("M",), dtype="float32", role="output")),
        scalars=(_UE8M0,), factory=e5m6_quant_kernel,
        variants=tuple(v for d in DTYPES for v in (
            Variant(dict(dtype=d, threads=128, vecs=8), rule="K % 8 == 0 and K <= 8192", priority=1),
            # 256 threads x 8 vectors held to 3 CTAs/SM: 0.87 -> 0.93-0.97 of copy (docs/sweeps/r21.py)
            Variant(dict(dtype=d, threads=256, vecs=8, minb=3), rule="K % 8 == 0 and K <= 16384"))),
        reference=_REF + "quant_e5m6"),
    OpSpec(
        name="tkreg.dequant_e5m6",
        doc="p[M, P = 3K/2] uint8 E5M6, s[M] fp32 -> bf16 [M, K] (K % 8 == 0, i.e. P % 12 == 0)",
        tensors=(Tensor("p", ("M", "P"), dtypes=("uint8",)), Tensor("s", ("M",), dtype="float32"),
                 Tensor("out", ("M", "P // 3 * 2"), dtype="bfloat16", role="output")),
        # column blocks first: +4-6% (docs/sweeps/raster.py)
        factory=e5m6_dequant_kernel, variants=(Variant(dict(raster="flat"), rule="P % 12 == 0"),),
        reference=_REF + "dequant_e5m6"),
    OpSpec(
        name="tkreg.group_dequant_fp8",
        doc="q[R, C] e4m3, s[R, ceil(C / 128)] fp32 with any strides (row-major, DeepGEMM column-major "
            "view, or s.t() of per-channel scales for a q^T) -> bf16 q * s (C % 8 == 0)",
        tensors=(Tensor("q", ("R", "C"), dtypes=(FP8,)),
                 Tensor("s", ("R", "(C + 127) // 128"), dtype="float32", strides=("ss0", "ss1")),
                 Tensor("out", ("R", "C"), dtype="bfloat16", role="output")),
        # column blocks first: +5-9% (docs/sweeps/raster.py)
        factory=fp8_dequant_kernel, variants=(Variant(dict(layout="group", raster="flat"), rule="C % 8 == 0"),),
        reference=_REF + "group_dequant_fp8"),
    OpSpec(
        name="tkreg.per_channel_dequant_fp8",
        doc="q[M, K] e4m3, s[ceil(M / 128), K] fp32 -> bf16 q * s (K % 8 == 0)",
        tensors=(Tensor("q", ("R", "C"), dtypes=(FP8,)),
                 Tensor("s", ("(R + 127) // 128", "C"), dtype="float32"),
                 Tensor("out", ("R", "C"), dtype="bfloat16", role="output")),
        # 4 vectors a lane in flight: +0.8-1.2 points of a same-size copy (docs/sweeps/dequant_cs.py);
        # column blocks first: +3-5% (docs/sweeps/raster.py)
        factory=fp8_dequant_kernel, variants=(Variant(dict(layout="channel", unroll=4, raster="flat"),
                                                      rule="C % 8 == 0"),),
        reference=_REF + "per_channel_dequant_fp8"),
)

