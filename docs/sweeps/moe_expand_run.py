"""Device: time MoE expand sweep cfgs beside the copy ceiling and write-only ceilings."""
import ctypes, json, os, statistics, sys
import torch
import tkreg
from tkreg.bench.timing import gpu_ms, rotations, copy_bandwidth
from tkreg.reference import moe as ref
ops = tkreg.ops
OUT = os.environ.get("OUT", "/tmp")
res = {"cfg": {}, "ceil": {}, "prof": {}}
torch.manual_seed(0)
ceil = copy_bandwidth()
res["ceil"]["copy"] = ceil
print("copy GB/s", round(ceil))
cuda = ctypes.CDLL("libcuda.so.1")
NCFG = {"expand_bf16": 6, "expand_row": 4, "expand_col": 4}


def call(op, cfg, x, s, margs):
    if op == "expand_bf16":
        return tkreg.call("sw.expand_bf16", x, *margs, cfg=cfg)
    return tkreg.call("sw." + op, x, s, *margs, cfg=cfg)


for t, h in [(16384, 7168), (4096, 7168), (16384, 4096), (37, 1024)]:
    e, k, a = 256, 8, 128
    idx = torch.rand(t, e, device="cuda").topk(k, -1).indices.to(torch.int32)
    m = ops.moe_mapping(idx, e, a)
    U = int(m.expert_offsets[-1])
    margs = (m.row_of_slot, m.slot_of_row, m.expert_offsets, m.counts)
    # write-only ceilings over the U rows
    for esz in (1, 2):
        buf = torch.empty(U * h * esz, dtype=torch.uint8, device="cuda")
        nb = buf.numel()
        z = gpu_ms(lambda: buf.zero_(), [()])
        st = torch.cuda.current_stream().cuda_stream
        ms = gpu_ms(lambda: cuda.cuMemsetD8Async(ctypes.c_uint64(buf.data_ptr()), ctypes.c_ubyte(0), ctypes.c_size_t(nb), ctypes.c_void_p(st)), [()])
        ms5 = gpu_ms(lambda: cuda.cuMemsetD8Async(ctypes.c_uint64(buf.data_ptr()), ctypes.c_ubyte(0x5A), ctypes.c_size_t(nb), ctypes.c_void_p(st)), [()])
        f = gpu_ms(lambda: buf.fill_(0x5A), [()])
        half = nb // 2
        cp = gpu_ms(lambda: cuda.cuMemcpyDtoDAsync_v2(ctypes.c_uint64(buf.data_ptr()), ctypes.c_uint64(buf.data_ptr() + half), ctypes.c_size_t(half), ctypes.c_void_p(st)), [()])
        res["ceil"][f"T{t}H{h}e{esz}"] = dict(zero_pct=100 * nb / z / 1e6 / ceil, memset_pct=100 * nb / ms / 1e6 / ceil,
                                              memset5a_pct=100 * nb / ms5 / 1e6 / ceil, fill5a_pct=100 * nb / f / 1e6 / ceil,
                                              cumemcpy_pct=100 * nb / cp / 1e6 / ceil)
        print(t, h, esz, res["ceil"][f"T{t}H{h}e{esz}"])
        del buf
    for op in NCFG:
        fp8 = op != "expand_bf16"
        col = op == "expand_col"
        nbytes = (t + U) * h * (1 if fp8 else 2) + ((t + U) * (h // 128) * 4 if fp8 else 0)
        if fp8:
            sets = rotations(lambda: ops.per_token_group_quant_fp8(torch.randn(t, h, device="cuda").to(torch.bfloat16),
                                                                   column_major_scales=col), nbytes)
        else:
            sets = rotations(lambda: (torch.randn(t, h, device="cuda").to(torch.bfloat16), None), nbytes)
        q, s = sets[0]
        base = None
        for c in range(NCFG[op]):
            try:
                o = call(op, c, q, s, margs)
                o = o if isinstance(o, (tuple, list)) else (o,)
                xe = o[0][:U].view(torch.uint8)
                se = (o[1][:U] if not col else o[1][:, :U]) if fp8 else None
                if base is None:
                    r = (ref.moe_expand_fp8_colmajor if col else ref.moe_expand_fp8)(q, s, *margs) if fp8 else (ref.moe_expand(q, *margs),)
                    r = r if isinstance(r, (tuple, list)) else (r,)
                    ok_ref = bool(torch.equal(xe, r[0][:U].view(torch.uint8)))
                    if fp8:
                        rs = r[1][:U] if not col else r[1][:, :U]
                        ok_ref = ok_ref and bool(torch.equal(se, rs))
                    base = (xe.clone(), None if se is None else se.clone())
                    ok = ok_ref
                else:
                    ok = bool(torch.equal(xe, base[0])) and (se is None or bool(torch.equal(se, base[1])))
                ms = gpu_ms(lambda a, b: call(op, c, a, b, margs), sets, reps=100)
                pct = 100 * nbytes / ms / 1e6 / ceil
                res["cfg"][f"{op} T{t}H{h} c{c}"] = dict(us=ms * 1e3, pct=pct, ok=ok)
                print(f"{op:12s} T{t} H{h} c{c}: {ms*1e3:8.1f} us {pct:5.1f}% ok={ok}", flush=True)
            except Exception as ex:  # noqa
                print(op, c, "FAILED", type(ex).__name__, str(ex)[:300], flush=True)
        if False:
            from torch.profiler import profile, ProfilerActivity
            for c in range(NCFG[op]):
                with profile(activities=[ProfilerActivity.CUDA]) as p:
                    for i in range(20):
                        a, b = sets[i % len(sets)]
                        call(op, c, a, b, margs)
                    torch.cuda.synchronize()
                ks = {}
                for ev in p.events():
                    if ev.device_type.name == "CUDA":
                        ks.setdefault(ev.name[:60], []).append(ev.device_time)
                res["prof"][f"{op}{c}"] = {n: statistics.median(v) for n, v in ks.items()}
                print("prof c", c, {n: round(v, 1) for n, v in res["prof"][f"{op}{c}"].items()})
json.dump(res, open(f"{OUT}/moe_sweep.json", "w"), indent=1)
