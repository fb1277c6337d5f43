"""Dispatch follows the specs, for every op: the variant `tkreg.explain` picks (the launcher's C
evaluator) is the one the manifest's rules, baked-in sizes, dtypes and priorities pick when read
here in Python (`tkreg.expr.evaluate` over the sizes the call binds).  Cases are shapes only, no
variant keys: a retune that moves a boundary or renames a key changes no line here.  A last test
checks the cases reach every shipped variant, so a new variant needs a case that runs it.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import expr
from tkreg.runtime import RUNTIME
from tkreg.torch_library import size_env

SM = {"sm_90a": 132, "sm_100a": 148}   # an H100 / H200, a B200
ARCHS = tuple(SM)


def case(op, dtype="bfloat16", arch=None, absent=(), layouts=None, **sizes_and_scalars):
    """One call of `op`: input tensors sized from the spec's dims (CPU, torch.empty), scalars by name,
    optional inputs in `absent` left out, `layouts={tensor: "t"}` for a column-major view."""
    return pytest.param(op, dtype, absent, layouts or {}, sizes_and_scalars, arch,
                        id=f"{op}-{dtype}-" + "-".join(f"{k}{v}" for k, v in sizes_and_scalars.items())
                        + (f"-no_{'_'.join(absent)}" if absent else "") + (f"-{arch}" if arch else ""))


def _build(spec, dtype, absent, layouts, values):
    """(args by tensor name, scalars): every present input tensor, floats of the op's dtype."""
    roots, by = spec.dtype_roots(), {t.name: t for t in spec.tensors}
    env = dict(values)
    args = {}
    for t in spec.tensors:
        if not t.is_input or t.name in absent:
            continue
        root = by[roots[t.name]]
        dt = root.dtype or (dtype if dtype in root.dtypes else root.dtypes[0])
        shape = [int(expr.evaluate(p, env)) for p in t.dims()]
        if layouts.get(t.name) == "t":
            args[t.name] = torch.empty(shape[::-1], dtype=getattr(torch, dt)).t()
        else:
            args[t.name] = torch.empty(shape, dtype=getattr(torch, dt))
    scalars = {s.name: values[s.name] for s in spec.scalars if s.name in values}
    return args, scalars


def accepted(entry, arch, args, scalars, sm_count) -> list:
    """The candidates (priority order) whose kernels take the call's dtypes and whose every
    constraint holds over the sizes the call binds; the spec's pick is the first."""
    spec = entry.spec
    env = {"SM_COUNT": sm_count, **size_env(spec, args)}
    for s in spec.scalars:
        v = scalars.get(s.name, s.default)
        if s.integral and v is not None:
            env[s.name] = int(v)
    for t in spec.tensors:
        if not t.is_input:
            continue
        a = args.get(t.name)
        if t.optional:
            env[f"has_{t.name}"] = int(a is not None)
        if a is None:
            continue
        for d, st in zip(t.strides or (), a.stride()):
            if isinstance(d, str) and expr.is_symbol(expr.parse(d)):
                env[d] = st
    dts = {n: str(a.dtype).removeprefix("torch.") for n, a in args.items()}
    return [c for c in entry.candidates(arch)
            if all(dts.get(n, want) == want for n, want in c.record.plan.dtypes)
            and all(expr.evaluate(list(k.prog), env) for k in c.record.plan.constraints)]


