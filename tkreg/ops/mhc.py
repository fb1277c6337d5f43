"""Typed functions for the mHC family (DeepSeek-V4's manifold-constrained hyper-connections, the
semantics of TileKernels' `tile_kernels/modeling/mhc/ops`).

Leading dimensions are tokens: a function takes [..., m, H] (or [..., H], [..., m, 1], [..., m, m])
and runs the op on them flattened to one axis T (any T, 0 included), shaping outputs back.  The
ops' own arguments and errors are the specs' (kernels_src/mhc); m = 4 is baked into mhc_post,
sinkhorn_normalize, mhc_pre_norm_fn and mhc_pre_big_fuse, expand / apply_mix / split_mixes /
head_compute_mix take any m.
"""
from __future__ import annotations

import math

from ..runtime import OPS
from ._route import compiling, graph


def _flat(t, tail: int):
    """t[..., *tail dims] as [T, *tail dims] (a view where the layout allows), and its lead dims."""
    if getattr(t, "ndim", tail + 1) == tail + 1:
        return t, None
    lead = tuple(t.shape[:t.ndim - tail])
    return t.reshape(math.prod(lead), *t.shape[t.ndim - tail:]), lead


def _shaped(y, lead, tail: int):
    return y if lead is None else y.view(*lead, *y.shape[y.ndim - tail:])


def _run(name, out, *args):
    if compiling():
        return graph(name, out, *args)
    return OPS[name](*args, out) if out is not None else OPS[name](*args)


def expand_to_mhc(x, mhc_mult: int, *, out=None):
    """x[..., H] bf16 -> [..., mhc_mult, H]: each token's row copied to its mhc_mult streams (H % 8 == 0)."""
    xf, lead = _flat(x, 1)
    o = None if out is None else _flat(out, 2)[0]
    return _shaped(_run("tkreg.expand_to_mhc", o, xf, int(mhc_mult)), lead, 2) if out is None else out


def mhc_pre_apply_mix(residual, pre, *, out=None):
    """residual[..., m, H] bf16, pre[..., m, 1] fp32 -> [..., H] bf16: sum over m of pre * residual
    (fp32 math, rounded once).  Any m; H % 8 == 0."""
    r, lead = _flat(residual, 2)
    o = None if out is None else _flat(out, 1)[0]
    y = _run("tkreg.mhc_pre_apply_mix", o, r, _flat(pre, 2)[0])
    return _shaped(y, lead, 1) if out is None else out


def mhc_post(x, residual, post_layer_mix, comb_res_mix, *, out=None):
    """x[..., H], residual[..., m, H] bf16, post_layer_mix[..., m, 1], comb_res_mix[..., m, m] fp32
    -> [..., m, H] bf16 = x * post + einsum('mn,mc->nc', comb, residual), fp32 math.  m = 4."""
    r, lead = _flat(residual, 2)
    o = None if out is None else _flat(out, 2)[0]
    y = _run("tkreg.mhc_post", o, _flat(x, 1)[0], r, _flat(post_layer_mix, 2)[0], _flat(comb_res_mix, 2)[0])
    return _shaped(y, lead, 2) if out is None else out


def mhc_pre_norm_fn_fwd(residual, fn, norm_weight=None, eps: float = 1e-6):
    """(mixes[T, m(m+2)], rstd[T]) fp32 of residual[T, m, H]: rstd = rsqrt(mean over m*H of
    residual^2 + eps), mixes = (residual @ (fn * norm_weight)^T) * rstd.  fn[m(m+2), m*H] and
    norm_weight[m*H] (or None) fp32.  fp32 FMA on the CUDA cores, a deterministic split-K; m = 4,
    H % 64 == 0."""
    return _run("tkreg.mhc_pre_norm_fn", None, residual, fn, norm_weight, eps)


def mhc_pre_norm_fn(residual, mhc_fn, mhc_norm_weight=None, mhc_norm_eps: float = 1e-6):
    """mixes[..., m(m+2)] fp32 = rmsnorm(residual[..., m, H] over m*H) @ (fn * norm_weight)^T
    (mhc_pre_norm_fn_fwd's first output; differentiable)."""
    r, lead = _flat(residual, 2)
    return _shaped(mhc_pre_norm_fn_fwd(r, mhc_fn, mhc_norm_weight, mhc_norm_eps)[0], lead, 1)


