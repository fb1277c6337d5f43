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
    from tkreg.bench import timing
    key = f"{nbytes}{'q' if queued else ''}"
    if key not in cache:
        cache[key] = timing.copy_ms(nbytes, timing.queued_ms if queued else timing.gpu_ms)
    return cache[key]


def cfg_row(op: str, ncfg: int, comp, sets, nbytes: int, shape) -> dict:
    """Every cfg of sweep op `op` and torch.compile (`comp`) timed in turn (queued, 5 paired runs)
    beside a same-size device copy: {shape, of_copy, vs_compile, copy_ms}, also printed."""
    import tkreg
    from tkreg.bench.timing import copy_ms, queued_ms, queued_ms_paired
    fns = [lambda *a, c=c: tkreg.call(op, *a, cfg=c) for c in range(ncfg)] + [comp]
    ms = queued_ms_paired(fns, sets, reps=30, runs=5)
    copy = copy_ms(nbytes, queued_ms)
    names = [f"cfg{c}" for c in range(ncfg)] + ["compile"]
    row = dict(shape=list(shape), of_copy={n: copy / v for n, v in zip(names, ms)},
               vs_compile={n: ms[-1] / v for n, v in zip(names, ms)}, copy_ms=copy)
    print(row["shape"], " ".join(f"{n}:{v:.3f}/{row['vs_compile'][n]:.3f}" for n, v in row["of_copy"].items()), flush=True)
    return row


def sweep_rows(op: str, ncfg: int, comp, shapes, make, nbytes_of) -> list:
    """cfg_row for each shape: input sets from make(shape) rotated past L2, nbytes_of(shape) moved."""
    from tkreg.bench.timing import rotations
    rows = []
    for shape in shapes:
        nbytes = nbytes_of(shape)
        sets = rotations(lambda: make(shape), nbytes)
        rows.append(cfg_row(op, ncfg, comp, sets, nbytes, shape))
        del sets
    return rows


def sweep_op(name: str, base, factory, cfgs, rule: str, dtype: str, extra=None):
    """A sweep OpSpec: `base` (a shipped OpSpec) narrowed to `dtype`, one variant per cfg (rule
    `cfg == i and <rule>`), the `cfg` scalar added, sm_90a only; extra(c) adds params per cfg."""
    from tkreg.spec import OpSpec, Scalar, Variant
    t = base.tensors
    x = type(t[0])(t[0].name, t[0].shape, dtypes=(dtype,), role=t[0].role)
    return OpSpec(name=name, doc=base.doc, tensors=(x,) + t[1:], scalars=base.scalars + (Scalar("cfg", "int32", 0),),
                  factory=factory, archs=("sm_90a",), reference=base.reference,
                  variants=tuple(Variant(dict(c, **(extra(c) if extra else {})), rule=f"cfg == {i} and {rule}")
                                 for i, c in enumerate(cfgs)))


def transpose_sweep(op: str, cfgs, shapes, out: str, cases=((1, 8, 8), (1, 40, 1416), (3, 3000, 264), (1, 4104, 2056),
                                                             (2, 1024, 7168), (1, 3000, 7168), (1, 72, 24))):
    """Run a 2-byte transpose sweep: every cfg bit for bit against x.transpose(1, 2), then timed in
    turn beside torch.compile of the reference and a same-size copy; JSON to `out`."""
    import json
    import tkreg
    from tkreg import reference
    from tkreg.bench.timing import compiled
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)
    for b, m, n in cases:
        x = torch.randn(b, m, n, device="cuda").half()
        want = x.transpose(1, 2).contiguous()
        for c in range(len(cfgs)):
            res["checks"].append(dict(m=m, n=n, cfg=c, d=diff(tkreg.call(op, x, cfg=c), want)))
    print("checks", len(res["checks"]), "bad", [r for r in res["checks"] if r["d"]], flush=True)
    res["rows"] = sweep_rows(op, len(cfgs), compiled(reference.batched_transpose), shapes,
                             lambda s: (torch.randn(1, *s, device="cuda").half(),), lambda s: 4 * s[0] * s[1])
    json.dump(res, open(out, "w"), indent=1)