BF, FP, F8 = "bfloat16", "float16", "float8_e4m3fn"
CASES = [
    # norm: the hidden sizes, head-dim rows, the resident ranges, the two-pass kernel, no kernel (N % 8)
    *[case(op, dt, M=3, N=n) for op in ("rms_norm", "fused_add_rms_norm") for dt in (BF, FP)
      for n in (8, 64, 96, 128, 256, 1000, 1024, 2048, 2880, 3584, 4096, 5120, 6144, 7168, 8192, 16384, 16392, 1004)],
    *[case("rms_norm_heads", dt, T=37, H=h, N=n) for dt in (BF, FP) for h in (1, 8) for n in (8, 64, 96, 128, 200, 256, 512, 100)],
    *[case("rms_norm_backward", dt, M=37, N=n) for dt in (BF, FP) for n in (8, 1024, 2048, 2880, 4096, 5120, 7168, 8192, 16392)],
    # activation: vector width by N % 16, big and mid calls of silu_and_mul
    *[case(op, dt, T=t, N=n) for op in ("silu_and_mul", "swiglu", "silu_and_mul_backward") for dt in (BF, FP)
      for t, n in ((3, 4096), (3, 4098), (2048, 8192), (16384, 14336), (4096, 4096))],
    *[case("rotary_embedding", dt, T=7, NQ=32 * d, NK=8 * d, P=4096, D=d) for dt in (BF, FP) for d in (64, 128, 96)],
    *[case("qk_norm_rope_cache", dt, absent=ab, T=7, HQ=32, HK=8, D=d, P=4096, NP=4, PS=16) for dt in (BF, FP)
      for d in (64, 128, 96) for ab in ((), ("q_weight", "k_weight"), ("k_cache", "v_cache", "slot_mapping"),
                                        ("k_weight",), ("slot_mapping",))],
    # gemm: the shape classes on each arch, with and without bias
    *[case("gemm", dt, arch=arch, absent=ab, M=m, N=n, K=k) for arch in ARCHS for dt in (BF, FP) for ab in ((), ("bias",))
      for m, n, k in ((1, 1000, 256), (32, 4096, 256), (8, 16384, 256), (64, 8192, 256), (128, 8192, 256),
                      (256, 8192, 256), (256, 7168, 256), (1024, 4096, 256), (2048, 7168, 256), (16384, 7168, 256),
                      (100000, 8, 256), (1, 4096, 14336), (64, 2048, 8192), (1, 7168, 2048), (16, 8192, 8192),
                      (1, 4096, 1024), (1, 28672, 4096), (4096, 4096, 4096))],
    # gemm_swiglu (sm_90a): decode 16 / 32 / 64, prefill 256 / 128 wide, the rest, no kernel (I % 8, K % 8)
    *[case("gemm_swiglu", dt, M=m, N=n, K=k) for dt in (BF, FP)
      for m, n, k in ((1, 24576, 4096), (32, 24576, 4096), (64, 28672, 4096), (33, 3072, 4096), (4096, 24576, 4096),
                      (512, 28672, 4096), (100, 24, 64), (3, 32, 60))],
    # gemm_dgrad / gemm_wgrad (sm_90a): training shapes (dgrad's large tiles), small and ragged ones (N = 60: TMA rows
    # the launcher refuses, as for gemm)
    *[case(op, dt, M=m, N=n, K=k) for op in ("gemm_dgrad", "gemm_wgrad", "gemm_wgrad_accumulate") for dt in (BF, FP)
      for m, n, k in ((8192, 4096, 14336), (4096, 14336, 4096), (16384, 28672, 4096), (100, 200, 72), (1, 4096, 4096),
                      (77, 60, 64))],
    # fp8_gemm_wgrad (sm_90a, one variant each): training shapes, a ragged one, and M % 16 != 0 (no kernel)
    *[case(op, F8, M=m, N=n, K=k) for op in ("fp8_gemm_wgrad", "fp8_gemm_wgrad_accumulate")
      for m, n, k in ((8192, 4096, 14336), (4096, 14336, 4096), (16, 200, 72), (100, 4096, 4096))],
    *[case("fp8_gemm", F8, arch=arch, M=m, N=n, K=k) for arch in ARCHS
      for m, n, k in ((1, 4096, 14336), (16, 1000, 8192), (1, 4096, 4096), (16, 28672, 4096), (8, 5120, 1024),
                      (17, 4096, 14336), (64, 4096, 8192), (32, 28672, 4096), (64, 4096, 4096), (33, 8192, 8192),
                      (64, 5120, 2048), (64, 28672, 4096), (48, 1000, 512), (100, 1000, 512), (128, 8192, 1024),
                      (4096, 8192, 640), (64, 2048, 8192), (1, 7168, 2048), (4096, 4096, 4096))],
    *[case("grouped_gemm", dt, arch=arch, M=m, N=n, K=k, E=8) for arch in ARCHS for dt in (BF, FP)
      for m, n, k in ((1024, 4096, 7168), (8192, 7168, 2048), (512, 512, 256))],
    # grouped GEMM gradients (sm_90a, one tile each): DeepSeek-V3 expert shapes, small ragged ones, and N = 60 (refused)
    *[case(op, dt, M=m, N=n, K=k, E=e) for op in ("grouped_gemm_dgrad", "grouped_gemm_masked_dgrad",
                                                  "grouped_gemm_wgrad_accumulate", "grouped_gemm_masked_wgrad")
      for dt in (BF, FP) for m, n, k, e in ((8192, 4096, 7168, 8), (1024, 7168, 2048, 32), (77, 136, 264, 3),
                                            (128, 60, 64, 2))],
    *[case("grouped_gemm_wgrad", dt, M=m, N=n, K=k, G=g) for dt in (BF, FP)
      for m, n, k, g in ((32768, 4096, 7168, 9), (65536, 7168, 2048, 33), (77, 64, 8, 2), (128, 60, 64, 3))],
    *[case("grouped_gemm_masked", dt, arch=arch, M=m, N=n, K=k, E=8) for arch in ARCHS for dt in (BF, FP)
      for m, n, k in ((64, 4096, 7168), (256, 4096, 7168), (1024, 7168, 2048), (32, 512, 256))],
    *[case("fp8_grouped_gemm", F8, arch=arch, M=m, N=n, K=k, E=8) for arch in ARCHS for m, n, k in ((1024, 4096, 7168),)],
    *[case("fp8_grouped_gemm_masked", F8, arch=arch, M=m, N=n, K=k, E=8) for arch in ARCHS
      for m, n, k in ((32, 4096, 7168), (64, 4096, 7168), (256, 4096, 7168))],
    # attention: head dims, causal or not, short and long keys, GQA
    *[case("flash_attention", dt, arch=arch, B=1, Sq=s, Sk=s, HQ=8, HK=hk, D=d, causal=c) for arch in ARCHS
      for dt in (BF, FP) for d in (64, 128, 96) for c in (False, True) for s in (300, 16384) for hk in (2,)],
    *[case("flash_attention_varlen", dt, arch=arch, TQ=700, TK=700, HQ=8, HK=2, D=d, NB=3, max_seqlen_q=400,
           max_seqlen_k=400, causal=c) for arch in ARCHS for dt in (BF, FP) for d in (64, 128) for c in (False, True)],
    *[case("paged_decode_attention", dt, B=b, HQ=hq, HK=8, D=d, NP=64, PS=ps, MP=mp) for dt in (BF, FP)
      for d in (64, 128) for ps in (16, 64) for b, hq, mp in ((1, 32, 32), (8, 64, 4), (4, 8, 8))],
    # quant: each op at an aligned size, at ragged ones, at big and small token counts
    *[case(op, dt, M=m, K=k) for op in ("per_token_group_quant_fp8", "per_token_group_quant_fp8_colmajor",
                                        "per_channel_quant_fp8", "per_channel_quant_fp8_transpose",
                                        "per_token_group_quant_fp4", "quant_e5m6")
      for dt in (BF, FP) for m, k in ((37, 7168), (4096, 7168), (16384, 7168), (2048, 7168), (600000, 128),
                                       (3, 16384), (3, 16392), (3, 4104), (3, 64))],
    *[case(op, dt, M=m, N=n) for op in ("silu_and_mul_quant_fp8", "silu_and_mul_quant_fp8_colmajor",
                                        "silu_and_mul_per_channel_quant_fp8_transpose", "silu_and_mul_backward_quant_fp8")
      for dt in (BF, FP) for m, n in ((37, 4096), (2048, 4096), (16384, 4096), (600000, 256), (3, 4352))],
    *[case("per_block_quant_fp8", dt, N=n, K=k) for dt in (BF, FP) for n, k in ((4096, 7168), (300, 1040), (3, 8))],
    # rms_norm (+ residual add) -> FP8: each resident range, the hidden sizes, no kernel (N % 128, N > 16384, fp16)
    *[case(op, dt, M=m, N=n) for op in ("rms_norm_quant_fp8", "fused_add_rms_norm_quant_fp8") for dt in (BF, FP)
      for m in (1, 4096) for n in (128, 2048, 2176, 4096, 5120, 7168, 8192, 12288, 16384, 16512, 1000)],
    *[case("per_token_group_dequant", F8, M=m, K=k) for m, k in ((37, 7168), (600000, 128))],
    *[case("per_block_dequant", F8, N=n, K=k) for n, k in ((4096, 7168), (300, 1040), (600000, 128))],
    *[case(op, F8, R=r, C=c) for op in ("group_dequant_fp8", "per_channel_dequant_fp8") for r, c in ((37, 7168), (4096, 4104))],
    case("group_dequant_fp8", F8, layouts={"s": "t"}, R=37, C=7168),
    *[case("per_token_group_dequant_fp4", "uint8", M=m, H=h) for m, h in ((37, 7168), (3, 64))],
    *[case("dequant_e5m6", "uint8", M=m, P=p) for m, p in ((37, 10752), (3, 12))],
    *[case("batched_transpose", dt, B=b, M=m, N=n) for dt in ("uint8", "float16", "int32")
      for b, m, n in ((2, 64, 64), (1, 4096, 7168), (1, 4097, 7168), (1, 3000, 7168), (1, 4112, 7168),
                      (3, 3000, 264), (1, 72, 24), (2, 1024, 7168), (1, 4098, 7168), (1, 4098, 7170), (1, 37, 24))],
    # moe: gate sizes, grouped gates, the token movers
    *[case("topk_gate", dt, absent=ab, T=t, E=e, k=8) for dt in ("float32", BF) for ab in ((), ("bias",))
      for t, e in ((37, 64), (37, 128), (37, 256), (37, 512), (4096, 128))],
    *[case("group_limited_topk_gate", dt, absent=ab, T=37, E=e, k=8, n_groups=8, topk_groups=4, n_out=8)
      for dt in ("float32", BF) for ab in ((), ("mask",), ("bias", "mask")) for e in (64, 256, 512)],
    case("moe_mapping", "int32", T=37, K=8, E=64, alignment=128, R=37 * 8 + 64 * 127),
    case("expert_counts", "int32", T=37, K=8, E=64),
    *[case(op, dt, T=37, H=7168, K=8, R=512, E=8) for op, dt in (("moe_expand", BF), ("moe_expand_fp8", F8),
                                                                   ("moe_expand_fp8_colmajor", F8))],
    *[case("moe_combine", BF, absent=ab, R=512, H=h, T=t, K=k) for ab in ((), ("shared",))
      for t, h, k in ((37, 7168, 8), (129, 7168, 8), (9, 7168, 12), (4096, 7168, 8), (64, 2048, 8))],
    # engram: the hash at any sizes (n = 1: no kernel); the gate at V4's baked hidden sizes, each
    # any-H range, no kernel (H % 8, H > 16384); the fused weight
    *[case("engram_hash", "int32", T=t, n=n, L=l, E=e) for t, n, l, e in ((0, 3, 2, 8), (37, 3, 2, 8), (16384, 3, 2, 8),
                                                                          (5, 2, 1, 1), (5, 4, 3, 16), (5, 1, 2, 8))],
    *[case("engram_gate", BF, T=t, m=m, H=h, clamp=1e-6, eps=1e-20) for t, m in ((37, 4), (1, 2))
      for h in (4096, 7168, 64, 2048, 3072, 5120, 8192, 16384, 4100, 16392)],
    *[case("engram_fused_weight", BF, m=4, H=h) for h in (4096, 7168, 100)],
    *[case("engram_gate_backward", BF, T=t, m=m, H=h, clamp=1e-6) for t, m in ((37, 4), (1, 2))
      for h in (4096, 7168, 64, 4104, 6144, 16384, 4100, 16392)],
    # mhc: row ops at V4's sizes, other m and H (any-m apply_mix; no kernel: H % 8, post at m != 4);
    # the per-token math at any T; norm_fn / big_fuse / norm_fn_backward across the split-K token
    # ranges and both resident ranges, with and without norm_weight, no kernel (H % 64, H > 16384, m != 4)
    *[case("expand_to_mhc", BF, T=t, H=h, mhc_mult=k) for t, h, k in ((37, 4096, 4), (0, 7168, 4), (5, 64, 2), (5, 100, 4))],
    *[case("expand_to_mhc_backward", BF, T=t, m=k, H=h) for t, k, h in ((37, 4, 4096), (0, 4, 7168), (5, 3, 64), (5, 4, 100))],
    *[case(op, BF, T=t, m=k, H=h) for op in ("mhc_pre_apply_mix", "mhc_post", "mhc_pre_apply_mix_backward", "mhc_post_backward")
      for t, k, h in ((37, 4, 4096), (0, 4, 7168), (5, 2, 7168), (5, 8, 64), (5, 4, 100))],
    *[case(op, "float32", T=t, mhc_mult=k, post_mult_value=2.0, **extra) for t, k in ((37, 4), (0, 4), (5, 2), (5, 5))
      for op, extra in (("mhc_pre_split_mixes", {"pre_eps": 1e-6}), ("mhc_pre_split_mixes_backward", {}))],
    *[case(op, "float32", T=t, m=k, repeat=r, eps=1e-6) for op in ("sinkhorn_normalize", "sinkhorn_normalize_backward")
      for t, k, r in ((37, 4, 10), (0, 4, 10), (5, 2, 10), (5, 4, 0), (5, 4, 33))],
    *[case("mhc_head_compute_mix", "float32", T=t, m=k, pre_eps=1e-6) for t, k in ((37, 4), (0, 4), (5, 3))],
    *[case("mhc_head_compute_mix_backward", "float32", T=t, m=k) for t, k in ((37, 4), (0, 4), (5, 33))],
    *[case("mhc_pre_norm_fn", BF, absent=ab, T=t, m=4, H=h, eps=1e-6) for ab in ((), ("norm_weight",))
      for t in (0, 1, 256, 257, 4096, 4097, 16384) for h in (4096, 7168, 64, 100)],
    *[case("mhc_pre_norm_fn", BF, T=37, m=2, H=4096, eps=1e-6)],
    *[case("mhc_pre_big_fuse", BF, absent=ab, T=t, m=4, H=h, rms_eps=1e-6, pre_eps=1e-6, sinkhorn_eps=1e-6,
           post_mult_value=1.0, sinkhorn_repeat=10) for ab in ((), ("norm_weight",))
      for t in (1, 256, 257, 4097) for h in (4096, 7168, 8256, 16384, 100, 16448)],
    *[case("mhc_pre_norm_fn_backward", BF, absent=ab, T=t, m=k, H=h) for ab in ((), ("norm_weight",))
      for t, k, h in ((37, 4, 4096), (0, 4, 7168), (16384, 4, 7168), (5, 2, 4096), (5, 4, 100))],
]