def mhc_pre_split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult: int, mhc_post_mult_value: float,
                        mhc_pre_eps: float):
    """mixes[..., m(m+2)], scale[3], base[m(m+2)] fp32 -> (pre[..., m, 1], post[..., m, 1], comb[..., m, m]):
    v = mixes * (scale[0] | scale[1] | scale[2] by group) + base; pre = sigmoid(v) + pre_eps,
    post = sigmoid(v) * post_mult_value, comb = the raw m x m block.  Any m."""
    x, lead = _flat(input_mixes, 1)
    res = _run("tkreg.mhc_pre_split_mixes", None, x, mhc_scale, mhc_base, int(mhc_mult), float(mhc_post_mult_value),
               float(mhc_pre_eps))
    return tuple(_shaped(y, lead, 2) for y in res)


def sinkhorn_normalize(x, repeat: int = 10, eps: float = 1e-6):
    """comb[..., m, m] fp32 -> Sinkhorn-normalised (softmax over rows + eps, column-normalised,
    then repeat - 1 rounds of row and column normalisation, each sum + eps).  m = 4; a strided
    comb (a view of the mixes) is copied first, as TileKernels does."""
    c, lead = _flat(x.contiguous(), 2)
    return _shaped(_run("tkreg.sinkhorn_normalize", None, c, int(repeat), float(eps)), lead, 2)


def mhc_head_compute_mix(input_mix, mhc_scale, mhc_base, mhc_pre_eps: float):
    """input_mix[..., m] (rows may be strided: a slice of the mixes), scale[1], base[m] fp32 ->
    sigmoid(input_mix * scale + base) + pre_eps.  Any m."""
    x, lead = _flat(input_mix, 1)
    return _shaped(_run("tkreg.mhc_head_compute_mix", None, x, mhc_scale, mhc_base, float(mhc_pre_eps)), lead, 1)


def mhc_pre_big_fuse(residual, fn, mhc_scale, mhc_base, rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float,
                     mhc_post_mult_value: float, sinkhorn_repeat: int, *, norm_weight=None):
    """The fused mHC pre for inference, in two launches: (post_mix[..., m, 1], comb_mix[..., m, m]
    fp32, layer_input[..., H] bf16) = norm_fn -> split_mixes -> sinkhorn(comb) -> apply_mix(pre).
    TileKernels' arguments (its `n_splits` is the kernels' own choice here); `norm_weight` (fp32
    [m*H], optional) is folded into fn in the kernel.  m = 4, H % 64 == 0 up to 16384; no backward."""
    r, lead = _flat(residual, 2)
    post, comb, x = _run("tkreg.mhc_pre_big_fuse", None, r, fn, mhc_scale, mhc_base, norm_weight, float(rms_eps),
                         float(mhc_pre_eps), float(mhc_sinkhorn_eps), float(mhc_post_mult_value), int(sinkhorn_repeat))
    return _shaped(post, lead, 2), _shaped(comb, lead, 2), _shaped(x, lead, 1)


# ---- backward ---------------------------------------------------------------------------------------
def mhc_pre_apply_mix_backward(grad_out, residual, pre):
    """(grad_residual [T, m, H] bf16, grad_pre [T, m, 1] fp32) of mhc_pre_apply_mix; deterministic."""
    return _run("tkreg.mhc_pre_apply_mix_backward", None, grad_out, residual, pre)


def mhc_post_backward(grad_out, x, residual, post_layer_mix, comb_res_mix):
    """(grad_x, grad_residual bf16; grad_post [T, m, 1], grad_comb [T, m, m] fp32) of mhc_post."""
    return _run("tkreg.mhc_post_backward", None, grad_out, x, residual, post_layer_mix, comb_res_mix)


def sinkhorn_normalize_backward(grad_out, comb, repeat: int = 10, eps: float = 1e-6):
    """grad_comb [T, m, m] of sinkhorn_normalize at its input comb (repeat <= 32)."""
    return _run("tkreg.sinkhorn_normalize_backward", None, grad_out, comb, int(repeat), float(eps))


def mhc_pre_split_mixes_backward(grad_pre, grad_post, grad_comb, mixes, scale, base, mhc_mult: int,
                                 post_mult_value: float):
    """(grad_mixes [T, m(m+2)], grad_scale [3], grad_base [m(m+2)]) fp32 of mhc_pre_split_mixes;
    the token sums in a fixed order (no atomics).  m <= 4."""
    return _run("tkreg.mhc_pre_split_mixes_backward", None, grad_pre, grad_post, grad_comb, mixes, scale, base,
                int(mhc_mult), float(post_mult_value))


