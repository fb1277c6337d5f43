"""Flash attention forward (prefill): softmax(q k^T * scale) v per head, online softmax in fp32.

    out[b, i, h, :] = sum_j p[i, j] v[b, j, h // G, :],  p = softmax_j(q[b, i, h] . k[b, j, h // G] * scale)
    lse[b, h, i]    = log(sum_j exp(q . k * scale))      (natural log; -inf for a row that sees no key)

GQA/MQA: G = HQ // HK query heads share a KV head.  Causal masks are bottom-right aligned (query i
sees keys j <= i + Sk - Sq, FlashAttention's convention), so a row may see no key at all: its
output is 0 and its lse -inf.  softmax_scale = 0 means 1 / sqrt(D).

Three kernels.  On sm_90a, kernels_src/attention_ws.py: FlashAttention-3's schedule written by hand
(a TMA producer warpgroup, two consumer warpgroups taking turns on the tensor cores, the softmax
of one K/V tile under the P V of the previous), persistent; its three-consumer form (192-row d64
tiles, +8-9% in a sweep) runs where `WIDE` says (d64 non-causal, causal from 16k keys).  On sm_100a
(no WGMMA), kernels_src/attention_sm100.py: FlashAttention-4's schedule on tcgen05 and tensor
memory (compiled, never run), with `attention_kernel` below beside it at a lower priority, the
fallback `TKREG_SKIP_VARIANTS="kernel=tcgen05"` selects: each CTA owns block_M query rows of
one head and walks the KV sequence in block_N tiles with tilelang's automatic pipelining
(`num_stages`), as in its `example_gqa_fwd_bshd`; its `T.gemm` lowers to mma.sync there.  Masks are applied only to the tiles that need one
(the sequence tail, the causal diagonal band).  Measured on the H200 (docs/attention-tuning.md): the
sm_90a kernel 0.96-1.04x cuDNN SDPA at d128, 0.84-0.93x at d64.  q/k/v are read through their
strides: slices of a fused qkv projection need no copy (the head dim must be contiguous; TMA needs
16-byte aligned strides).

Varlen packs sequences as [total, H, D] with int32 cu_seqlens (FlashAttention's convention).  On
sm_90a the persistent kernel walks (row-block pair, head) items of all sequences (attention_ws.py:
`locate_varlen`); the tiled kernel's grid is (ceil(max_seqlen_q / block_M), HQ, batch) and CTAs
past their sequence's end exit at once.  Tiles that straddle a sequence boundary read the
neighbour's rows (masked); outputs are stored row by row, never past the sequence.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .attention_sm100 import PASS_CONFIGS as SM100_PASS_CONFIGS, tcgen05_attention_kernel
from .attention_tiles import (MASKED, grid_prim_func, kv_tile, log2_scale, lse_writer, q_tile, saw_a_key, tile_masker,
                              tiles_seen)
from .attention_ws import PASS_CONFIGS as WS_PASS_CONFIGS, attention_ws_kernel

DTYPES = ("bfloat16", "float16")


def attention_kernel(dim: int, varlen: bool, block_M: int, block_N: int, stages: int,
                     threads: int, dtype: str = "bfloat16", mask: str = "boundary"):
    import tilelang.language as T

    f32 = "float32"
    HQ, HK, D = T.dynamic("HQ"), T.dynamic("HK"), dim
    mask_tile = tile_masker(T, block_M, block_N)
    write_lse = lse_writer(T, varlen, block_M)

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
            if mask == "pre":   # (round 2's baseline) every tile starts at 0 or MASKED (causal: valid rows mask j >= Sk anyway)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(t * block_N + j >= Sk or (causal and r0 + i + off < t * block_N + j),
                                                 MASKED, 0)
                T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            else:               # only the tiles that need it: the sequence tail, the causal diagonal band
                T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
                mask_tile(acc_s, t, r0, off, Sk, causal)
            T.copy(m, m_prev)
            T.fill(m, -T.infinity(f32))
            T.reduce_max(acc_s, m, dim=1, clear=False)
            for i in T.Parallel(block_M):
                m[i] = T.max(m[i], m_prev[i])
            for i in T.Parallel(block_M):
                rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
            T.reduce_sum(acc_s, row_sum, dim=1)
            for i in T.Parallel(block_M):
                l[i] = l[i] * rescale[i] + row_sum[i]
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
        if varlen:
            for i, j in T.Parallel(block_M, D):
                if r0 + i < Sq:
                    out[q0 + r0 + i, h, j] = o_s[i, j]
        else:
            T.copy(o_s, out[b, r0:r0 + block_M, h, :])   # TMA store, clipped at Sq

    return grid_prim_func(T, body, varlen, HQ, HK, D, dtype, block_M, threads)


# head dim -> tile config of the tiled kernel (sm_100a; measured on the H200 before the WS kernel:
# docs/attention-tuning.md): 128-row query tiles, two consumer warpgroups, 128-key tiles, d64 3 stages.
CONFIGS = {
    128: dict(block_M=128, block_N=128, stages=2, threads=256),
    64: dict(block_M=128, block_N=128, stages=3, threads=256),
}
# exp2 -> ex2.approx (the build passes nvcc --use_fast_math for it): 2 ulp, far inside the accuracy bar
FAST_EXP = {"tl.enable_fast_math": True}


def attention_factory(kernel: str, arch: str = "", **params):
    """kernel "ws": kernels_src/attention_ws.py (sm_90a); "tcgen05": kernels_src/attention_sm100.py
    (sm_100a); "tiled": `attention_kernel` (the variant's `archs` pick the kernel, so `arch` is not
    needed here)."""
    if kernel == "tcgen05":
        return tcgen05_attention_kernel(**params)
    return attention_ws_kernel(**params) if kernel == "ws" else attention_kernel(**params)


# FlashAttention-4's lazy rescale (attention_ws.py): +1-3% at d64, -3-13% at d128 (round 8)
LAZY = {64: dict(lazy=8)}
# d64 on FlashAttention-3's 192-row tile (three consumers at 160 registers, no lazy rescale: it
# costs registers there): two consumers' matmuls run under each one's softmax, +8-9% in the
# round-10 sweep, where d64 non-causal, and causal from 16k keys, took it (causal at 4k keys lost
# 15-21%: every consumer walks the block's last row's tile count).  Shipped in the 27th session
# after the GPU gate on the H200; the bench then: +6% (4k keys), +9-13% (16k keys) on those rows.
WIDE = {64: "not causal or Sk >= 16384"}


def _variants(varlen: bool) -> tuple:
    """Per (head dim, dtype): the persistent WS kernel on sm_90a; on sm_100a the tcgen05 kernel,
    and the tiled one (mma.sync) as its fallback (both compiled, never run, not tuned)."""
    rule = "HQ % HK == 0"
    ws = lambda d, dtype: dict(kernel="ws", dim=d, varlen=varlen, dtype=dtype, persistent=True, tree=8, **LAZY.get(d, {}))
    wide = tuple(Variant(dict(ws(d, dtype), consumers=3, lazy=0), rule=f"{rule} and ({WIDE[d]})", priority=1,
                         archs=("sm_90a",), pass_configs=WS_PASS_CONFIGS)
                 for d in WIDE for dtype in DTYPES) if not varlen else ()
    return wide + tuple(v for d in (128, 64) for dtype in DTYPES for v in (
        Variant(ws(d, dtype), rule=rule, archs=("sm_90a",), pass_configs=WS_PASS_CONFIGS),
        Variant(dict(CONFIGS[d], kernel="tiled", dim=d, varlen=varlen, dtype=dtype, mask="boundary"), rule=rule,
                archs=("sm_100a",), pass_configs=FAST_EXP),
        Variant(dict(kernel="tcgen05", dim=d, varlen=varlen, dtype=dtype), rule=rule, priority=1,
                archs=("sm_100a",), pass_configs=SM100_PASS_CONFIGS)))


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
        variants=_variants(False), reference=_REF + "flash_attention"),
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
        factory=attention_factory, variants=_variants(True), reference=_REF + "flash_attention_varlen"),
)
