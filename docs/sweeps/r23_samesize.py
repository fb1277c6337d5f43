# 23rd session, /work/.device/9: run on the H200 against the installed wheel: python3 r23_samesize.py OUT.json
# Is fused_add_rms_norm at N = 4096 really 0.88 of a same-size copy?  The bench's order (copy, then
# tkreg, each queued_ms) against both timed in turn (queued_ms_paired), three repeats each.
import itertools, json, sys, torch, tkreg
from tkreg.bench.timing import copy_sets, queued_ms, queued_ms_paired, rotations
bf = torch.bfloat16
res = []
for m, n in ((2048, 4096), (4096, 4096), (1024, 4096), (2048, 7168)):
    nbytes = 4 * m * n * 2 + n * 2
    sets = rotations(lambda: (torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(m, n, dtype=bf, device="cuda"),
                              torch.randn(n, dtype=bf, device="cuda")), nbytes)
    cs = copy_sets(nbytes)
    fn = lambda x, r, w: tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6)
    it = itertools.cycle(cs)
    cp = lambda *a: (lambda s, d: d.copy_(s))(*next(it))
    for rep in range(3):
        c = queued_ms(lambda s, d: d.copy_(s), cs); o = queued_ms(fn, sets)
        o2 = queued_ms(fn, sets); c2 = queued_ms(lambda s, d: d.copy_(s), cs)
        po, pc = queued_ms_paired([fn, cp], sets, reps=50, runs=5)
        row = dict(shape=[m, n], rep=rep, bench_order=c / o, reversed=c2 / o2, paired=pc / po, ours_us=[o * 1e3, o2 * 1e3, po * 1e3],
                   copy_us=[c * 1e3, c2 * 1e3, pc * 1e3])
        print(json.dumps(row), flush=True)
        res.append(row)
json.dump(res, open(sys.argv[1], "w"), indent=1)
