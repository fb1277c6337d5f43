"""The forwards kernelize puts on a model's modules (bound per instance; the modules keep their
weights, so state_dict and the stock classes are untouched).

- RMSNorm: `rms_norm`; a norm that directly follows a kernelized decoder layer takes the normed
  activations that layer already produced with `fused_add_rms_norm` (the residual add of its MLP
  output fused into this norm), recognised by identity of the hidden-state tensor.
- MLP: gate/up packed once into one [2I, H] weight: gemm -> silu_and_mul -> gemm.
- attention: q/k/v packed once into one [(HQ + 2HK) D, H] weight (one gemm); per-head q/k norm;
  rotary from a cos/sin table built once; attention through `attention.contiguous` or the paged
  cache; o_proj gemm.
- decoder layer: the residual add of the attention output fused into post_attention_layernorm.
- FP8 mode (fp8.py): a projection holding an `Fp8Weight` runs fp8_gemm; a norm flagged
  `_tkreg_fp8` returns its output quantized (`Fp8Act`) for the FP8 GEMM it feeds.
"""
from __future__ import annotations

import torch

from ... import ops
from . import attention as attn
from . import fp8


def _2d(x):
    return x.reshape(-1, x.shape[-1])


# ---- RMSNorm --------------------------------------------------------------------------------
def rms_norm_forward(self, hidden_states):
    stash = self.__dict__.pop("_tkreg_stash", None)
    if stash is not None and stash[0] is hidden_states:
        return stash[1]
    x = hidden_states.contiguous()
    if getattr(self, "_tkreg_fp8", False):
        return fp8.norm(self, x)
    return ops.rms_norm(_2d(x), self.weight, self.variance_epsilon).view(x.shape)


def _fused_add(x, residual, norm):
    """residual += x in place; returns the norm of the new residual: bf16 in x's storage, or
    quantized (x untouched) where the norm feeds an FP8 GEMM."""
    if getattr(norm, "_tkreg_fp8", False):
        return fp8.fused_add_norm(x, residual, norm)
    ops.fused_add_rms_norm(_2d(x), _2d(residual), norm.weight, norm.variance_epsilon)
    return x


def _proj(module, key, x, w, b):
    """x[..., K] @ w^T + b -> [T, N]: fp8_gemm where FP8 mode quantized this weight
    (module.__dict__[key]), else gemm."""
    f = module.__dict__.get(key)
    if f is not None:
        return fp8.linear(x, f)
    return ops.gemm(_2d(x.contiguous()), w, b)


def rms_norm_train_forward(self, hidden_states):
    x = hidden_states.contiguous()
    return ops.rms_norm(_2d(x), self.weight, self.variance_epsilon).view(x.shape)


# ---- MLP ------------------------------------------------------------------------------------
def mlp_forward(self, x):
    shape = x.shape
    gu = _proj(self, "_tkreg_fp8_gate_up", x, self._tkreg_gate_up, self._tkreg_gate_up_bias)
    down = self.down_proj
    if "_tkreg_fp8_down" in self.__dict__:
        return fp8.linear(fp8.swiglu_quant(gu), self._tkreg_fp8_down).view(*shape[:-1], -1)
    return ops.gemm(ops.silu_and_mul(gu), down.weight, down.bias).view(*shape[:-1], -1)


# ---- attention ------------------------------------------------------------------------------
def attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None,
                      position_ids=None, **kwargs):
    B, S, _ = hidden_states.shape
    T, D, HQ, HK = B * S, self.head_dim, self._tkreg_hq, self._tkreg_hk
    qkv = _proj(self, "_tkreg_fp8_qkv", hidden_states, self._tkreg_qkv, self._tkreg_qkv_bias)
    q, k, v = qkv.view(T, HQ + 2 * HK, D).split([HQ, HK, HK], 1)
    if position_ids is None:
        seen = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(S, device=qkv.device) + seen
    positions = position_ids.expand(B, S).reshape(-1).long()
    qn, kn, eps = (self.q_norm.weight, self.k_norm.weight, self.q_norm.variance_epsilon) if self._tkreg_qk_norm \
        else (None, None, 1e-6)
    if getattr(past_key_values, "plan", None) is not None:
        # one kernel: qk-norm, rotary and the K/V write into the pages, reading qkv in place
        cache = past_key_values
        step = cache.plan(attention_mask, B, S, k) if self.layer_idx == 0 else cache._step
        q, k = ops.qk_norm_rope_cache(q, k, v, positions, self._tkreg_cos_sin, q_weight=qn, k_weight=kn, eps=eps,
                                      k_cache=cache.k[self.layer_idx], v_cache=cache.v[self.layer_idx],
                                      slot_mapping=step.slots)
        out = cache.attend(self.layer_idx, q, k, v, step, self.scaling)
    else:
        q, k = ops.qk_norm_rope_cache(q, k, v, positions, self._tkreg_cos_sin, q_weight=qn, k_weight=kn, eps=eps)
        if past_key_values is not None:
            k, v = past_key_values.update(k.view(B, S, HK, D).transpose(1, 2), v.view(B, S, HK, D).transpose(1, 2),
                                          self.layer_idx)
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        else:
            k, v = k.view(B, S, HK, D), v.view(B, S, HK, D)
        out = _contiguous(q.view(B, S, HQ, D), k, v, attention_mask, self.scaling)
    o = self.o_proj
    return _proj(self, "_tkreg_fp8_o", out.reshape(T, HQ * D), o.weight, o.bias).view(B, S, -1), None


def _contiguous(q, k, v, mask, scale):
    try:
        if mask is not None and mask.dim() != 2:
            raise attn.Unsupported("a 4-D mask (a StaticCache, or a custom mask function)")
        return attn.contiguous(q, k, v, mask, scale)
    except attn.Unsupported as e:
        attn._warn_once(str(e))
        return attn.torch_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, scale)


# ---- decoder layer --------------------------------------------------------------------------
def _recording() -> bool:
    """Whether transformers is collecting per-layer hidden states (output_hidden_states): then a
    layer's output must not be overwritten later, so the in-place fusions step aside."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return True
    c = _active_collector.get()
    return c is not None and "hidden_states" in c


def decoder_layer_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                          use_cache=False, position_embeddings=None, **kwargs):
    owned = self.__dict__.pop("_tkreg_owned", None) is hidden_states and not _recording()
    x = self.input_layernorm(hidden_states)
    a, _ = self.self_attn(hidden_states=x, attention_mask=attention_mask, position_ids=position_ids,
                          past_key_values=past_key_values, use_cache=use_cache,
                          position_embeddings=position_embeddings, **kwargs)
    post = self.post_attention_layernorm
    if owned and getattr(post, "_tkreg_norm", False):
        residual = hidden_states                                   # ours: produced by the previous layer
        h, x = residual, _fused_add(a.contiguous(), residual, post)
    else:
        h = hidden_states + a
        x = post(h)
    m = self.mlp(x)
    nxt = self._tkreg_next_norm
    if nxt is not None and not _recording():
        nxt._tkreg_stash = (h, _fused_add(m.contiguous(), h, nxt))   # h += m; the next norm's output
        if self._tkreg_next_layer is not None:
            self._tkreg_next_layer._tkreg_owned = h
        return h
    return h + m