def mhc_pre_norm_fn_backward(grad_mixes, residual, fn, norm_weight, mixes, rstd):
    """(grad_residual [T, m, H] bf16, grad_fn [m(m+2), m*H], grad_norm_weight [m*H] fp32; zeros
    without a norm_weight) of mhc_pre_norm_fn from its mixes and rstd; deterministic."""
    return _run("tkreg.mhc_pre_norm_fn_backward", None, grad_mixes, residual, fn, norm_weight, mixes, rstd)


def _zeros_if_none(g, like):
    import torch
    return torch.zeros_like(like) if g is None else g.contiguous()


class MhcPreApplyMixGrad:
    """Autograd of tkreg.mhc_pre_apply_mix (named by its spec as `backward`)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_out):
        from ._route import op
        residual, pre = ctx.saved_tensors
        return op("tkreg.mhc_pre_apply_mix_backward")(grad_out.contiguous(), residual, pre)


class MhcPostGrad:
    """Autograd of tkreg.mhc_post."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_out):
        from ._route import op
        return op("tkreg.mhc_post_backward")(grad_out.contiguous(), *ctx.saved_tensors)


class SinkhornGrad:
    """Autograd of tkreg.sinkhorn_normalize: the input is saved, the forward replayed in the backward."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        comb, repeat, eps = inputs
        ctx.save_for_backward(comb)
        ctx.repeat, ctx.eps = repeat, eps

    @staticmethod
    def backward(ctx, grad_out):
        from ._route import op
        (comb,) = ctx.saved_tensors
        return op("tkreg.sinkhorn_normalize_backward")(grad_out.contiguous(), comb, ctx.repeat, ctx.eps), None, None


class SplitMixesGrad:
    """Autograd of tkreg.mhc_pre_split_mixes: gradients reach mixes, scale and base."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        mixes, scale, base, mhc_mult, post_mult_value, _pre_eps = inputs
        ctx.save_for_backward(mixes, scale, base, *output)
        ctx.mhc_mult, ctx.post_mult_value = mhc_mult, post_mult_value

    @staticmethod
    def backward(ctx, grad_pre, grad_post, grad_comb):
        from ._route import op
        mixes, scale, base, pre, post, comb = ctx.saved_tensors
        gm, gs, gb = op("tkreg.mhc_pre_split_mixes_backward")(
            _zeros_if_none(grad_pre, pre), _zeros_if_none(grad_post, post), _zeros_if_none(grad_comb, comb),
            mixes, scale, base, ctx.mhc_mult, ctx.post_mult_value)
        return gm, gs, gb, None, None, None


class NormFnGrad:
    """Autograd of tkreg.mhc_pre_norm_fn: gradients reach residual, fn and norm_weight through
    `mixes`; `rstd` carries none."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        residual, fn, norm_weight, _eps = inputs
        mixes, rstd = output
        ctx.has_weight = norm_weight is not None
        ctx.save_for_backward(residual, fn, norm_weight, mixes, rstd)

    @staticmethod
    def backward(ctx, grad_mixes, _grad_rstd):
        from ._route import op
        residual, fn, norm_weight, mixes, rstd = ctx.saved_tensors
        gr, gfn, gnw = op("tkreg.mhc_pre_norm_fn_backward")(_zeros_if_none(grad_mixes, mixes), residual, fn,
                                                             norm_weight, mixes, rstd)
        return gr, gfn, gnw if ctx.has_weight else None, None


def mhc_head_compute_mix_backward(grad_out, input_mix, scale, base):
    """(grad_input [T, m], grad_scale [1], grad_base [m]) fp32 of mhc_head_compute_mix; deterministic."""
    return _run("tkreg.mhc_head_compute_mix_backward", None, grad_out, input_mix, scale, base)


class HeadComputeMixGrad:
    """Autograd of tkreg.mhc_head_compute_mix: gradients reach input_mix, scale and base."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        input_mix, scale, base, _eps = inputs
        ctx.save_for_backward(input_mix, scale, base)

    @staticmethod
    def backward(ctx, grad_out):
        from ._route import op
        return (*op("tkreg.mhc_head_compute_mix_backward")(grad_out.contiguous(), *ctx.saved_tensors), None)


def expand_to_mhc_backward(grad_out):
    """grad_x [T, H] = the sum over m of grad_out [T, m, H] (fp32, rounded once)."""
    return _run("tkreg.expand_to_mhc_backward", None, grad_out)


class ExpandGrad:
    """Autograd of tkreg.expand_to_mhc: the gradient is the sum over the m streams."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        from ._route import op
        return op("tkreg.expand_to_mhc_backward")(grad_out.contiguous()), None
