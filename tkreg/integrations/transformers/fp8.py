"""FP8 mode of tkreg.kernelize (fp8=True): DeepSeek-V3's recipe on the dense Linears of the decoder layers.

Each of the packed qkv, o_proj, packed gate_up and down weights is quantized once, at kernelize
time, to e4m3 with one fp32 scale a 128 x 128 block (`per_block_quant_fp8`), and runs through
`fp8_gemm` (bf16 out) on activations quantized per 1 x 128 token group, those scales produced by
the kernel that feeds each GEMM:
  qkv      the input norm: rms_norm_quant_fp8, or fused_add_rms_norm_quant_fp8 with the previous
           layer's residual add;
  gate_up  the post-attention norm: fused_add_rms_norm_quant_fp8 with the attention's residual add;
  down     silu_and_mul_quant_fp8 of the gate_up output;
  o_proj   per_token_group_quant_fp8 of the attention output (a separate kernel: the attention
           kernels write bf16).
Attention, the norms' residual stream and everything outside the decoder layers stay bf16.  A bias
is added to the GEMM's bf16 output by torch.  Modules keep their bf16 weights (state_dict is
unchanged), so FP8 mode holds 1.5x the Linear weights' bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import ops
from ._support import Unsupported

GROUP = 128
# what FP8 mode launches besides bf16 mode's kernels
OPS = ("tkreg.fp8_gemm", "tkreg.per_block_quant_fp8", "tkreg.per_token_group_quant_fp8",
       "tkreg.rms_norm_quant_fp8", "tkreg.fused_add_rms_norm_quant_fp8", "tkreg.silu_and_mul_quant_fp8")
NORM_MAX_N = 16384          # rms_norm_quant_fp8's widest row (kernels_src/quant/rms_norm_fp8.py)


@dataclass(frozen=True)
class Fp8Act:
    """Activations quantized for fp8_gemm: q[T, K] e4m3, s[T, K // 128] fp32; `shape` is the bf16
    tensor's (e.g. [B, S, K]) so the modules that receive it read batch and sequence sizes from it."""
    q: object
    s: object
    shape: tuple


@dataclass(frozen=True)
class Fp8Weight:
    """A Linear's weight quantized once: q[N, K] e4m3, s[ceil(N/128), K/128] fp32; bias bf16 or None."""
    q: object
    s: object
    bias: object


def _2d(x):
    return x.reshape(-1, x.shape[-1])


def quantize_act(x) -> Fp8Act:
    """A bf16 activation [..., K] -> per-token-group FP8 (per_token_group_quant_fp8)."""
    q, s = ops.per_token_group_quant_fp8(_2d(x.contiguous()))
    return Fp8Act(q, s, tuple(x.shape))


def linear(x, w: Fp8Weight):
    """x @ w^T (+ bias) -> bf16 [T, N]; x an Fp8Act or a bf16 tensor (quantized here)."""
    a = x if isinstance(x, Fp8Act) else quantize_act(x)
    out = ops.fp8_gemm(a.q, a.s, w.q, w.s)
    return out if w.bias is None else out.add_(w.bias)


def norm(module, x) -> Fp8Act:
    """rms_norm of x [..., N] quantized in the same kernel, for the FP8 GEMM after the norm."""
    q, s = ops.quant.rms_norm_quant_fp8(_2d(x), module.weight, module.variance_epsilon)
    return Fp8Act(q, s, tuple(x.shape))


def fused_add_norm(x, residual, module) -> Fp8Act:
    """residual += x in place; the norm of the new residual, quantized (x is left as it was)."""
    q, s = ops.quant.fused_add_rms_norm_quant_fp8(_2d(x), _2d(residual), module.weight, module.variance_epsilon)
    return Fp8Act(q, s, tuple(x.shape))


def swiglu_quant(gu) -> Fp8Act:
    """silu(gate) * up of gu[T, 2I], quantized in the same kernel for the down projection."""
    q, s = ops.silu_and_mul_quant_fp8(gu)
    return Fp8Act(q, s, (gu.shape[0], gu.shape[1] // 2))


# ---- kernelize time ---------------------------------------------------------------------------
def servable(n: int, k: int) -> None:
    """Unsupported unless fp8_gemm (K % 16, N % 8) and the 1 x 128 activation groups (K % 128) fit."""
    if k % GROUP or n % 8:
        raise Unsupported(f"[{n}, {k}] weight: FP8 GEMMs need K % 128 == 0 (1x128 activation scales) "
                          "and N % 8 == 0")


def quantize_weight(w, bias=None) -> Fp8Weight:
    q, s = ops.per_block_quant_fp8(w.detach().contiguous())
    return Fp8Weight(q, s, None if bias is None else bias.detach())


def _norm_feeds(norm, hidden: int) -> bool:
    """Whether this norm can produce the FP8 activations itself (a tkreg norm of a served width)."""
    return getattr(norm, "_tkreg_norm", False) and hidden % GROUP == 0 and hidden <= NORM_MAX_N


def _feed_detail(norm, hidden) -> str:
    if _norm_feeds(norm, hidden):
        return "activations quantized by the norm before it (rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8)"
    return "activations: per_token_group_quant_fp8 of the bf16 norm output (a separate kernel)"


def apply(base, cfg, report, check) -> None:
    """Quantize the decoder layers' dense Linears that kernelize put on tkreg (`check()` raises
    Unsupported when the device lacks an FP8 op) and flag the norms that feed them; one report row
    a Linear, on FP8 or kept bf16 with the reason."""
    import torch

    def row(name, ok, detail):
        report.add(name, "fp8_linear", ok, detail)

    layers = list(base.layers)
    try:
        check()
        dtype = next(base.parameters()).dtype
        if dtype != torch.bfloat16:
            raise Unsupported(f"dtype {str(dtype).replace('torch.', '')}: FP8 mode serves bfloat16 models "
                              "(fp8_gemm writes bf16)")
    except Unsupported as e:
        for i in range(len(layers)):
            row(f"model.layers.{i}", False, f"bf16 GEMMs: {e}")
        return
    for i, layer in enumerate(layers):
        pre = f"model.layers.{i}"
        a, mlp = layer.self_attn, layer.mlp
        if "_tkreg_qkv" in a._buffers:
            _attention(a, layer.input_layernorm, pre + ".self_attn", row)
        else:
            row(pre + ".self_attn", False, "attention stays on torch: its projections too (bf16)")
        if "_tkreg_gate_up" in mlp._buffers:
            _mlp(mlp, layer.post_attention_layernorm, pre + ".mlp", row)
        else:
            row(pre + ".mlp", False, f"{type(mlp).__name__} is not a tkreg dense MLP: bf16 "
                "(MoE experts have no FP8 path in kernelize)")
    report.notes.append("fp8=True: 128x128 block-scaled e4m3 weights (quantized once) x 1x128 activation "
                        "scales through tkreg.fp8_gemm; attention, residual stream, embedding and lm_head bf16")


def _attention(a, in_norm, name, row) -> None:
    w, o = a._tkreg_qkv, a.o_proj
    _to_fp8(a, "_tkreg_fp8_qkv", w, a._tkreg_qkv_bias, name + ".qkv", row, _feed_detail(in_norm, w.shape[1]), in_norm)
    _to_fp8(a, "_tkreg_fp8_o", o.weight, o.bias, name + ".o_proj", row,
            "activations: per_token_group_quant_fp8 of the bf16 attention output (a separate kernel)")


def _mlp(mlp, post_norm, name, row) -> None:
    w, d = mlp._tkreg_gate_up, mlp.down_proj
    _to_fp8(mlp, "_tkreg_fp8_gate_up", w, mlp._tkreg_gate_up_bias, name + ".gate_up", row,
            _feed_detail(post_norm, w.shape[1]), post_norm)
    _to_fp8(mlp, "_tkreg_fp8_down", d.weight, d.bias, name + ".down", row,
            "activations quantized by silu_and_mul_quant_fp8")


def _to_fp8(module, attr, w, bias, name, row, feed, norm=None) -> None:
    """Put one projection on fp8_gemm: w (+ bias) quantized into module.<attr>, and `norm` (the norm
    that feeds it, if any) flagged to quantize its output when it can; one report row, on FP8 with
    `feed` (where its activations come from) or kept bf16 with the reason."""
    try:
        servable(*w.shape)
        module.__dict__[attr] = quantize_weight(w, bias)
        if norm is not None and _norm_feeds(norm, w.shape[1]):
            norm._tkreg_fp8 = True
        row(name, True, f"[{w.shape[0]}, {w.shape[1]}] fp8_gemm; {feed}")
    except Unsupported as e:
        row(name, False, f"bf16 gemm: {e}")
