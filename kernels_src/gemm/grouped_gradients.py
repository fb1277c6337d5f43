"""bf16/fp16 gradients of the MoE grouped GEMMs (tkreg.grouped_gemm / grouped_gemm_masked's backward).

The forward is y rows of expert e = x rows of e @ w[e]^T (kernels_src/gemm/grouped.py: layouts,
segments, the expert lookup).  Its gradients:

- tkreg.grouped_gemm_dgrad (contiguous): dx[M, K] rows of expert e = dy rows of e @ w[e][N, K],
  w read as stored ("NN", as the dense dgrad in kernels_src/gemm/gradients.py): the forward's
  pipelined tile (grouped.py's `pipelined_body`: grid, expert lookup, K loop) with its own store.
- tkreg.grouped_gemm_masked_dgrad: dx[E, Mmax, K], dx[e, :counts[e]] = dy[e, :counts[e]] @ w[e].
  Both dgrads write every row: rows outside every segment (contiguous: outside [offsets[0],
  offsets[E]); masked: rows >= counts[e]) get zeros, their gradient (the forward leaves those rows
  of y untouched, so whatever dy holds there must not reach dx).  A tile with no segment row runs
  no N loop and stores its cleared accumulator; a segment's last, partial tile stores element by
  element, zero past the segment.
- tkreg.grouped_gemm_wgrad (k-grouped, DeepGEMM's "k_grouped ... tn"): dw[E, N, K],
  dw[e] = dy[lo:hi]^T @ x[lo:hi] with lo, hi = offsets[e], offsets[e + 1] (any offsets: the wgrad
  needs no alignment), reducing over the expert's tokens in fp32, rounded once.  An empty
  expert's dw[e] is written, as zeros.  tkreg.grouped_gemm_wgrad_accumulate adds the product into
  an fp32 main_grad[E, N, K] instead (Megatron's main grad per expert); tkreg.grouped_gemm_masked_wgrad
  reduces dy[e, :counts[e]]^T @ x[e, :counts[e]].  Grid: K tiles x N tiles x E (each expert's
  tiles run together, sharing its segment in L2); the pipelined loop covers the segment's whole
  64-row blocks, and a ragged tail (only where a segment ends off a 64-row boundary: the last
  contiguous segment, or a count) is loaded element by element with rows >= hi zeroed in BOTH
  operands (rows past a segment may hold anything, NaN included, and NaN * 0 is NaN).

One tile each, tilelang's pipelined tile as the dense gradients (T.Pipelined over TMA loads,
warp-specialized by tilelang, WGMMA, 16-bit operands MN-major where the layout puts them so):
128 x 256 x 64, 4 stages, two consumer warpgroups.  TMA rows are 16 bytes: N % 8 == 0 and
K % 8 == 0.  Operands are read by TMA (3-D boxes for w[e], dw[e] and the masked layout) and the
element-wise paths (partial tiles, tails, the main-grad epilogue) index with int64, so every tensor
may exceed 2^31 elements (index64).
sm_90a only: elsewhere NoKernelError, and the forward's autograd
(tkreg.ops.grouped_gradients.GroupedGemmGrad) runs per-expert torch.matmul.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .grouped import LOG_E, pipelined_body

TILE = dict(block_M=128, block_N=256, block_K=64, stages=4, threads=256)


def dgrad_body(T, contiguous: bool, M, N, K, E, block_M: int, block_N: int, block_K: int, stages: int,
               threads: int, dtype: str):
    """body(dy, w, groups, out): out rows of expert e = dy rows @ w[e] (reducing over N: the
    forward's pipelined tile with w[e] read as stored), zeros on rows outside every segment."""

    @T.macro
    def store(acc, c_s, out, e: T.Ref, m0, n0, hi: T.Ref, valid: T.Ref, bz):
        if T.Or(valid == 0, m0 + block_M <= hi):
            # a whole segment tile, or no segment row (acc still cleared): TMA, clipped at the edges
            T.copy(acc, c_s)
            if contiguous:
                T.copy(c_s, out[m0, n0])
            else:
                T.copy(c_s, out[bz, m0, n0])
        else:
            for i, j in T.Parallel(block_M, block_N):
                if m0 + i < M and n0 + j < K:
                    v = T.if_then_else(m0 + i < hi, T.cast(acc[i, j], dtype), T.cast(0, dtype))
                    if contiguous:
                        out[m0 + i, n0 + j] = v
                    else:
                        out[bz, m0 + i, n0 + j] = v

    return pipelined_body(T, contiguous, M, E, K, N, False, store, block_M, block_N, block_K, stages, threads,
                          dtype, store_empty=True)


def wgrad_body(T, contiguous: bool, M, N, K, E, block_M: int, block_N: int, block_K: int, stages: int,
               threads: int, dtype: str, accumulate: bool):
    """body(dy, x, groups, out): out[e] (N x K) = dy[lo:hi]^T @ x[lo:hi] over expert e's rows;
    accumulate: out is the fp32 main grad, out[e] += the product."""

    @T.macro
    def body(dy, x, groups, out):
        with T.Kernel(T.ceildiv(K, block_N), T.ceildiv(N, block_M), E, threads=threads) as (bx, by, bz):
            a_s = T.alloc_shared((block_K, block_M), dtype)
            b_s = T.alloc_shared((block_K, block_N), dtype)
            ta_s = T.alloc_shared((block_K, block_M), dtype)
            tb_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            lo = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            T.use_swizzle(panel_size=10)
            r0, c0 = by * block_M, bx * block_N
            if contiguous:
                lo = T.min(T.max(groups[bz], 0), M)
                hi = T.min(T.max(groups[bz + 1], lo), M)
            else:
                lo = 0
                hi = T.min(T.max(groups[bz], 0), M)
            T.clear(acc)
            for k in T.Pipelined((hi - lo) // block_K, num_stages=stages):
                if contiguous:
                    T.copy(dy[lo + k * block_K, r0], a_s)
                    T.copy(x[lo + k * block_K, c0], b_s)
                else:
                    T.copy(dy[bz, k * block_K, r0], a_s)
                    T.copy(x[bz, k * block_K, c0], b_s)
                T.gemm(a_s, b_s, acc, transpose_A=True)
            if (hi - lo) % block_K > 0:
                t0 = hi - (hi - lo) % block_K
                for i, j in T.Parallel(block_K, block_M):
                    ok = T.And(t0 + i < hi, r0 + j < N)
                    if contiguous:
                        ta_s[i, j] = T.if_then_else(ok, dy[t0 + i, r0 + j], T.cast(0, dtype))
                    else:
                        ta_s[i, j] = T.if_then_else(ok, dy[bz, t0 + i, r0 + j], T.cast(0, dtype))
                for i, j in T.Parallel(block_K, block_N):
                    ok = T.And(t0 + i < hi, c0 + j < K)
                    if contiguous:
                        tb_s[i, j] = T.if_then_else(ok, x[t0 + i, c0 + j], T.cast(0, dtype))
                    else:
                        tb_s[i, j] = T.if_then_else(ok, x[bz, t0 + i, c0 + j], T.cast(0, dtype))
                T.gemm(ta_s, tb_s, acc, transpose_A=True)
            if accumulate:
                for i, j in T.Parallel(block_M, block_N):
                    if r0 + i < N and c0 + j < K:
                        out[bz, r0 + i, c0 + j] = out[bz, r0 + i, c0 + j] + acc[i, j]
            else:
                c_s = T.alloc_shared((block_M, block_N), dtype)
                T.copy(acc, c_s)
                T.copy(c_s, out[bz, r0, c0])   # TMA store, clipped at the edges

    return body


def grad_kernel(arch: str, shape_class: str, layout: str, grad: str, dtype: str, accumulate: bool = False,
                **params):
    """layout "contiguous" / "masked", grad "dgrad" / "wgrad"; `shape_class` only names the variant."""
    assert arch == "sm_90a", arch
    import tilelang.language as T

    contiguous = layout == "contiguous"
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    # the contiguous wgrad has no input with an E dim: the offsets' length G = E + 1 binds it
    offsets_only = contiguous and grad == "wgrad" and not accumulate
    E = T.dynamic("G") - 1 if offsets_only else T.dynamic("E")
    rows = (M,) if contiguous else (E, M)
    G = T.Tensor((E + 1,) if contiguous else (E,), "int32")
    DY = T.Tensor(rows + (N,), dtype)
    if grad == "dgrad":
        body = dgrad_body(T, contiguous, M, N, K, E, dtype=dtype, **params)
        W, DX = T.Tensor((E, N, K), dtype), T.Tensor(rows + (K,), dtype)
        if contiguous:
            @T.prim_func
            def grouped_gemm_dgrad(dy: DY, w: W, group_offsets: G, out: DX):
                body(dy, w, group_offsets, out)
            return grouped_gemm_dgrad

        @T.prim_func
        def grouped_gemm_masked_dgrad(dy: DY, w: W, counts: G, out: DX):
            body(dy, w, counts, out)
        return grouped_gemm_masked_dgrad

    body = wgrad_body(T, contiguous, M, N, K, E, dtype=dtype, accumulate=accumulate, **params)
    X = T.Tensor(rows + (K,), dtype)
    if accumulate:
        assert contiguous

        @T.prim_func
        def grouped_gemm_wgrad_accumulate(dy: DY, x: X, group_offsets: G, main_grad: T.Tensor((E, N, K), "float32")):
            body(dy, x, group_offsets, main_grad)
        return grouped_gemm_wgrad_accumulate
    DW = T.Tensor((E, N, K), dtype)
    if contiguous:
        @T.prim_func
        def grouped_gemm_wgrad(dy: DY, x: X, group_offsets: G, out: DW):
            body(dy, x, group_offsets, out)
        return grouped_gemm_wgrad

    @T.prim_func
    def grouped_gemm_masked_wgrad(dy: DY, x: X, counts: G, out: DW):
        body(dy, x, counts, out)
    return grouped_gemm_masked_wgrad


def _variants(layout: str, grad: str, rule: str, accumulate: bool = False) -> tuple:
    return tuple(Variant(dict(TILE, layout=layout, grad=grad, dtype=dtype, shape_class="large",
                              accumulate=accumulate), rule=rule, archs=("sm_90a",))
                 for dtype in DTYPES)


def _spec(name: str, layout: str, grad: str, doc: str, accumulate: bool = False) -> OpSpec:
    contiguous = layout == "contiguous"
    rows = ("M",) if contiguous else ("E", "M")
    offsets_only = contiguous and grad == "wgrad" and not accumulate   # G = E + 1 offsets bind E
    experts = "G - 1" if offsets_only else "E"
    groups = (Tensor("group_offsets", ("G",) if offsets_only else ("E + 1",), dtype="int32") if contiguous
              else Tensor("counts", ("E",), dtype="int32"))
    dy = Tensor("dy", rows + ("N",), dtypes=DTYPES)
    if grad == "dgrad":
        tensors = (dy, Tensor("w", ("E", "N", "K"), dtype_of="dy"), groups,
                   Tensor("out", rows + ("K",), dtype_of="dy", role="output"))
        rule = f"E <= {2**LOG_E - 1}"   # the expert lookup's depth
    else:
        out = (Tensor("main_grad", ("E", "N", "K"), dtype="float32", role="inplace") if accumulate
               else Tensor("out", (experts, "N", "K"), dtype_of="dy", role="output"))
        tensors = (dy, Tensor("x", rows + ("K",), dtype_of="dy"), groups, out)
        rule = "G >= 1" if offsets_only else "E >= 1"
    return OpSpec(name=f"tkreg.{name}", doc=doc, tensors=tensors, factory=grad_kernel,
                  variants=_variants(layout, grad, rule, accumulate), archs=("sm_90a",),
                  reference=f"tkreg.reference.grouped_gradients:{name}", index64=True)


SPECS = (
    _spec("grouped_gemm_dgrad", "contiguous", "dgrad",
          "contiguous MoE dgrad: out[M, K] rows offsets[e]:offsets[e+1] = dy rows @ w[e][N, K] (w as stored), "
          "rows outside every segment zero; segments start at multiples of 128; N, K % 8 == 0"),
    _spec("grouped_gemm_masked_dgrad", "masked", "dgrad",
          "masked MoE dgrad: out[e, :counts[e]] = dy[e, :counts[e]] @ w[e][N, K], rows >= counts[e] zero; "
          "N, K % 8 == 0"),
    _spec("grouped_gemm_wgrad", "contiguous", "wgrad",
          "k-grouped MoE wgrad: out[e] = dy[offsets[e]:offsets[e+1]]^T @ x[offsets[e]:offsets[e+1]] (fp32 "
          "accumulation rounded once; empty experts zero); N, K % 8 == 0"),
    _spec("grouped_gemm_wgrad_accumulate", "contiguous", "wgrad",
          "main_grad[e] += dy[offsets[e]:offsets[e+1]]^T @ x[offsets[e]:offsets[e+1]] in fp32 (in place: an "
          "fp32 main grad per expert); N, K % 8 == 0", accumulate=True),
    _spec("grouped_gemm_masked_wgrad", "masked", "wgrad",
          "masked MoE wgrad: out[e] = dy[e, :counts[e]]^T @ x[e, :counts[e]] (fp32 accumulation rounded once; "
          "counts 0 give zeros); N, K % 8 == 0"),
)
