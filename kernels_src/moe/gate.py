"""Top-k gating: topk_gate and DeepSeek-V3's group_limited_topk_gate.

One warp a token, WARPS tokens a CTA.  Lane l holds experts l, l + 32, ... (max_experts / 32 a
lane: variants for E <= 128, <= 256 (group-limited) and <= 512).  k rounds of a lane-local argmax
and a 5-step (key, id, weight) butterfly pick the experts; lane j keeps slot j.
"""
from tkreg.reference.moe import SCORINGS
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .limits import MAX_EXPERTS, MAX_K, REFERENCE

WARPS = 4               # tokens a CTA
F32 = "float32"


def _neg(T):
    return T.infinity(F32) * T.float32(-1)


def _score(T, E, per_lane):
    """Macro: a token's scores (sc, by the scoring code) and selection keys (key = sc + bias)."""
    NEG = _neg(T)

    @T.macro
    def score(scores, bias, sc, key, valid: T.Ref, red: T.Ref, tot: T.Ref, t, lane, scoring):
        valid = T.uint32(0)
        for i in T.unroll(per_lane):
            e = i * 32 + lane
            if e < E:
                sc[i] = T.cast(scores[t, e], F32)
                valid = valid | (T.uint32(1) << T.uint32(i))
            else:
                sc[i] = NEG
        if scoring == 1:                      # softmax: max, exp, sum, divide
            red = NEG
            for i in T.unroll(per_lane):
                red = T.max(red, sc[i])
            for o in T.unroll(5):
                red = T.max(red, T.shfl_xor(red, 16 >> o))
            for i in T.unroll(per_lane):
                if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0):
                    sc[i] = T.exp(sc[i] - red)
                else:
                    sc[i] = T.float32(0)
            tot = T.float32(0)
            for i in T.unroll(per_lane):
                tot = tot + sc[i]
            for o in T.unroll(5):
                tot = tot + T.shfl_xor(tot, 16 >> o)
            for i in T.unroll(per_lane):
                sc[i] = T.ieee_fdiv(sc[i], tot)
        elif scoring == 2:                    # sigmoid
            for i in T.unroll(per_lane):
                sc[i] = T.ieee_fdiv(T.float32(1), T.float32(1) + T.exp(-sc[i]))
        elif scoring == 3:                    # sqrt(softplus), torch's threshold 20
            for i in T.unroll(per_lane):
                sc[i] = T.sqrt(T.if_then_else(sc[i] > T.float32(20), sc[i], T.log1p(T.exp(sc[i]))))
        for i in T.unroll(per_lane):
            e = i * 32 + lane
            if T.isnullptr(bias.data) or e >= E:
                key[i] = sc[i]
            else:
                key[i] = sc[i] + bias[e]

    return score


def _group_mask(T, E, per_lane):
    """Macro: keys of experts outside the topk_groups best groups (top-2 sums) -> -inf."""
    NEG = _neg(T)

    @T.macro
    def grouped_mask(key, valid, lane, n_groups, topk_groups):
        gs = E // n_groups
        grp = T.alloc_local((per_lane,), "int32")
        m1 = T.alloc_var(F32)
        m2 = T.alloc_var(F32)
        o1 = T.alloc_var(F32)
        o2 = T.alloc_var(F32)
        mys = T.alloc_var(F32)
        rank = T.alloc_var("int32")
        for i in T.unroll(per_lane):
            grp[i] = (i * 32 + lane) // gs
        mys = NEG
        for g in T.serial(n_groups):
            m1 = NEG
            m2 = NEG
            for i in T.unroll(per_lane):
                if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0) and grp[i] == g:
                    if key[i] > m1:
                        m2 = m1
                        m1 = key[i]
                    elif key[i] > m2:
                        m2 = key[i]
            for o in T.unroll(5):
                o1 = T.shfl_xor(m1, 16 >> o)
                o2 = T.shfl_xor(m2, 16 >> o)
                m2 = T.max(T.min(m1, o1), T.max(m2, o2))
                m1 = T.max(m1, o1)
            if lane == g:
                mys = m1 + m2
        rank = 0
        for g in T.serial(n_groups):
            o1 = T.shfl_sync(mys, g)
            if o1 > mys or (o1 == mys and g < lane):
                rank = rank + 1
        keep = T.cast(T.ballot_sync(lane < n_groups and rank < topk_groups), "uint32")
        for i in T.unroll(per_lane):
            if (keep >> T.cast(grp[i], "uint32")) & T.uint32(1) == T.uint32(0):
                key[i] = NEG

    return grouped_mask


