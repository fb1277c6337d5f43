"""tkreg's sparse-MoE blocks against the stock transformers blocks, tiny random configs on the CPU
(TKREG_FALLBACK=reference runs the ops' torch references): the same experts, outputs within bf16
tolerance, the stock forward convention, whole models with the blocks swapped in, and the
configs tkreg refuses."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tkreg.integrations.transformers import moe  # noqa: E402
from tkreg.integrations.transformers._support import Unsupported  # noqa: E402

from .conftest import MOE_FAMILIES as FAMILIES, MOE_H as H, MOE_K as K, close, close_tokens  # noqa: E402
from .conftest import moe_blocks as blocks, moe_model as model, swap_moe_blocks as swap  # noqa: E402
from .conftest import tie_free_ids, tie_free_input  # noqa: E402

pytestmark = pytest.mark.usefixtures("reference_ops")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tokens", [1, 7, 40, 100])   # <= 64: the masked GEMMs, above: contiguous
def test_block_matches_stock(family, tokens):
    m = model(family)
    blk = blocks(m)[0]
    x = tie_free_input(blk.gate, (1, tokens, H))
    with torch.no_grad():
        ref = blk(x)
        out = moe.patch_moe_block(blk, m.config)(x)
    assert type(out) is torch.Tensor and out.shape == x.shape and out.dtype == torch.bfloat16
    assert ref.float().abs().max() > 0.1      # the weights give O(1) outputs, not a trivial pass
    close(out, ref)


@pytest.mark.parametrize("family", FAMILIES)
def test_whole_model_logits(family):
    m = model(family)
    ids, ref = tie_free_ids(m, (2, 9))
    keys = set(m.state_dict())
    swap(m)
    assert not blocks(m) and sum(isinstance(b, moe.TkregMoeBlock) for b in m.modules()) == 2
    assert set(m.state_dict()) == keys        # the stock submodules stay, so checkpoints load as before
    with torch.no_grad():
        out = m(ids).logits
    close_tokens(out, ref)


@pytest.mark.parametrize("family", ["qwen3", "mixtral"])   # DeepSeek-V3 records no router logits
def test_router_logits_recorded(family):
    m = model(family)
    ids = torch.randint(0, 96, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = m(ids, output_router_logits=True).router_logits
        swap(m)
        out = m(ids, output_router_logits=True).router_logits
    assert len(out) == len(ref) == 2
    assert torch.equal(out[0], ref[0])     # layer 0 sees the same input; layer 1 the MoE's rounding
    close(out[1], ref[1])


def test_routing_read_from_each_family():
    q = moe.patch_moe_block(blocks(model("qwen3", norm_topk_prob=False))[0], None).routing
    assert (q.k, q.renormalize, q.scaling, q.groups) == (K, False, 1.0, ())
    mx = moe.patch_moe_block(blocks(model("mixtral"))[0], None).routing
    assert (mx.renormalize, mx.groups) == (True, ())
    d = moe.patch_moe_block(blocks(model("deepseek_v3"))[0], None).routing
    assert (d.k, d.renormalize, d.scaling, d.fp32_logits, d.groups) == (K, True, 2.5, True, (4, 2))


def test_qwen3_without_renormalize_matches_stock():
    m = model("qwen3", norm_topk_prob=False)
    blk = blocks(m)[0]
    x = tie_free_input(blk.gate, (2, 5, H))
    with torch.no_grad():
        close(moe.patch_moe_block(blk, m.config)(x), blk(x))


@pytest.mark.parametrize("family", FAMILIES)
def test_masked_and_contiguous_layouts_agree(family, monkeypatch):
    m = model(family)
    p = moe.patch_moe_block(blocks(m)[0], m.config)
    x = tie_free_input(p.gate, (2, 12, H))
    with torch.no_grad():
        monkeypatch.setattr(moe, "MASKED_MAX_TOKENS", 0)
        contiguous = p(x)
        monkeypatch.setattr(moe, "MASKED_MAX_TOKENS", 10**6)
        masked = p(x)
    close(masked, contiguous, 1e-3)


def test_masked_layout_rows():
    idx = torch.tensor([[2, 0], [2, 1], [0, 2]], dtype=torch.int32)
    m = moe._masked_layout(idx, 4)
    assert m.expert_offsets.tolist() == [0, 3, 6, 9, 12] and m.counts.tolist() == [2, 1, 3, 0]
    assert m.row_of_slot.tolist() == [[6, 0], [7, 3], [1, 8]]     # e * T + rank among e's slots
    assert [int(s) for s in m.slot_of_row[[0, 1, 3, 6, 7, 8]]] == [1, 4, 3, 0, 2, 5]
    assert int((m.slot_of_row >= 0).sum()) == 6


def test_token_chunks_give_the_same_output():
    m = model("deepseek_v3")
    p = moe.patch_moe_block(blocks(m)[0], m.config)
    x = tie_free_input(p.gate, (1, 10, H))
    with torch.no_grad():
        whole = p(x)
        p.max_tokens = 3
        assert torch.equal(p(x), whole)


def test_shared_expert_packed_once_and_after_moves():
    m = model("deepseek_v3")
    swap(m)
    p = next(mod for mod in m.modules() if isinstance(mod, moe.TkregMoeBlock))
    s = p.shared_experts

    def shares():
        base = p.shared_gate_up
        n = s.gate_proj.weight.shape[0]
        return (s.gate_proj.weight.data_ptr() == base.data_ptr()
                and s.up_proj.weight.data_ptr() == base[n:].data_ptr())
    assert shares()
    x = tie_free_input(p.gate, (1, 4, H))
    with torch.no_grad():
        before = p(x)
        m._apply(lambda t: t.clone())         # what .to(device) does: every tensor replaced
        assert shares()
        assert torch.equal(p(x), before)


def test_training_with_grad_runs_the_stock_forward():
    m = model("mixtral")
    blk = blocks(m)[0]
    p = moe.patch_moe_block(blk, m.config).train()
    x = tie_free_input(blk.gate, (1, 5, H)).requires_grad_()
    out = p(x)
    assert out.requires_grad
    out.float().sum().backward()
    assert blk.experts.gate_up_proj.grad is not None


@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_without_graph_breaks(family):
    m = model(family)
    p = moe.patch_moe_block(blocks(m)[0], m.config)
    x = tie_free_input(p.gate, (1, 6, H))
    with torch.no_grad():
        assert torch.equal(torch.compile(p, fullgraph=True, backend="aot_eager")(x), p(x))


def test_empty_input():
    m = model("qwen3")
    p = moe.patch_moe_block(blocks(m)[0], m.config)
    with torch.no_grad():
        out = p(torch.zeros(1, 0, H, dtype=torch.bfloat16))
    assert out.shape == (1, 0, H)


@pytest.mark.parametrize("family,kw,dtype,why", [
    ("qwen3", {}, torch.float16, "float16"),
    ("mixtral", {}, torch.float32, "float32"),
    ("qwen3", {"hidden_act": "gelu"}, torch.bfloat16, "hidden_act 'gelu'"),
    ("qwen3", {"moe_intermediate_size": 36}, torch.bfloat16, "% 8"),
    ("deepseek_v3", {"n_group": 8, "topk_group": 4}, torch.bfloat16, "groups of >= 2 experts"),
    ("qwen3", {"num_experts_per_tok": 8, "num_experts": 8}, torch.bfloat16, None),   # served: k == E
])
def test_unsupported_configs(family, kw, dtype, why):
    m = model(family, dtype=dtype, **kw)
    blk = blocks(m)[0]
    if why is None:
        moe.patch_moe_block(blk, m.config)
        return
    with pytest.raises(Unsupported, match=why.replace("(", r"\(")):
        moe.patch_moe_block(blk, m.config)


def test_unsupported_module_and_cpu_without_fallback(monkeypatch):
    with pytest.raises(Unsupported, match="tkreg serves the sparse-MoE blocks"):
        moe.patch_moe_block(torch.nn.Linear(4, 4), None)
    m = model("qwen3")
    monkeypatch.delenv("TKREG_FALLBACK")
    with pytest.raises(Unsupported, match="CUDA"):
        moe.patch_moe_block(blocks(m)[0], m.config)


def test_recognized_names_are_the_stock_classes():
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as d
    from transformers.models.mixtral import modeling_mixtral as mx
    from transformers.models.qwen3_moe import modeling_qwen3_moe as q
    assert set(moe.MOE_BLOCKS) == {q.Qwen3MoeSparseMoeBlock.__name__, mx.MixtralSparseMoeBlock.__name__,
                                   d.DeepseekV3MoE.__name__}
