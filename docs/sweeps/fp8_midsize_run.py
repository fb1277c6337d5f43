"""Time every sweep config at the mid sizes (queued GPU time) beside a same-size device copy."""
import sys

import torch

import tkreg
from tkreg.bench.timing import MID_HIDDEN, MID_TOKENS, copy_sets, queued_ms, rotations

sys.path.insert(0, ".")
from docs.sweeps.fp8_midsize import CONFIGS  # noqa: E402

print("op shape copy_us shipped_us " + " ".join(f"cfg{i}={c}" for i, c in enumerate(CONFIGS)))
for op, silu in (("quant", False), ("silu_quant", True)):
    for m in MID_TOKENS:
        for h in MID_HIDDEN:
            n = 2 * h if silu else h
            nbytes = m * n * 2 + m * h + 4 * m * (h // 128)
            sets = rotations(lambda: (torch.randn(m, n, dtype=torch.bfloat16, device="cuda"),), nbytes)
            copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            ship = queued_ms((lambda x: tkreg.ops.silu_and_mul_quant_fp8(x)) if silu else
                             (lambda x: tkreg.ops.per_token_group_quant_fp8(x)), sets)
            cfgs = [queued_ms(lambda x: tkreg.call(f"sw.{op}", x, cfg=i), sets) for i in range(len(CONFIGS))]
            print(op, f"{m}x{h}", f"{copy * 1e3:.1f}", f"{ship * 1e3:.1f} ({copy / ship:.2f})",
                  " ".join(f"{c * 1e3:.1f}({copy / c:.2f})" for c in cfgs), flush=True)
