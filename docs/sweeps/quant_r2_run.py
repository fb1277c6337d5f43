"""Issue #17 round 2 on the H200: every sw2.<op> cfg checked bit-exact against cfg 0 (the shipped
kernel) and the torch reference, then timed beside a same-size device copy.
`TKREG_PACKS=/path/the pack built from docs/sweeps/quant_r2.py python3 run2.py OUT.json [op,op]` (cwd outside the repo)."""
import json, sys, time, traceback
import torch
import tkreg
from tkreg.reference import quant as R
from tkreg.bench.timing import gpu_ms, queued_ms, rotations, copy_sets
from sweep_check import cb, copy_ms, diff, rnd

# must match quant_r2.NCFG (checked below against the pack's manifest)
NCFG = {"batched_transpose": 3, "per_channel_quant_fp8": 4, "per_channel_quant_fp8_transpose": 3,
        "silu_and_mul_per_channel_quant_fp8_transpose": 3, "per_token_group_quant_fp4": 4,
        "per_token_group_dequant_fp4": 4}
ONLY = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
out_path = sys.argv[1] if len(sys.argv) > 1 else "/dev/null"
res = {"errors": [], "checks": [], "rows": [], "copy": {}}
T0 = time.time()
bf16, fp8, u8 = torch.bfloat16, torch.float8_e4m3fn, torch.uint8
dev = "cuda"


def save():
    json.dump(res, open(out_path, "w"), indent=1)










# op -> (inputs(M, K) -> tuple, scalar kwargs, reference fn or None, bytes(M, K))


