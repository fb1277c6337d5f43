"""What the quant sweep harnesses (quant_r2_run.py, quant_r3_run.py) share: bit-level comparison of
outputs, the inputs they draw, and a same-size device copy timed once per byte count.  Imported as a
sibling module (running a harness as a script puts this folder on sys.path)."""
import torch

bf16 = torch.bfloat16


def bits(t):
    t = t.contiguous()
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view({2: torch.int16, 4: torch.int32}[t.dtype.itemsize])


def nan_mask(t):
    return torch.isnan(t) if t.dtype.is_floating_point and t.dtype.itemsize > 1 else torch.zeros_like(t, dtype=torch.bool)


def diff(a, b):
    """(#elements whose bits differ, ignoring positions where both are NaN), as int; -1: shapes differ."""
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    if len(a) != len(b):
        return -1
    n = 0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return -1
        d = bits(x) != bits(y)
        d &= ~(nan_mask(x) & nan_mask(y))
        n += int(d.sum())
    return n


def rnd(*shape, device="cuda"):
    return (torch.randn(*shape, device=device) * 3).to(bf16)


def cb(m, k):
    """Bytes of a per-channel scale tensor: one fp32 per 128 tokens and channel."""
    return 4 * (-(-m // 128)) * k


def copy_ms(cache: dict, nbytes: int, queued=False) -> float:
    """A device copy of `nbytes` (read + write), timed once per size and timer, kept in `cache`."""
    from tkreg.bench.timing import copy_sets, gpu_ms, queued_ms
    key = f"{nbytes}{'q' if queued else ''}"
    if key not in cache:
        cache[key] = (queued_ms if queued else gpu_ms)(lambda s, d: d.copy_(s), copy_sets(nbytes))
    return cache[key]


def cfg_row(op: str, ncfg: int, comp, sets, nbytes: int, shape) -> dict:
    """Every cfg of sweep op `op` and torch.compile (`comp`) timed in turn (queued, 5 paired runs)
    beside a same-size device copy: {shape, of_copy, vs_compile, copy_ms}, also printed."""
    import tkreg
    from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired
    fns = [lambda *a, c=c: tkreg.call(op, *a, cfg=c) for c in range(ncfg)] + [comp]
    ms = queued_ms_paired(fns, sets, reps=30, runs=5)
    copy = queued_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
    names = [f"cfg{c}" for c in range(ncfg)] + ["compile"]
    row = dict(shape=list(shape), of_copy={n: copy / v for n, v in zip(names, ms)},
               vs_compile={n: ms[-1] / v for n, v in zip(names, ms)}, copy_ms=copy)
    print(row["shape"], " ".join(f"{n}:{v:.3f}/{row['vs_compile'][n]:.3f}" for n, v in row["of_copy"].items()), flush=True)
    return row
