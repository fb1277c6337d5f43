"""tkreg's layers under Hugging Face `kernels` on the GPU with the real kernels (bf16, random
weights built from configs, no download): `kernels.kernelize(model, mode=Mode.INFERENCE,
device="cuda")` with tkreg's mapping puts every RMSNorm and the rotary on tkreg (the packs'
compute capability selects them), and the logits of a padded 2 x 333-token batch stay within
2e-2 relative of the stock model.  Skipped without `kernels`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")

from .conftest import GPU, dense_config, gpu_batch, hf_kernelize, logits, rel, twins  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_kernel_downloads"),
              pytest.mark.filterwarnings("ignore:\\s*No kernel mapping found for layer `SiLU`:UserWarning")]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_kernelize_cuda_matches_stock(family, calls, funcs):
    stock, model = twins(dense_config(family, GPU), device="cuda", attn=None)
    ids, mask = gpu_batch()
    with torch.no_grad():
        ref = logits(stock, ids, mask)
        hf_kernelize(model, funcs, device="cuda")
        out = logits(model, ids, mask)
    layers = model.config.num_hidden_layers
    qk = 2 * layers if family == "qwen3" else 0
    assert calls == {"rms_norm": 2 * layers + 1 + qk, "rotary_embedding": layers}
    err = rel(ref, out, mask.bool())
    assert err < 2e-2, f"{family}: {err:.3g}"
