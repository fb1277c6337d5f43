"""tkreg.kernelize on the GPU with the real kernels (bf16, random weights built from configs, no
download): logits of a padded 2 x 333-token batch within 2e-2 relative of the stock model; 64
decode steps through TkregPagedCache teacher-forced on the stock model's greedy tokens, each
step's logits within 2e-2 and top-1 equal on >= 95% of positions; greedy decoding under the
CUDA-graph helper equals eager decoding through the same cache."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tkreg  # noqa: E402
from tkreg.integrations.transformers import TkregPagedCache, greedy_generate  # noqa: E402

from .conftest import FAMILIES, GPU, GPU_L as L, dense_config, gpu_batch as batch, rel, twins  # noqa: E402

pytestmark = pytest.mark.gpu
STEPS = 64


def pair(family):
    stock, model = twins(dense_config(family, GPU), device="cuda")
    tkreg.kernelize(model)
    assert not model.tkreg_report.kept, str(model.tkreg_report)
    return stock, model


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_logits_padded_batch(family):
    stock, model = pair(family)
    ids, mask = batch()
    with torch.no_grad():
        a = stock(ids, attention_mask=mask).logits
        b = model(ids, attention_mask=mask).logits
    err = rel(a, b, mask.bool())
    print(f"{family}: prefill 2 x {L} max rel err {err:.2e}")
    assert err < 2e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_paged_decode_teacher_forced(family):
    stock, model = pair(family)
    ids, mask = batch()
    out = stock.generate(ids, attention_mask=mask, max_new_tokens=STEPS, do_sample=False, eos_token_id=None,
                         pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    want = torch.stack(out.logits, 1)                          # [2, STEPS, V]: stock's step logits
    toks = out.sequences[:, L:]
    cache = TkregPagedCache(model.config, max_cache_len=L + STEPS, page_size=16)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    got = []
    with torch.no_grad():
        lg = model(ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True).logits[:, -1]
        got.append(lg)
        last = pos[:, -1]
        for t in range(STEPS - 1):
            last = last + 1
            lg = model(toks[:, t:t + 1], position_ids=last[:, None], past_key_values=cache, use_cache=True).logits[:, -1]
            got.append(lg)
    got = torch.stack(got, 1)
    errs = [rel(want[:, t], got[:, t]) for t in range(STEPS)]
    top1 = (want.argmax(-1) == got.argmax(-1)).float().mean().item()
    free = greedy_generate(model, ids, mask, max_new_tokens=STEPS, cuda_graph=False)[:, L:]
    diff = (free != toks).nonzero()
    first = None if not len(diff) else tuple(diff[0].tolist())
    if first is not None:
        b, t = first
        row = want[b, t].float()
        first = (b, t, f"stock margin {(row.max() - row[free[b, t]]).item():.3e} of range {(row.max() - row.min()).item():.3e}")
    print(f"{family}: decode max rel err {max(errs):.2e}, top-1 equal {top1:.1%}, first free-running divergence {first}")
    assert max(errs) < 2e-2 and top1 >= 0.95


@pytest.mark.parametrize("family", ("llama", "qwen3"))
def test_cuda_graph_decode_equals_eager(family):
    _, model = pair(family)
    ids, mask = batch()
    eager = greedy_generate(model, ids, mask, max_new_tokens=16, cuda_graph=False)
    graphed = greedy_generate(model, ids, mask, max_new_tokens=16, cuda_graph=True)
    assert torch.equal(eager, graphed)


def test_generate_with_paged_cache_matches_greedy_helper():
    _, model = pair("qwen3")
    ids, mask = batch()
    got = model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, eos_token_id=None,
                         pad_token_id=0, past_key_values=TkregPagedCache(model.config, max_cache_len=L + 16))
    assert torch.equal(got, greedy_generate(model, ids, mask, max_new_tokens=16, cuda_graph=False))
