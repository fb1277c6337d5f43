"""Issue #17 round 3 on the H200: every sw3.<op> cfg checked bit-exact against cfg 0 (the shipped kernel) and the
torch reference (M = 1, 37, 4097, 16384; UE8M0 at 4097), then timed beside a same-size device copy (16384 rows:
CUDA events, each cfg twice in opposite orders; mid sizes: queued).  Imports tkreg and torch only.
`cd /tmp && TKREG_PACKS=/path/to/pack3 python3 quant_r3_run.py OUT.json [op,op]`; the JSON is rewritten after
every op, and one failing cfg (or op) is recorded in it without stopping the rest."""
import json, os, pathlib, sys, time, traceback
import torch
import tkreg
from tkreg.reference import quant as R
from tkreg.bench.timing import gpu_ms, queued_ms, rotations, copy_sets
from sweep_check import cb, copy_ms, diff, rnd

NS = "sw3"
# must match docs/sweeps/quant_r3.py's NCFG (checked below against the pack's manifest)
NCFG = {"silu_and_mul_per_channel_quant_fp8_transpose": 6, "per_token_group_quant_fp4": 7, "batched_transpose": 6,
        "per_channel_quant_fp8_transpose": 5, "per_channel_quant_fp8": 5}
ONLY = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
out_path = sys.argv[1] if len(sys.argv) > 1 else "/dev/null"
res = {"errors": [], "checks": [], "rows": [], "copy": {}}
T0 = time.time()
bf16, fp8, u8 = torch.bfloat16, torch.float8_e4m3fn, torch.uint8
dev = "cuda"


def save():
    try:
        tmp = out_path + ".tmp" if out_path != "/dev/null" else out_path
        json.dump(res, open(tmp, "w"), indent=1)
        if tmp != out_path:
            os.replace(tmp, out_path)
    except Exception as e:
        print("save failed:", e, flush=True)












# op -> (inputs(M, K) -> tuple, scalar kwargs, reference fn, bytes(M, K))
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
    "per_token_group_quant_fp4": (lambda m, k: (rnd(m, k),), {}, R.per_token_group_quant_fp4,
                                  lambda m, k: 2 * m * k + m * k // 2 + m * k // 32),
}
K_OF = {"silu_and_mul_per_channel_quant_fp8_transpose": 2048}
MIDS = {"per_token_group_quant_fp4": [1024, 4096], "per_channel_quant_fp8": [4096],
        "per_channel_quant_fp8_transpose": [4096], "batched_transpose": [4096],
        "silu_and_mul_per_channel_quant_fp8_transpose": [4096]}
LARGE = 16384


def call(name, args, kw, i):
    return tkreg.call(f"{NS}.{name}", *args, **kw, cfg=i)


def check(name):
    make, kw, ref, _ = OPS[name]
    k = K_OF.get(name, 7168)
    cases = [(m, k, {}) for m in (1, 37, 4097, LARGE)]
    if name == "batched_transpose":
        cases += [(37, 1000, {}), (4096, 4104, {}), (4104, 4096, {})]
    if name in ("per_channel_quant_fp8", "per_channel_quant_fp8_transpose",
                "silu_and_mul_per_channel_quant_fp8_transpose"):
        cases += [(300, 1000 if "silu" not in name else 504, {}), (129, k, {})]   # ragged K block, M edges
    if "ue8m0" in kw:
        cases += [(4097, k, {"ue8m0": True})]
    for m, kk, extra in cases:
        try:
            torch.manual_seed(m * 7 + kk)
            args = make(m, kk)
            kw2 = {**kw, **extra}
            base = call(name, args, kw2, 0)
            torch.cuda.synchronize()
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
                    del o
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
            order = list(range(NCFG[name]))
            passes = [order] if queued else [order, order[::-1]]
            for p, seq in enumerate(passes):
                for i in seq:
                    try:
                        t = timer(lambda *a: call(name, a, kw, i), sets)
                        if p == 0:
                            row["ms"][i] = t
                        else:
                            row.setdefault("ms_again", {})[i] = t
                    except Exception as e:
                        row["ms"][i] = f"ERR {type(e).__name__}: {e}"[:300]
            for i, t in row["ms"].items():
                if isinstance(t, float):
                    t2 = row.get("ms_again", {}).get(i)
                    t = min(t, t2) if isinstance(t2, float) else t
                    row["gbs"][i], row["pct_copy"][i] = nbytes / t / 1e6, round(100 * cp / t, 1)
            if not queued:   # copy again: run-to-run spread
                row["copy_ms_again"] = gpu_ms(lambda s, d: d.copy_(s), copy_sets(nbytes))
            res["rows"].append(row)
            print(f"{name:45s} {m}x{k} copy {row['copy_gbs']:.0f} GB/s  "
                  + "  ".join(f"c{i}:{v}%" for i, v in row["pct_copy"].items()), flush=True)
            del sets
        except Exception as e:
            res["errors"].append(f"bench {name} {m}: {type(e).__name__}: {e}"[:400] + traceback.format_exc()[-300:])
        torch.cuda.empty_cache()


def check_pack():
    """NCFG must match the pack's manifest (quant_r3.NCFG at build time); on a mismatch the manifest's counts win."""
    for d in os.environ.get("TKREG_PACKS", "").split(":"):
        f = pathlib.Path(d) / "sm_90a" / "manifest.json"
        if f.is_file():
            m = json.load(open(f))
            ops = m["ops"] if isinstance(m.get("ops"), list) else [dict(name=k, **v) for k, v in m["ops"].items()]
            have = {o["name"].split(".", 1)[1]: len(o["variants"]) for o in ops if o["name"].startswith(NS + ".")}
            if have != NCFG:
                res["errors"].append(f"NCFG {NCFG} != manifest {have}: using the manifest's")
                NCFG.clear()
                NCFG.update({k: v for k, v in have.items() if k in OPS})
            return
    raise SystemExit("TKREG_PACKS must name the pack built from docs/sweeps/quant_r3.py")


if __name__ == "__main__":
    check_pack()
    res["device"] = torch.cuda.get_device_name()
    for name in list(NCFG):
        if ONLY and name not in ONLY:
            continue
        t = time.time()
        for step in (check, bench):
            try:
                step(name)
            except Exception as e:
                res["errors"].append(f"{step.__name__} {name}: {type(e).__name__}: {e}"[:400])
            save()
        print(f"  [{name} {time.time() - t:.1f}s, total {time.time() - T0:.0f}s]", flush=True)
    bad = [(c["op"], c["shape"], c["ue8m0"], i, v) for c in res["checks"] for i, v in c["cfg"].items() if v != 0]
    refbad = [(c["op"], c["shape"], c["ref_diff_cfg0"]) for c in res["checks"] if c["ref_diff_cfg0"] not in (0, -2)]
    res["summary"] = dict(mismatch_vs_cfg0=bad, cfg0_vs_ref=refbad, seconds=time.time() - T0)
    save()
    print("MISMATCH vs cfg0:", bad[:40])
    print("cfg0 vs reference (nonzero):", refbad[:20])
    print("errors:", len(res["errors"]), res["errors"][:5])
