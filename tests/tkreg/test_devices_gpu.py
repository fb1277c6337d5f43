"""tkreg across devices and threads: a decoder layer (rms_norm, gemm, rotary, flash
attention, an MoE block with routing and grouped GEMMs) driven from two threads at once, one GPU
each when there are two (both on cuda:0 otherwise), equal to the single-threaded result; a call
mixing devices refused before launch; a torch.distributed (NCCL) tensor-parallel MLP across two
GPUs built from tkreg's gemm and silu_and_mul.  The whole `-m gpu` suite runs on another device
with TKREG_TEST_DEVICE=1 (tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

import tkreg

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
ops = tkreg.ops
TWO = torch.cuda.is_available() and torch.cuda.device_count() >= 2
H, HEADS, D, E, K, INTER = 1024, 8, 128, 8, 2, 512


def layer_weights(dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, device=dev, generator=g) * shape[-1] ** -0.5).to(BF16)
    pos = torch.arange(4096, device=dev, dtype=torch.float32)[:, None] * torch.logspace(0, -4, D // 2, device=dev)
    return dict(norm=torch.ones(H, dtype=BF16, device=dev), qkv=rnd(3 * H, H), o=rnd(H, H), router=rnd(E, H),
                w13=rnd(E, 2 * INTER, H), w2=rnd(E, H, INTER), cos_sin=torch.cat([pos.cos(), pos.sin()], 1).to(BF16))


def decoder_layer(x, w):
    t = x.shape[0]
    h = ops.rms_norm(x, w["norm"])
    q, k, v = ops.gemm(h, w["qkv"]).split(H, dim=1)
    q, k = q.contiguous(), k.contiguous()
    ops.rotary_embedding(torch.arange(t, device=x.device), q, k, w["cos_sin"])
    att, _ = ops.flash_attention(q.view(1, t, HEADS, D), k.view(1, t, HEADS, D), v.reshape(1, t, HEADS, D), causal=True)
    x = x + ops.gemm(att.view(t, H), w["o"])
    h = ops.rms_norm(x, w["norm"])
    idx, wts = ops.topk_gate(ops.gemm(h, w["router"]).float(), K, renormalize=True)
    m = ops.moe_mapping(idx, E, 128)
    y = ops.grouped_gemm(ops.silu_and_mul(ops.grouped_gemm(ops.moe_expand(h, m), w["w13"], m.expert_offsets)),
                         w["w2"], m.expert_offsets)
    return x + ops.moe_combine(y, m, wts)


def test_two_threads_drive_a_decoder_layer_each():
    devs = ["cuda:0", "cuda:1"] if TWO else ["cuda:0", "cuda:0"]
    inputs = [torch.randn(256, H, device=d, generator=torch.Generator(device=d).manual_seed(i)).to(BF16)
              for i, d in enumerate(devs)]
    weights = [layer_weights(d) for d in devs]
    want = [decoder_layer(x, w) for x, w in zip(inputs, weights)]
    torch.cuda.synchronize()
    errors, got = [], [None, None]

    def run(i):
        try:
            with torch.cuda.device(devs[i]):
                s = torch.cuda.Stream()          # each thread on its own stream
                with torch.cuda.stream(s):
                    for _ in range(1000):
                        y = decoder_layer(inputs[i], weights[i])
                s.synchronize()
                got[i] = y
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for i in range(2):
        assert got[i].device == inputs[i].device
        err = ((got[i].double() - want[i].double()).norm() / want[i].double().norm()).item()
        assert err <= 1e-4, (i, err)   # deterministic kernels: 0 unless a split-K GEMM sums in another order


@pytest.mark.skipif(not TWO, reason="needs two GPUs")
def test_mixed_devices_are_refused_before_launch():
    a = torch.randn(64, 256, dtype=BF16, device="cuda:0")
    b = torch.randn(128, 256, dtype=BF16, device="cuda:1")
    with pytest.raises(ValueError, match="share one CUDA device"):
        ops.gemm(a, b)
    with torch.cuda.device(0):   # cuda:1 tensors while cuda:0 is current: run on cuda:1
        w = layer_weights("cuda:1")
        x = torch.randn(128, H, dtype=BF16, device="cuda:1")
        assert decoder_layer(x, w).device == x.device


TP = r"""
import os, torch, torch.distributed as dist, tkreg
rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
dist.init_process_group("nccl")
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(512, 2048, device="cuda", generator=g).to(torch.bfloat16)
w1 = (torch.randn(2 * 4096, 2048, device="cuda", generator=g) * 2048 ** -0.5).to(torch.bfloat16)  # [gate; up]
w2 = (torch.randn(2048, 4096, device="cuda", generator=g) * 4096 ** -0.5).to(torch.bfloat16)
full = tkreg.ops.gemm(tkreg.ops.silu_and_mul(tkreg.ops.gemm(x, w1)), w2)
n = 4096 // 2   # column-parallel w1 (this rank's gate and up rows), row-parallel w2
w1_r = torch.cat([w1[rank * n:(rank + 1) * n], w1[4096 + rank * n:4096 + (rank + 1) * n]])
part = tkreg.ops.gemm(tkreg.ops.silu_and_mul(tkreg.ops.gemm(x, w1_r)), w2[:, rank * n:(rank + 1) * n].contiguous())
y = part.float()
dist.all_reduce(y)
err = ((y - full.float()).norm() / full.float().norm()).item()
print(f"rank {rank} rel err {err:.2e}", flush=True)
assert err < 1e-2
dist.destroy_process_group()
"""


@pytest.mark.skipif(not TWO, reason="needs two GPUs")
def test_tensor_parallel_mlp_over_nccl(tmp_path):
    script = tmp_path / "tp.py"
    script.write_text(TP)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", str(script)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("rel err") == 2