def _top_k(T, per_lane):
    """Macro: k rounds of argmax over the warp's keys; lane j ends with slot j's id and weight."""
    NEG = _neg(T)

    @T.macro
    def top_k(key, sc, valid: T.Ref, bv: T.Ref, bi: T.Ref, bw: T.Ref, ov: T.Ref, oi: T.Ref, ow: T.Ref,
              myidx: T.Ref, myw: T.Ref, lane, k):
        myidx = -1
        myw = T.float32(0)
        for j in T.serial(k):
            bv = NEG
            bi = -1
            bw = T.float32(0)
            for i in T.unroll(per_lane):      # ascending ids: strict > keeps the lower
                if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0):
                    if bi < 0 or key[i] > bv:
                        bv = key[i]
                        bi = i * 32 + lane
                        bw = sc[i]
            for o in T.unroll(5):
                ov = T.shfl_xor(bv, 16 >> o)
                oi = T.shfl_xor(bi, 16 >> o)
                ow = T.shfl_xor(bw, 16 >> o)
                if oi >= 0 and (bi < 0 or ov > bv or (ov == bv and oi < bi)):
                    bv = ov
                    bi = oi
                    bw = ow
            if lane == j:
                myidx = bi
                myw = bw
            if bi >= 0 and bi % 32 == lane:
                valid = valid & ~(T.uint32(1) << T.cast(bi // 32, "uint32"))

    return top_k


def gate_kernel(dtype: str, grouped: int = 0, warps: int = WARPS, max_experts: int = MAX_EXPERTS):
    """scores[T, E] -> topk_idx, topk_weights [T, k (+ num_shared)]; semantics: kernels_src/moe/.
    max_experts: the largest E served (max_experts / 32 experts a lane; a smaller one unrolls less)."""
    import tilelang.language as T

    PER_LANE = max_experts // 32
    Tn, E = T.dynamic("T"), T.dynamic("E")
    KS = T.dynamic("n_out" if grouped else "k")   # output width: k, or k + shared experts
    score = _score(T, E, PER_LANE)
    grouped_mask = _group_mask(T, E, PER_LANE)
    top_k = _top_k(T, PER_LANE)

    @T.macro
    def body(scores, bias, mask, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, k,
             n_groups, topk_groups):
        with T.Kernel(T.ceildiv(Tn, warps), threads=warps * 32) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            t = bx * warps + tx // 32
            sc = T.alloc_local((PER_LANE,), F32)     # scores (unbiased)
            key = T.alloc_local((PER_LANE,), F32)    # selection keys
            valid = T.alloc_var("uint32")
            red = T.alloc_var(F32)
            bv = T.alloc_var(F32)
            bi = T.alloc_var("int32")
            bw = T.alloc_var(F32)
            ov = T.alloc_var(F32)
            oi = T.alloc_var("int32")
            ow = T.alloc_var(F32)
            myidx = T.alloc_var("int32")
            myw = T.alloc_var(F32)
            tot = T.alloc_var(F32)
            if t < Tn:                                # warp-uniform
                score(scores, bias, sc, key, valid, red, tot, t, lane, scoring)
                if grouped:
                    grouped_mask(key, valid, lane, n_groups, topk_groups)
                top_k(key, sc, valid, bv, bi, bw, ov, oi, ow, myidx, myw, lane, k)
                tot = T.float32(0)
                for j in T.serial(k):                 # slot order
                    tot = tot + T.shfl_sync(myw, j)
                if renormalize:
                    myw = T.ieee_fdiv(myw, T.max(tot, T.float32(1e-20)))
                myw = myw * routed_scaling_factor
                if grouped:
                    if lane >= k and lane < KS:
                        myidx = E + lane - k
                        myw = T.float32(1)
                    if not T.isnullptr(mask.data):
                        if not mask[t]:
                            myidx = -1
                            myw = T.float32(0)
                if lane < KS:
                    topk_idx[t, lane] = myidx
                    topk_weights[t, lane] = myw

    Sc = T.Tensor((Tn, E), dtype)
    B = T.Tensor((E,), F32)
    Idx, W = T.Tensor((Tn, KS), "int32"), T.Tensor((Tn, KS), F32)
    if grouped:
        @T.prim_func
        def group_limited_topk_gate(scores: Sc, bias: B, mask: T.Tensor((Tn,), "bool"), topk_idx: Idx,
                                    topk_weights: W, k: T.int32, n_groups: T.int32, topk_groups: T.int32,
                                    scoring: T.int32, renormalize: T.bool, routed_scaling_factor: T.float32):
            body(scores, bias, mask, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, k,
                 n_groups, topk_groups)
        return group_limited_topk_gate

    @T.prim_func
    def topk_gate(scores: Sc, bias: B, topk_idx: Idx, topk_weights: W, scoring: T.int32,
                  renormalize: T.bool, routed_scaling_factor: T.float32):
        body(scores, bias, None, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, KS, 1, 1)
    return topk_gate


# ---- specs ----------------------------------------------------------------------------------
GATE_DTYPES = ("float32", "bfloat16")
_GATE_RULE = f"E <= {MAX_EXPERTS} and k >= 1 and k <= {MAX_K} and k <= E"
_GROUPED_RULE = _GATE_RULE + (" and n_groups >= 1 and n_groups <= 32 and E % n_groups == 0 and E // n_groups >= 2"
                              " and topk_groups >= 1 and topk_groups <= n_groups and n_out >= k and n_out <= 32")


def _gate_scalars(default_scoring, default_renorm):
    return (Scalar("scoring", "int32", SCORINGS[default_scoring]), Scalar("renormalize", "bool", default_renorm),
            Scalar("routed_scaling_factor", "float32", 1.0))


def _gate_outputs(ks):
    return (Tensor("topk_idx", ("T", ks), dtype="int32", role="output"),
            Tensor("topk_weights", ("T", ks), dtype="float32", role="output"))


SPECS = (
    OpSpec(
        name="tkreg.topk_gate",
        doc="scores[T, E] (fp32/bf16, E <= 512) -> top-k expert ids [T, k] int32 (descending, ties to the "
            "lower id) and fp32 weights; scoring 0 none / 1 softmax / 2 sigmoid / 3 sqrtsoftplus, optional "
            "selection bias[E] fp32",
        tensors=(Tensor("scores", ("T", "E"), dtypes=GATE_DTYPES),
                 Tensor("bias", ("E",), dtype="float32", optional=True)) + _gate_outputs("k"),
        scalars=(Scalar("k", "int32"),) + _gate_scalars("softmax", False),
        factory=gate_kernel,
        # E <= 128 (Qwen, Mixtral, Llama 4) unrolls 4 experts a lane instead of 16: 2.2x at T = 16384
        variants=tuple(v for d in GATE_DTYPES for v in (
            Variant(dict(dtype=d, max_experts=128, warps=8), rule=_GATE_RULE + " and E <= 128", priority=1),
            Variant(dict(dtype=d), rule=_GATE_RULE))),
        reference=REFERENCE + "topk_gate"),
    OpSpec(
        name="tkreg.group_limited_topk_gate",
        doc="DeepSeek-V3 routing: top-k over the topk_groups groups (of E / n_groups experts) with the best "
            "top-2 biased sums; n_out - k shared experts appended (ids E.., weight 1); mask[T] False -> ids -1",
        tensors=(Tensor("scores", ("T", "E"), dtypes=GATE_DTYPES),
                 Tensor("bias", ("E",), dtype="float32", optional=True),
                 Tensor("mask", ("T",), dtype="bool", optional=True)) + _gate_outputs("n_out"),
        scalars=(Scalar("k", "int32"), Scalar("n_groups", "int32"), Scalar("topk_groups", "int32"),
                 Scalar("n_out", "int32")) + _gate_scalars("sigmoid", True),
        factory=gate_kernel,
        variants=tuple(v for d in GATE_DTYPES for v in (      # E <= 256 (DeepSeek-V3): 8 experts a lane
            Variant(dict(dtype=d, grouped=1, max_experts=256), rule=_GROUPED_RULE + " and E <= 256", priority=1),
            Variant(dict(dtype=d, grouped=1), rule=_GROUPED_RULE))),
        reference=REFERENCE + "group_limited_topk_gate"),
)