def _routes(op, dtype, absent, layouts, values, only_arch):
    """[(arch, accepted candidates, the call's inputs, scalars)] for one case, on each arch the op ships for."""
    entry = RUNTIME.registry.entry(op)
    args, scalars = _build(entry.spec, dtype, absent, layouts, values)
    ins = [args.get(t.name) for t in entry.spec.tensors if t.is_input]
    return [(arch, accepted(entry, arch, args, scalars, SM[arch]), ins, scalars)
            for arch in ((only_arch,) if only_arch else tuple(a for a in ARCHS if a in entry.archs()))]


@pytest.mark.parametrize("op, dtype, absent, layouts, values, only_arch", CASES)
def test_dispatch_follows_the_spec(op, dtype, absent, layouts, values, only_arch):
    for arch, ok, ins, scalars in _routes(op, dtype, absent, layouts, values, only_arch):
        e = tkreg.explain(op, *ins, arch=arch, sm_count=SM[arch], **scalars)
        want = ok[0].key if ok else None
        assert e.chosen == want, f"{arch}: the launcher chose {e.chosen}, the spec reads {want}\n{e}"


def test_the_cases_reach_every_shipped_variant():
    """Every variant the wheel ships for sm_90a and sm_100a is the spec's pick for some case above,
    or a fallback: accepted where every variant above it accepts exactly the same calls (it runs
    when TKREG_SKIP_VARIANTS removes them, as the tiled attention kernel under tcgen05)."""
    reached = {}
    for c in CASES:
        op = c.values[0]
        for arch, ok, _, _ in _routes(*c.values):
            got = reached.setdefault((RUNTIME.registry.entry(op).spec.name, arch), set())
            same = [k.text for k in ok[0].record.plan.constraints] if ok else None
            for i, cand in enumerate(ok):
                if i == 0 or all([k.text for k in o.record.plan.constraints] == same for o in ok[:i + 1]):
                    got.add(cand.key)
    missing = [f"{o['op']} @ {arch}: {key}" for o in tkreg.list_ops() if o["op"].startswith("tkreg.")
               for arch in ARCHS for key in o["variants"].get(arch, ())
               if key not in reached.get((o["op"], arch), ())]
    assert not missing, "no case above reaches these variants; add a shape that runs each:\n  " + "\n  ".join(missing)
