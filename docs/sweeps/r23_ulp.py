# 23rd session (docs/sweeps/r23.py round 3): run on the H200 with triton (no tkreg needed):
#   python3 r23_ulp.py OUT.json  -> max fast-vs-precise distance 13 ulps (quotient), 14 (y = q * u).
# max fp32-ulp distance between the fast (ex2.approx.ftz + rcp.approx.ftz) and precise (expf + IEEE
# div) q = g / (1 + exp(-g)), over every bf16 g with |g| <= 16 (exhaustive), and y = q * u over
# random u: the bound an exact fallback (dropped: no faster) relied on.
import json, sys, torch, triton, triton.language as tl
from triton.language.extra import libdevice

@triton.jit
def k(g_ptr, u_ptr, qf_ptr, qp_ptr, yf_ptr, yp_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    g = tl.load(g_ptr + o, mask=m)
    u = tl.load(u_ptr + o, mask=m)
    e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [g * -1.4426950408889634], dtype=tl.float32, is_pure=True, pack=1)
    r = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [1.0 + e], dtype=tl.float32, is_pure=True, pack=1)
    qf = g * r
    qp = libdevice.div_rn(g, 1.0 + libdevice.exp(-g))
    tl.store(qf_ptr + o, qf, mask=m); tl.store(qp_ptr + o, qp, mask=m)
    tl.store(yf_ptr + o, qf * u, mask=m); tl.store(yp_ptr + o, qp * u, mask=m)

def ulp_dist(a, b):
    ia, ib = a.view(torch.int32).long(), b.view(torch.int32).long()
    ia = torch.where(ia < 0, -(ia & 0x7fffffff), ia); ib = torch.where(ib < 0, -(ib & 0x7fffffff), ib)
    return (ia - ib).abs()

allb = torch.arange(65536, device="cuda", dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
g = allb[(allb.abs() <= 16) & torch.isfinite(allb)]
res = {}
for name, reps, us in (("u=1", 1, None), ("random u", 64, 4.0)):
    gg = g.repeat(reps)
    u = torch.ones_like(gg) if us is None else torch.randn_like(gg).mul(us).bfloat16().float()
    out = [torch.empty_like(gg) for _ in range(4)]
    k[(triton.cdiv(gg.numel(), 1024),)](gg, u, *out, gg.numel(), BLOCK=1024)
    qf, qp, yf, yp = out
    dq, dy = ulp_dist(qf, qp), ulp_dist(yf, yp)
    ok = (yf != 0) & (yp != 0)
    res[name] = dict(n=gg.numel(), max_q_ulps=int(dq.max()), max_y_ulps=int(dy[ok].max()),
                     worst_g=float(gg[dq.argmax()]),
                     by_abs_g={str(t): int(dq[(gg.abs() <= t) & (gg.abs() > t / 2)].max()) for t in (1, 2, 4, 8, 16)})
print(json.dumps(res, indent=1))
json.dump(res, open(sys.argv[1], "w"), indent=1)
