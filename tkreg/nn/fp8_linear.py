"""tkreg.nn.Fp8Linear: y = x @ weight^T (+ bias) trained in FP8 with DeepSeek-V3's recipe.

The master weight stays bf16.  Forward: x cast 1x128, the weight 128x128, tkreg.fp8_gemm (bf16 y).
Backward: dgrad dx = dy @ w through tkreg.fp8_gemm again, dy cast 1x128 along N against the
weight's 128x128 blocks transposed exactly (tkreg.ops.fp8_transpose_blocks: the weight is cast
again in backward, 3 bytes an element, and its fp8 bytes transposed, 2 more); wgrad dw = dy^T @ x
through tkreg.fp8_gemm_wgrad on the transposed per-channel casts of dy and x (128-token groups),
fp32, rounded to the weight's dtype once, or added into the weight's fp32 `main_grad` when it has
one (Megatron; eager only: a compiled graph sees no attribute and returns dw).  dbias = dy summed
over the tokens in fp32.

The differentiable composite is the torch op `tkreg_fp8::linear(x, weight)` (a
torch.library.custom_op with a fake implementation and its autograd formula), so
torch.compile(fullgraph=True) traces forward and backward.  Where a kernel does not serve (no GPU,
an arch without it), each step runs the same math in torch (tkreg.reference.fp8_gradients:
dequantize, fp32 matmul): slower, same numbers up to fp32 summation order.
"""
from __future__ import annotations

import torch

from ..ops.fp8_gradients import ALIGN_M
from ..ops._route import compiling, op, serves as _serves
from ..reference import fp8_gradients as ref
from .linear import Linear

GROUP = 128


def _forward(x, weight):
    if _serves("tkreg.fp8_gemm", x):
        xq, xs = op("tkreg.per_token_group_quant_fp8")(x, False)
        wq, ws = op("tkreg.per_block_quant_fp8")(weight, False)
        return op("tkreg.fp8_gemm")(xq, xs, wq, ws)
    return ref.fp8_linear(x, weight)


def _dgrad(dy, weight):
    """dx[M, K] bf16: dy 1x128 along N @ the weight's 128x128 blocks, transposed exactly."""
    if not _serves("tkreg.fp8_gemm", dy):
        return ref.fp8_linear_dgrad(dy, weight)
    dq, ds = op("tkreg.per_token_group_quant_fp8")(dy, False)
    wq, ws = op("tkreg.per_block_quant_fp8")(weight, False)
    wt = op("tkreg.batched_transpose")(wq.view(torch.uint8).unsqueeze(0))[0].view(torch.float8_e4m3fn)
    return op("tkreg.fp8_gemm")(dq, ds, wt, ws.t().contiguous())


def _wgrad(dy, x, main_grad):
    """dw[N, K] fp32 from the per-channel casts of dy and x; added into main_grad when given."""
    if not _serves("tkreg.fp8_gemm_wgrad", dy):
        dw = ref.fp8_linear_wgrad(dy, x)
        return dw if main_grad is None else main_grad.add_(dw)
    m = dy.shape[0]
    if m % ALIGN_M:   # zero tokens change neither the per-channel scales nor the sum
        pad = ALIGN_M - m % ALIGN_M
        dy, x = torch.nn.functional.pad(dy, (0, 0, 0, pad)), torch.nn.functional.pad(x, (0, 0, 0, pad))
    dq, ds = op("tkreg.per_channel_quant_fp8_transpose")(dy, False)
    xq, xs = op("tkreg.per_channel_quant_fp8_transpose")(x, False)
    if main_grad is not None:
        op("tkreg.fp8_gemm_wgrad_accumulate")(dq, ds, xq, xs, main_grad)
        return main_grad
    return op("tkreg.fp8_gemm_wgrad")(dq, ds, xq, xs)


@torch.library.custom_op("tkreg_fp8::linear", mutates_args=())
def fp8_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y[M, N] bf16 = x[M, K] @ weight[N, K]^T through FP8 (x 1x128, weight 128x128 block scales);
    differentiable (DeepSeek-V3's FP8 dgrad / wgrad).  bf16 x and weight, K and N % 128 == 0."""
    return _forward(x, weight)


@fp8_linear.register_fake
def _(x, weight):
    return x.new_empty(x.shape[0], weight.shape[0], dtype=torch.bfloat16)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    x, weight = ctx.saved_tensors
    dy = dy.contiguous()
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = _dgrad(dy, weight)
    if ctx.needs_input_grad[1]:
        main = getattr(weight, "main_grad", None)
        if main is not None:
            _wgrad(dy, x, main)
        else:
            dw = _wgrad(dy, x, None).to(weight.dtype)
    return dx, dw


fp8_linear.register_autograd(_backward, setup_context=_setup_context)


def check(x, weight) -> None:
    """fp8_linear's inputs, checked before any launch (bf16, 2-D, K and N multiples of 128)."""
    name = "tkreg.nn.Fp8Linear"
    if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        raise TypeError(f"{name}: x and weight must be torch.bfloat16 (the master weight is bf16); got {x.dtype} "
                        f"and {weight.dtype}")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{name}: x has {x.shape[-1]} features; the weight [N, K] expects K = {weight.shape[1]}")
    if weight.shape[0] % GROUP or weight.shape[1] % GROUP:
        raise ValueError(f"{name}: weight {tuple(weight.shape)}: in and out features must be multiples of {GROUP} "
                         "(1x128 activation / 128x128 weight scale groups)")


class Fp8Linear(Linear):
    """y = x @ weight^T (+ bias) with FP8 GEMMs forward and backward (module docstring); weight
    [out_features, in_features] bf16 (tkreg.nn.Linear's parameters: torch.nn.Linear's layout and
    initialization), both features multiples of 128; x bf16 with any leading dims; y bf16."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=torch.bfloat16):
        if in_features % GROUP or out_features % GROUP:
            raise ValueError(f"tkreg.nn.Fp8Linear: in_features = {in_features} and out_features = {out_features} "
                             f"must be multiples of {GROUP}")
        super().__init__(in_features, out_features, bias, device, dtype)

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        if not compiling():
            check(x2, self.weight)
        y = fp8_linear(x2, self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)
