"""Flash attention forward (prefill; semantics in the package docstring): the ops' specs, which
kernel serves which shape, and the tiled kernel (mma.sync through tilelang's `T.gemm`).

Kernels (each: HQ % HK == 0, head dim 64 or 128, bf16 / fp16, fixed lengths and varlen):
- sm_90a: warp_specialized.py, FlashAttention-3's schedule written by hand, persistent; at d64 also
  its three-consumer form (192-row tiles) where `THREE_CONSUMERS` says.
- sm_100a: tcgen05.py, FlashAttention-4's schedule on tcgen05 and tensor memory (compiled, never
  run), and `tiled_kernel` below at a lower priority: the fallback that
  `TKREG_SKIP_VARIANTS="kernel=tcgen05"` selects.  Each of its CTAs owns block_M query rows of one
  head and walks the KV sequence in block_N tiles with tilelang's automatic pipelining
  (`num_stages`), as in tilelang's `example_gqa_fwd_bshd`; masks are applied only to the tiles that
  need one (the sequence tail, the causal diagonal band).
Varlen (tiled and tcgen05): the grid is (ceil(max_seqlen_q / block_M), HQ, batch) and CTAs past
their sequence's end exit at once; tiles that straddle a sequence boundary read the neighbour's
rows (masked); outputs are stored row by row, never past the sequence.
Measured figures per kernel: docs/attention-tuning.md.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from ..common import DTYPES
from .tcgen05 import tcgen05_kernel
from .tiles import (FAST_EXP, WARP_SPECIALIZED_PASS_CONFIGS, grid_prim_func, kv_tile, log2_scale, lse_writer,
                    output_writer, q_tile, saw_a_key, softmax_update, tile_masker, tiles_seen)
from .warp_specialized import warp_specialized_kernel


def tiled_kernel(dim: int, varlen: bool, block_M: int, block_N: int, stages: int, threads: int,
                 dtype: str = "bfloat16"):
    import tilelang.language as T

    f32 = "float32"
    HQ, HK, D = T.dynamic("HQ"), T.dynamic("HK"), dim
    mask_tile = tile_masker(T, block_M, block_N)
    write_lse = lse_writer(T, varlen, block_M)
    update = softmax_update(T, block_M, block_N)
    store = output_writer(T, varlen, block_M, D)

    @T.macro
    def body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0):
        # q0 / k0: first row of this sequence in a packed tensor (varlen), else 0.
        q_s = T.alloc_shared((block_M, D), dtype)
        k_s = T.alloc_shared((block_N, D), dtype)
        v_s = T.alloc_shared((block_N, D), dtype)
        o_s = T.alloc_shared((block_M, D), dtype)
        acc_s = T.alloc_fragment((block_M, block_N), f32)
        acc_p = T.alloc_fragment((block_M, block_N), dtype)
        acc_o = T.alloc_fragment((block_M, D), f32)
        m = T.alloc_fragment((block_M,), f32)
        m_prev = T.alloc_fragment((block_M,), f32)
        rescale = T.alloc_fragment((block_M,), f32)
        row_sum = T.alloc_fragment((block_M,), f32)
        l = T.alloc_fragment((block_M,), f32)
        hk = h // (HQ // HK)
        r0 = bx * block_M
        off = Sk - Sq                                   # bottom-right causal alignment
        scale = log2_scale(T, softmax_scale, D)

        T.copy(q_tile(q, varlen, block_M, b, h, q0, r0), q_s)
        T.fill(acc_o, 0)
        T.fill(l, 0)
        T.fill(m, -T.infinity(f32))
        n_tiles = tiles_seen(T, block_N, causal, r0, block_M, Sq, Sk)

        for t in T.Pipelined(n_tiles, num_stages=stages):
            T.copy(kv_tile(k, varlen, block_N, b, k0, t, hk), k_s)
            T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
            mask_tile(acc_s, t, r0, off, Sk, causal)
            T.copy(m, m_prev)
            T.fill(m, -T.infinity(f32))
            T.reduce_max(acc_s, m, dim=1, clear=False)
            for i in T.Parallel(block_M):
                m[i] = T.max(m[i], m_prev[i])
            update(acc_s, m, m_prev, rescale, row_sum, l, scale)
            T.copy(acc_s, acc_p)
            for i, j in T.Parallel(block_M, D):
                acc_o[i, j] *= rescale[i]
            T.copy(kv_tile(v, varlen, block_N, b, k0, t, hk), v_s)
            T.gemm(acc_p, v_s, acc_o, policy=T.GemmWarpPolicy.FullRow)

        # A row that sees no key gets 0 and lse -inf.
        for i, j in T.Parallel(block_M, D):
            acc_o[i, j] = T.if_then_else(saw_a_key(T, l[i], causal, r0 + i, off), acc_o[i, j] / l[i], 0)
        write_lse(lse, l, m, scale, causal, b, h, q0, r0, off, Sq)
        T.copy(acc_o, o_s)
        store(out, o_s, b, h, q0, r0, Sq)

    return grid_prim_func(T, body, varlen, HQ, HK, D, dtype, block_M, threads)


def attention_factory(kernel: str, arch: str = "", **params):
    """kernel "warp_specialized" (sm_90a), "tcgen05" (sm_100a) or "tiled" (sm_100a's fallback); the
    variant's `archs` pick the kernel, so `arch` is not needed here."""
    if kernel == "tcgen05":
        return tcgen05_kernel(**params)
    return warp_specialized_kernel(**params) if kernel == "warp_specialized" else tiled_kernel(**params)


# head dim -> the tiled kernel's tile (measured on the H200 before the warp-specialized kernel):
# 128-row query tiles, two consumer warpgroups, 128-key tiles, d64 3 stages.
TILED = {
    128: dict(block_M=128, block_N=128, stages=2, threads=256),
    64: dict(block_M=128, block_N=128, stages=3, threads=256),
}
# FlashAttention-4's lazy rescale on sm_90a: +1-3% at d64, slower at d128, so d64 only
LAZY_RESCALE = {64: dict(lazy_rescale=8)}
# d64 on FlashAttention-3's 192-row tile (three consumers at 160 registers, no lazy rescale: it
# costs registers there): two consumers' matmuls run under each one's softmax, +8-9%; causal at 4k
# keys it loses (every consumer walks its block's last row's tile count), hence the rule
THREE_CONSUMERS = {64: "not causal or Sk >= 16384"}


def _variants(varlen: bool) -> tuple:
    """Per (head dim, dtype): the warp-specialized kernel on sm_90a (fixed-length d64 also on three
    consumers); on sm_100a the tcgen05 kernel, and the tiled one (mma.sync) as its fallback (both
    compiled, never run, not tuned)."""
    rule = "HQ % HK == 0"
    hopper = lambda d, dtype: dict(kernel="warp_specialized", dim=d, varlen=varlen, dtype=dtype,
                                   **LAZY_RESCALE.get(d, {}))
    three = tuple(Variant(dict(hopper(d, dtype), consumers=3, lazy_rescale=0), priority=1,
                          rule=f"{rule} and ({THREE_CONSUMERS[d]})", archs=("sm_90a",),
                          pass_configs=WARP_SPECIALIZED_PASS_CONFIGS)
                  for d in THREE_CONSUMERS for dtype in DTYPES) if not varlen else ()
    return three + tuple(v for d in (128, 64) for dtype in DTYPES for v in (
        Variant(hopper(d, dtype), rule=rule, archs=("sm_90a",), pass_configs=WARP_SPECIALIZED_PASS_CONFIGS),
        Variant(dict(TILED[d], kernel="tiled", dim=d, varlen=varlen, dtype=dtype), rule=rule,
                archs=("sm_100a",), pass_configs=FAST_EXP),
        Variant(dict(kernel="tcgen05", dim=d, varlen=varlen, dtype=dtype), rule=rule, priority=1,
                archs=("sm_100a",), pass_configs=WARP_SPECIALIZED_PASS_CONFIGS)))


_SCALE = Scalar("softmax_scale", "float32", 0.0)
_CAUSAL = Scalar("causal", "bool", False)
_REF = "tkreg.reference.attention:"

SPECS = (
    OpSpec(
        name="tkreg.flash_attention",
        doc="q[B, Sq, HQ, D], k/v[B, Sk, HK, D] (HQ % HK == 0, D 64 or 128) -> out[B, Sq, HQ, D], "
            "lse[B, HQ, Sq] fp32; causal bottom-right aligned; softmax_scale 0 = 1/sqrt(D)",
        tensors=(Tensor("q", ("B", "Sq", "HQ", "D"), dtypes=DTYPES, strides=("sqb", "sqs", "sqh", 1)),
                 Tensor("k", ("B", "Sk", "HK", "D"), dtype_of="q", strides=("skb", "sks", "skh", 1)),
                 Tensor("v", ("B", "Sk", "HK", "D"), dtype_of="q", strides=("svb", "svs", "svh", 1)),
                 Tensor("out", ("B", "Sq", "HQ", "D"), dtype_of="q", role="output"),
                 Tensor("lse", ("B", "HQ", "Sq"), dtype="float32", role="output")),
        scalars=(_CAUSAL, _SCALE), factory=attention_factory,
        variants=_variants(False), reference=_REF + "flash_attention",
        backward="tkreg.ops.attention:FlashAttentionGrad"),
    OpSpec(
        name="tkreg.flash_attention_varlen",
        doc="packed q[TQ, HQ, D], k/v[TK, HK, D], cu_seqlens_q/k[batch + 1] int32 -> out[TQ, HQ, D], "
            "lse[HQ, TQ] fp32 (FlashAttention's varlen convention)",
        tensors=(Tensor("q", ("TQ", "HQ", "D"), dtypes=DTYPES, strides=("sqs", "sqh", 1)),
                 Tensor("k", ("TK", "HK", "D"), dtype_of="q", strides=("sks", "skh", 1)),
                 Tensor("v", ("TK", "HK", "D"), dtype_of="q", strides=("svs", "svh", 1)),
                 Tensor("cu_seqlens_q", ("NB",), dtype="int32"),
                 Tensor("cu_seqlens_k", ("NB",), dtype="int32"),
                 Tensor("out", ("TQ", "HQ", "D"), dtype_of="q", role="output"),
                 Tensor("lse", ("HQ", "TQ"), dtype="float32", role="output")),
        scalars=(Scalar("max_seqlen_q", "int32"), Scalar("max_seqlen_k", "int32"), _CAUSAL, _SCALE),
        factory=attention_factory, variants=_variants(True), reference=_REF + "flash_attention_varlen",
        backward="tkreg.ops.attention:FlashAttentionVarlenGrad"),
)
