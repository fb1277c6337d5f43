"""tkreg.flash_attention's autograd paths on the CPU: `sdpa_gradients` (what a GPU runs: the forward
recomputed by torch SDPA and differentiated) against the reference's formulas from the saved out and
lse, for GQA, causal bottom-right alignment with Sq != Sk (including rows that see no key), and a
custom scale."""
from __future__ import annotations

import pytest
import torch

from tkreg import reference
from tkreg.ops.attention import sdpa_gradients
from tkreg.reference.attention_backward import flash_attention_backward as formulas


@pytest.mark.parametrize("sq,sk,hq,hk,causal,scale", [(9, 9, 4, 2, True, 0.0), (7, 12, 4, 1, True, 0.0),
                                                     (12, 5, 2, 2, True, 0.0), (6, 10, 4, 4, False, 0.3)])
def test_sdpa_gradients_match_the_formulas(sq, sk, hq, hk, causal, scale, seed):
    q, k, v = (torch.randn(2, s, h, 64, dtype=torch.float64) for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    out, lse = reference.flash_attention(q, k, v, causal, scale)
    dout = torch.randn_like(out)
    got = sdpa_gradients(dout, q, k, v, causal, scale)
    want = formulas(dout, q, k, v, out, lse, causal, scale)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=name)   # the formulas run in fp32
