"""Sweep pack + runner (24th session): the 2-byte shared-memory tile transpose at 3000-row calls,
where BENCHMARKS.md shows 3000 x 7168 at 0.84 of a same-size copy (2048 x 7168: 1.03).  Hypothesis:
3000 % 16 == 8, so every odd output row (pitch 6000 B) starts half-way into a 32-byte sector and
each CTA's 64-element pieces of those rows begin and end in sectors another CTA writes the rest of.
cfg 0: the shipped tile (kernels_src/quant.py _tile_transpose, 64 x 64, 256 threads); cfg 1: the
same with `sector=1` (8 extra tile rows, the odd rows' pieces 8 elements earlier: whole sectors).
The shapes around 3000 rows separate the pitch classes: 3008 (128-byte lines), 2992 / 3024 / 3040
(whole sectors), 3000 / 3016 (half sectors).
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r24s.py --namespace sw --arch sm_90a \\
      --out .ab/r24s/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r24s.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

CFGS = [dict(bm=64, bn=64, threads=256), dict(bm=64, bn=64, threads=256, sector=1)]
SHAPES = tuple((m, 7168) for m in (2992, 3000, 3008, 3016, 3024, 3040)) + (
    (3000, 4096), (3000, 5120), (1000, 7168), (4104, 4096), (16376, 7168))
# Results (/work/.device/1 of the 24th session, 22 checks bit-exact), of a same-size copy, cfg 0 / cfg 1:
#   x 7168: 2992 0.995 / 0.975, 3000 0.901 / 0.962, 3008 0.991 / 0.967, 3016 0.881 / 0.956,
#           3024 0.996 / 0.968, 3040 0.994 / 0.970
#   3000 x 4096 0.994 / 0.966, 3000 x 5120 0.958 / 0.971, 1000 x 7168 1.030 / 1.014, 4104 x 4096 0.939 / 0.969,
#   16376 x 7168 0.750 / 0.913 (torch.compile 0.670)
# Only the half-sector pitches (M % 16 == 8) are slow, and cfg 1 fixes them; where M % 16 == 0 it
# costs 2-3%.  Ships: cfg 1 for M % 16 == 8 only (kernels_src/quant.py, priority 4).
CASES = ((1, 8, 8), (1, 40, 1416), (3, 3000, 264), (1, 4104, 2056), (2, 1024, 7168), (1, 3000, 7168), (1, 72, 24),
         (5, 24, 40), (1, 56, 8), (2, 3016, 136), (1, 120, 72))


def factory(**kw):
    kw.pop("arch", None)          # (the build passes it to factories taking **kw)
    from kernels_src.quant import _tile_transpose
    return _tile_transpose(**kw)


def specs():
    from kernels_src import quant as Q
    from sweep_check import sweep_op
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    return (sweep_op("sw.trs", spec, factory, CFGS, "M % 8 == 0 and N % 8 == 0", "float16"),)


def run(out: str):
    from sweep_check import transpose_sweep   # a sibling module (this folder is on sys.path)
    transpose_sweep("sw.trs", CFGS, SHAPES, out, cases=CASES)


if __name__ == "__main__":
    run(sys.argv[1])
