"""Torch references for the mHC family (DeepSeek-V4's manifold-constrained hyper-connections), the
semantics of DeepSeek's TileKernels (`tile_kernels/torch/mhc.py`): the test oracle and the
TKREG_FALLBACK=reference path.  Each takes an op's arguments in its spec's order (inputs, then
scalars) and returns its outputs; tokens are one leading axis T.

Everything is fp32 math on bf16 residual rows, rounded once to bf16 where an output is bf16.
m = mhc_mult, N = m * (m + 2) mixes a token: m pre, m post, m * m comb.
"""
from __future__ import annotations


def expand_to_mhc(x, mhc_mult):
    """x[T, H] -> [T, mhc_mult, H]: each row copied mhc_mult times."""
    return x.unsqueeze(-2).expand(x.shape[0], int(mhc_mult), x.shape[-1]).contiguous()


def mhc_pre_apply_mix(residual, pre):
    """residual[T, m, H] bf16, pre[T, m, 1] fp32 -> sum over m of pre * residual, [T, H] bf16."""
    return (residual.float() * pre).sum(-2).to(residual.dtype)


def mhc_post(x, residual, post, comb):
    """x[T, H], residual[T, m, H] bf16, post[T, m, 1], comb[T, m, m] fp32 -> [T, m, H] bf16:
    out[t, n] = post[t, n] * x[t] + sum over h of comb[t, h, n] * residual[t, h]."""
    import torch
    mixed = torch.einsum("thn,thc->tnc", comb, residual.float())
    return (x.float().unsqueeze(-2) * post + mixed).to(residual.dtype)


def mhc_pre_norm_fn(residual, fn, norm_weight, eps):
    """residual[T, m, H] bf16, fn[N, m*H] fp32, norm_weight[m*H] fp32 or None -> (mixes[T, N],
    rstd[T]) fp32: rstd = rsqrt(mean over m*H of residual^2 + eps), mixes = (residual @ (fn *
    norm_weight)^T) * rstd (fp32, the full row as K)."""
    x = residual.flatten(1).float()
    w = fn if norm_weight is None else fn * norm_weight
    rstd = (x.square().sum(-1) / x.shape[-1] + eps).rsqrt()
    return (x @ w.t()) * rstd[:, None], rstd


def mhc_pre_split_mixes(mixes, scale, base, mhc_mult, post_mult_value, pre_eps):
    """mixes[T, N], scale[3], base[N] fp32 -> (pre[T, m, 1], post[T, m, 1], comb[T, m, m]):
    v = mixes * (scale[0] on the m pre, scale[1] on the m post, scale[2] on the m*m comb) + base;
    pre = sigmoid(v) + pre_eps, post = sigmoid(v) * post_mult_value, comb = v (row-major m x m)."""
    import torch
    m = int(mhc_mult)
    s = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)])
    v = mixes * s + base
    pre = (v[:, :m].sigmoid() + pre_eps).unsqueeze(-1)
    post = (v[:, m:2 * m].sigmoid() * post_mult_value).unsqueeze(-1)
    return pre, post, v[:, 2 * m:].reshape(-1, m, m).contiguous()