# ---- the norm sweeps (r23n.py, r24n.py): rms_norm + fused_add_rms_norm, bf16, one variant per kernel
def norm_specs(cfg, ncfg: int, ns) -> tuple:
    """sw.rn / sw.fa: the shipped norm specs narrowed to bf16, one variant per distinct kernel of
    cfg(i, n) (i < ncfg, n in ns), its rule naming every (cfg, N) it serves."""
    from kernels_src import norm as Nm
    from tkreg.spec import OpSpec, Scalar, Variant
    by = {}
    for i in range(ncfg):
        for n in ns:
            by.setdefault(tuple(sorted(cfg(i, n).items())), []).append(f"(cfg == {i} and N == {n})")
    variants = tuple(Variant(dict(k, dtype="bfloat16"), rule=" or ".join(r)) for k, r in by.items())
    out = []
    for name, short in (("tkreg.rms_norm", "sw.rn"), ("tkreg.fused_add_rms_norm", "sw.fa")):
        spec = next(s for s in Nm.SPECS if s.name == name)
        t = spec.tensors
        x = type(t[0])(t[0].name, t[0].shape, dtypes=("bfloat16",), role=t[0].role)
        out.append(OpSpec(name=short, doc=spec.doc, tensors=(x,) + t[1:], scalars=spec.scalars + (Scalar("cfg", "int32", 0),),
                          factory=spec.factory, archs=("sm_90a",), reference=spec.reference, variants=variants))
    return tuple(out)


def norm_sweep(cfg, ncfg: int, ns, shapes) -> tuple:
    """(specs, run) of a norm sweep module (r23n.py, r24n.py, r28n.py, r29n.py): its cfg(i, n),
    cfg count, hidden sizes and timed shapes are all that differ."""
    return (lambda: norm_specs(cfg, ncfg, ns)), (lambda out: norm_run(ncfg, ns, shapes, out))


def norm_run(ncfg: int, ns, shapes, out: str):
    """Every cfg against the torch references (max |diff| in output ulps; the fused residual must be
    exact) on odd M and M = 0, then timed in turn beside torch.compile and a same-size copy."""
    import json
    import tkreg
    from tkreg import reference
    from tkreg.bench.timing import compiled
    res = {"checks": [], "rows": []}
    torch.manual_seed(0)

    def ulps(a, b):
        return int((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max()) if a.numel() else 0

    for m in (0, 1, 37, 4097):
        for n in ns:
            x = torch.randn(m, n, device="cuda").mul(3).to(bf16)
            r0 = torch.randn(m, n, device="cuda").to(bf16)
            w = torch.randn(n, device="cuda").to(bf16)
            ref = reference.rms_norm(x, w)
            rx, rr = x.clone(), r0.clone()
            reference.fused_add_rms_norm(rx, rr, w)
            for c in range(ncfg):
                got = tkreg.call("sw.rn", x, w, cfg=c)
                fx, fr = x.clone(), r0.clone()
                tkreg.call("sw.fa", fx, fr, w, cfg=c)
                res["checks"].append(dict(m=m, n=n, cfg=c, rn=ulps(got, ref), fa_x=ulps(fx, rx), fa_r=ulps(fr, rr)))
    print("checks", len(res["checks"]), "worst", max(max(r["rn"], r["fa_x"], r["fa_r"]) for r in res["checks"]),
          "residual exact", all(r["fa_r"] == 0 for r in res["checks"]), flush=True)

    def rnd(*shape):
        return torch.randn(*shape, dtype=bf16, device="cuda")

    for op, ref, make, nb in (("sw.rn", reference.rms_norm, lambda s: (rnd(*s), rnd(s[1])), 4),
                              ("sw.fa", reference.fused_add_rms_norm, lambda s: (rnd(*s), rnd(*s), rnd(s[1])), 8)):
        res["rows"] += [dict(op=op, **r) for r in sweep_rows(op, ncfg, compiled(ref), shapes, make,
                                                             lambda s, nb=nb: nb * s[0] * s[1])]
    json.dump(res, open(out, "w"), indent=1)