def fp4_inputs(m, k, full_range=False):
    q = torch.randint(0, 256, (m, k // 2), dtype=u8, device=dev)
    s = torch.randint(0, 256, (m, k // 32), dtype=u8, device=dev) if full_range else \
        torch.randint(110, 145, (m, k // 32), dtype=u8, device=dev)
    return q, s


def chan_q(m, k):
    x = rnd(m, k)
    return tkreg.call("tkreg.per_channel_quant_fp8", x)


OPS = {
    "batched_transpose": (lambda m, k: (rnd(1, m, k).to(fp8).view(u8),), {},
                          lambda x: R.batched_transpose(x), lambda m, k: 2 * m * k),
    "per_channel_quant_fp8": (lambda m, k: (rnd(m, k),), {"ue8m0": False}, R.per_channel_quant_fp8,
                              lambda m, k: 3 * m * k + cb(m, k)),
    "per_channel_quant_fp8_transpose": (lambda m, k: (rnd(m, k),), {"ue8m0": False}, R.per_channel_quant_fp8_transpose,
                                        lambda m, k: 3 * m * k + cb(m, k)),
    "silu_and_mul_per_channel_quant_fp8_transpose": (lambda m, k: (rnd(m, 2 * k),), {"ue8m0": False},
                                                     R.silu_and_mul_per_channel_quant_fp8_transpose,
                                                     lambda m, k: 5 * m * k + cb(m, k)),
    "silu_and_mul_backward_quant_fp8": (lambda m, k: (torch.randn(m, k, dtype=bf16, device=dev), rnd(m, 2 * k)),
                                        {"ue8m0": False}, R.silu_and_mul_backward_quant_fp8,
                                        lambda m, k: m * 2 * k * 2 + m * k * 2 + m * 2 * k + 4 * m * 2 * k // 128),
    "per_token_group_quant_fp4": (lambda m, k: (rnd(m, k),), {}, R.per_token_group_quant_fp4,
                                  lambda m, k: 2 * m * k + m * k // 2 + m * k // 32),
    "per_token_group_dequant_fp4": (fp4_inputs, {}, R.per_token_group_dequant_fp4,
                                    lambda m, k: m * k // 2 + m * k // 32 + 2 * m * k),
    "quant_e5m6": (lambda m, k: (rnd(m, k),), {"ue8m0": False}, R.quant_e5m6, lambda m, k: 2 * m * k + 3 * m * k // 2 + 4 * m),
    "per_channel_dequant_fp8": (chan_q, {}, R.per_channel_dequant_fp8, lambda m, k: 3 * m * k + cb(m, k)),
}
K_OF = {"silu_and_mul_per_channel_quant_fp8_transpose": 2048, "silu_and_mul_backward_quant_fp8": 2048}
MIDS = {"per_token_group_quant_fp4": [1024, 4096], "per_token_group_dequant_fp4": [1024, 4096],
        "per_channel_quant_fp8": [4096], "per_channel_quant_fp8_transpose": [4096], "batched_transpose": [4096],
        "silu_and_mul_per_channel_quant_fp8_transpose": [4096]}
LARGE = 16384


def call(name, args, kw, i):
    return tkreg.call(f"sw2.{name}", *args, **kw, cfg=i)


def check(name):
    make, kw, ref, _ = OPS[name]
    k = K_OF.get(name, 7168)
    cases = [(m, k, {}) for m in (1, 37, 4097, LARGE)]
    if name == "batched_transpose":
        cases += [(37, 1000, {}), (4096, 4104, {})]
    if "ue8m0" in kw:
        cases += [(4097, k, {"ue8m0": True})]
    for m, kk, extra in cases:
        try:
            torch.manual_seed(m * 7 + kk)
            args = make(m, kk) if name != "per_token_group_dequant_fp4" else fp4_inputs(m, kk, full_range=True)
            kw2 = {**kw, **extra}
            base = call(name, args, kw2, 0)
            rdiff = -2
            if ref is not None and m <= 4097:
                try:
                    rdiff = diff(base, ref(*args, **kw2))
                except Exception as e:
                    res["errors"].append(f"ref {name} {m}x{kk}: {type(e).__name__}: {e}"[:300])
            row = dict(op=name, shape=[m, kk], ue8m0=bool(extra.get("ue8m0", False)), ref_diff_cfg0=rdiff, cfg={})
            for i in range(1, NCFG[name]):
                try:
                    o = call(name, args, kw2, i)
                    torch.cuda.synchronize()
                    row["cfg"][i] = diff(o, base)
                    if ref is not None and m <= 4097 and row["cfg"][i]:
                        row.setdefault("ref_diff", {})[i] = diff(o, ref(*args, **kw2))
                except Exception as e:
                    row["cfg"][i] = f"ERR {type(e).__name__}: {e}"[:300]
            res["checks"].append(row)
            del args, base
        except Exception as e:
            res["errors"].append(f"check {name} {m}x{kk}: {type(e).__name__}: {e}"[:400])




def bench(name):
    make, kw, _, nb = OPS[name]
    k = K_OF.get(name, 7168)
    for m in [LARGE] + MIDS.get(name, []):
        try:
            nbytes = nb(m, k)
            sets = rotations(lambda: make(m, k), nbytes)
            queued = m < LARGE
            timer = queued_ms if queued else gpu_ms
            cp = copy_ms(res["copy"], nbytes, queued)
            row = dict(op=name, shape=[m, k], bytes=nbytes, timer="queued" if queued else "events",
                       copy_ms=cp, copy_gbs=nbytes / cp / 1e6, ms={}, gbs={}, pct_copy={})
            for i in range(NCFG[name]):
                try:
                    t = timer(lambda *a: call(name, a, kw, i), sets)
                    row["ms"][i], row["gbs"][i], row["pct_copy"][i] = t, nbytes / t / 1e6, round(100 * cp / t, 1)
                except Exception as e:
                    row["ms"][i] = f"ERR {type(e).__name__}: {e}"[:300]
            if not queued:   # events again for cfg 0 and copy: run-to-run spread
                row["copy_ms_again"] = gpu_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
                row["ms0_again"] = timer(lambda *a: call(name, a, kw, 0), sets)
            res["rows"].append(row)
            print(f"{name:45s} {m}x{k} copy {row['copy_gbs']:.0f} GB/s  "
                  + "  ".join(f"c{i}:{v}%" for i, v in row["pct_copy"].items()), flush=True)
            del sets
        except Exception as e:
            res["errors"].append(f"bench {name} {m}: {type(e).__name__}: {e}"[:400] + traceback.format_exc()[-300:])
        torch.cuda.empty_cache()


def check_pack():
    """NCFG must match the pack's manifest (quant_r2.NCFG at build time)."""
    import os, pathlib
    for d in os.environ.get("TKREG_PACKS", "").split(":"):
        f = pathlib.Path(d) / "sm_90a" / "manifest.json"
        if f.is_file():
            m = json.load(open(f))
            ops = m["ops"] if isinstance(m.get("ops"), list) else [dict(name=k, **v) for k, v in m["ops"].items()]
            have = {o["name"].split(".", 1)[1]: len(o["variants"]) for o in ops if o["name"].startswith("sw2.")}
            assert have == NCFG, (have, NCFG)
            return
    raise SystemExit("TKREG_PACKS must name the pack built from docs/sweeps/quant_r2.py")


if __name__ == "__main__":
    check_pack()
    res["device"] = torch.cuda.get_device_name()
    for name in NCFG:
        if ONLY and name not in ONLY:
            continue
        t = time.time()
        check(name)
        save()
        bench(name)
        save()
        print(f"  [{name} {time.time() - t:.1f}s, total {time.time() - T0:.0f}s]", flush=True)
    bad = [(c["op"], c["shape"], c["ue8m0"], i, v) for c in res["checks"] for i, v in c["cfg"].items() if v != 0]
    refbad = [(c["op"], c["shape"], c["ref_diff_cfg0"]) for c in res["checks"] if c["ref_diff_cfg0"] not in (0, -2)]
    res["summary"] = dict(mismatch_vs_cfg0=bad, cfg0_vs_ref=refbad, seconds=time.time() - T0)
    save()
    print("MISMATCH vs cfg0:", bad[:40])
    print("cfg0 vs reference (nonzero):", refbad[:20])
    print("errors:", len(res["errors"]), res["errors"][:5])