def sinkhorn_normalize(comb, repeat=10, eps=1e-6):
    """comb[T, m, m] fp32: softmax over the last dim + eps, divided by its column sums (+ eps),
    then repeat - 1 rounds of row sums then column sums (each + eps)."""
    x = comb.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(int(repeat) - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def mhc_head_compute_mix(input_mix, scale, base, pre_eps):
    """input_mix[T, m], scale[1], base[m] fp32 -> sigmoid(input_mix * scale + base) + pre_eps."""
    return (input_mix * scale + base).sigmoid() + pre_eps


def mhc_pre_big_fuse(residual, fn, scale, base, norm_weight, rms_eps, pre_eps, sinkhorn_eps, post_mult_value,
                     sinkhorn_repeat):
    """The inference chain in one call: (post[T, m, 1], comb[T, m, m] fp32, layer_input[T, H]
    bf16) = norm_fn -> split_mixes -> sinkhorn (comb) -> apply_mix (pre)."""
    m = residual.shape[1]
    mixes, _ = mhc_pre_norm_fn(residual, fn, norm_weight, rms_eps)
    pre, post, comb = mhc_pre_split_mixes(mixes, scale, base, m, post_mult_value, pre_eps)
    return post, sinkhorn_normalize(comb, sinkhorn_repeat, sinkhorn_eps), mhc_pre_apply_mix(residual, pre)


# ---- backward: gradients from what each forward saves ----------------------------------------------
def mhc_pre_apply_mix_backward(grad_out, residual, pre):
    """(grad_residual = pre * grad_out [T, m, H] in residual's dtype, grad_pre = sum over H of
    grad_out * residual [T, m, 1] fp32)."""
    g = grad_out.float().unsqueeze(1)
    return (g * pre).to(residual.dtype), (g * residual.float()).sum(-1, keepdim=True)


def mhc_post_backward(grad_out, x, residual, post, comb):
    """(grad_x[c] = sum_n post[n] g[n, c], grad_residual[h, c] = sum_n comb[h, n] g[n, c] (bf16),
    grad_post[n] = sum_c x[c] g[n, c] [T, m, 1], grad_comb[h, n] = sum_c residual[h, c] g[n, c] (fp32))."""
    import torch
    g = grad_out.float()
    grad_x = (g * post).sum(1)
    grad_residual = torch.einsum("thn,tnc->thc", comb, g)
    grad_post = (g * x.float().unsqueeze(1)).sum(-1, keepdim=True)
    grad_comb = torch.einsum("thc,tnc->thn", residual.float(), g)
    return grad_x.to(x.dtype), grad_residual.to(residual.dtype), grad_post, grad_comb


def sinkhorn_normalize_backward(grad_out, comb, repeat=10, eps=1e-6):
    """grad_comb of sinkhorn_normalize at comb (torch autograd through the forward, fp32)."""
    import torch
    with torch.enable_grad():
        c = comb.detach().float().requires_grad_()
        (g,) = torch.autograd.grad(sinkhorn_normalize(c, repeat, eps), c, grad_out.float())
    return g


def mhc_pre_split_mixes_backward(grad_pre, grad_post, grad_comb, mixes, scale, base, mhc_mult, post_mult_value):
    """(grad_mixes[T, N], grad_scale[3], grad_base[N]) fp32: dv = grad_pre * sig'(v) | grad_post *
    post_mult_value * sig'(v) | grad_comb, v = mixes * s + base; grad_mixes = dv * s, grad_base =
    sum over tokens of dv, grad_scale[g] = sum over tokens and group g of dv * mixes."""
    import torch
    m = int(mhc_mult)
    s = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)])
    sg = (mixes * s + base).sigmoid()
    d = sg * (1 - sg)
    dv = torch.cat([grad_pre.reshape(-1, m) * d[:, :m], grad_post.reshape(-1, m) * post_mult_value * d[:, m:2 * m],
                    grad_comb.reshape(-1, m * m)], dim=1)
    dm = (dv * mixes).sum(0)
    grad_scale = torch.stack([dm[:m].sum(), dm[m:2 * m].sum(), dm[2 * m:].sum()])
    return dv * s, grad_scale, dv.sum(0)


def mhc_pre_norm_fn_backward(grad_mixes, residual, fn, norm_weight, mixes, rstd):
    """(grad_residual [T, m, H] in residual's dtype, grad_fn [N, m*H], grad_norm_weight [m*H] fp32,
    zeros without a norm_weight) of mixes = (x @ w^T) * r, w = fn * norm_weight, r = rstd:
    grad_x = (grad_mixes * r) @ w - r^2 / K * sum_n(grad_mixes * mixes) * x, grad_w =
    (grad_mixes * r)^T @ x, grad_fn = grad_w * norm_weight, grad_norm_weight = sum_n grad_w * fn."""
    import torch
    x = residual.flatten(1).float()
    w = fn if norm_weight is None else fn * norm_weight
    gp = grad_mixes * rstd[:, None]
    coef = rstd.square() / x.shape[1] * (grad_mixes * mixes).sum(-1)
    grad_x = gp @ w - coef[:, None] * x
    grad_w = gp.t() @ x
    if norm_weight is None:
        grad_fn, grad_nw = grad_w, torch.zeros(fn.shape[1], dtype=fn.dtype, device=fn.device)
    else:
        grad_fn, grad_nw = grad_w * norm_weight, (grad_w * fn).sum(0)
    return grad_x.view_as(residual).to(residual.dtype), grad_fn, grad_nw


def mhc_head_compute_mix_backward(grad_out, input_mix, scale, base):
    """(grad_input = dv * scale [T, m], grad_scale = sum of dv * input_mix [1], grad_base = sum over
    tokens of dv [m]) fp32, dv = grad_out * sig'(input_mix * scale + base)."""
    sg = (input_mix * scale + base).sigmoid()
    dv = grad_out * sg * (1 - sg)
    return dv * scale, (dv * input_mix).sum().reshape(1), dv.sum(0)


def expand_to_mhc_backward(grad_out):
    """grad_x[T, H] = sum over m of grad_out[T, m, H] (fp32, rounded once to grad_out's dtype)."""
    return grad_out.float().sum(1).to(grad_out.dtype)
