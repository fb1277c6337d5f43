"""Sweep pack + runner (23rd session): the 2-byte transpose at prefill-chunk sizes (1024-4096 x
4096-7168 bf16), still 0.88-0.98x torch.compile after r23t.py.  torch.compile's kernel
(TORCH_LOGS=output_code on the H200) moves 32 x 32 tiles on 128 threads, one 16-byte vector a
thread through shared memory: many small CTAs.  Here: one- and two-warp CTAs of the register
transpose.  cfg 0: the shipped mid-size variant (64 x 128 tile, 128 threads, 4 lanes).
Every cfg bit for bit against cfg 0 (odd and aligned M, N; B > 1), then timed in turn in ONE process
beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r23t.py --namespace sw --arch sm_90a \\
      --out .ab/r23t/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r23t.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

BASE = dict(dtype="float16", rows=8, cols=8)
ROUND1 = [dict(lanes=4, threads=128), dict(lanes=8, threads=32), dict(lanes=8, threads=64), dict(lanes=4, threads=32),
          dict(lanes=4, threads=64), dict(lanes=2, threads=32), dict(lanes=2, threads=64)]
# Round 1 (/work/.device/3 of the 23rd session, 35 checks; of torch.compile at 1024 / 2048 / 3000 /
# 4096 x 4096, 5120, 7168): shipped 1.07 1.07 1.05 | 0.97 0.99 1.00 | 1.00 0.96 0.90 | 0.98 0.97
# 0.97; 64 threads (64 x 64 tiles) the same within 1-3%; one warp (32 x 64, 64 x 32) 0.79-1.08; 8
# lanes x 64 threads 0.98 at 4096 x 5120 / 7168 but 0.79-0.87 at 3000 rows.  Every variant holds 66
# registers (the 32 loaded words and the 32 permuted ones live at once): 7 CTAs of 128 threads a
# SM, so 3000 x 5120's 1880 CTAs run in 2.03 waves, 3000 x 7168's 2632 in 2.85.
# Round 2 (these CFGS): __launch_bounds__ minimum blocks (minb) and each output column permuted and
# stored as soon as built (il); the last three: the large-call variant (32 x 512 tiles).
CFGS = [dict(lanes=4, threads=128), dict(lanes=4, threads=128, minb=8), dict(lanes=4, threads=128, minb=12),
        dict(lanes=4, threads=128, minb=10), dict(lanes=4, threads=128, il=1, minb=10), dict(lanes=4, threads=128, il=1, minb=12),
        dict(lanes=4, threads=128, il=1, minb=16), dict(lanes=8), dict(lanes=8, il=1, minb=4), dict(lanes=8, il=1, minb=6)]
SHAPES = tuple((m, n) for m in (1024, 2048, 3000, 4096) for n in (4096, 5120, 7168)) + ((16384, 7168), (8192, 16384))
# Round 2 (/work/.device/5, 50 checks; of torch.compile, 1024 / 2048 / 3000 / 4096 rows x 4096,
# 5120, 7168): more CTAs a SM lost everywhere: minb 12 (40 registers) 0.75-0.97, minb 16 (32, spills)
# 0.60-0.82; minb 8 (64) within +-4% of shipped (2048 x 4096 1.045 vs 0.961, 4096 x 7168 0.943 vs
# 0.965); il + minb 10 (48) 0.86-1.06 (3000 x 7168 0.862 vs 0.904).  Nothing moved 3000 x 5120 /
# 3000 x 7168 (0.96 / 0.90): the mid-size 2-byte transpose stays as it was; `il` and `minb` were
# removed from transpose_kernel: build these CFGS with `git show 5a7498d:kernels_src/quant.py`.


def specs():
    from kernels_src import quant as Q
    from sweep_check import sweep_op
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    return (sweep_op("sw.tr2", spec, spec.factory, [dict(BASE, **c) for c in CFGS], "M % 8 == 0 and N % 8 == 0", "float16"),)


def run(out: str):
    from sweep_check import transpose_sweep   # a sibling module (this folder is on sys.path)
    transpose_sweep("sw.tr2", CFGS, SHAPES, out)


if __name__ == "__main__":
    run(sys.argv[1])
