"""Sweep pack + runner (23rd session): rms_norm and fused_add_rms_norm (bf16) at prefill-chunk
sizes, where BENCHMARKS.md shows rms_norm 4096 x 4096 at 1.12x torch.compile (bar 1.15x) and
fused_add_rms_norm 2048-4096 x 4096 at 0.88-0.89 of a same-size copy (bar 0.90).  The static-N
kernels (cfg 0, shipped: T.Parallel code, 8-byte accesses, weight loaded after the row's reduction)
against the register-resident any-N kernel at N's size (16-byte slots), with the weight slices
loaded before the barrier (wpre), at 128 / 256 / 512 threads.
Checks: every cfg against the torch reference (max |diff| in output ulps; the sum order differs
between kernels, so 1-ulp differences are expected) on odd M and M = 0, then timed in turn in ONE
process beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r23n.py --namespace sw --arch sm_90a \\
      --out .ab/r23n/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r23n.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

NS = (4096, 5120, 7168)


def _cfg(i, n):
    """cfg i at hidden size n -> factory params"""
    if i == 0:
        return dict(N=n, threads=256 if n >= 4096 else 128)
    threads, wpre = ((256, 0), (256, 1), (512, 1), (128, 1))[i - 1]
    chunk = threads * 8
    return dict(N=0, threads=threads, wpre=wpre, max_n=-(-n // chunk) * chunk)


NCFG = 5
# Results (/work/.device/1 of the 23rd session; 60 checks: every cfg within 1 output ulp of the
# reference, the fused residual exact).  Of torch.compile, rms_norm at 1024 / 2048 / 3000 / 4096 rows:
#   N = 4096  cfg0 1.135 1.093 1.115 1.149 | cfg2 1.100 1.159 1.198 1.188 | cfg4 1.126 1.180 1.186 1.196
#   N = 5120  cfg0 1.072 1.122 1.162 1.126 | cfg2 1.218 1.203 1.237 1.160 | cfg4 1.213 1.198 1.231 1.163
#   N = 7168  cfg0 1.089 1.077 1.023 1.026 | cfg2 1.145 1.148 1.051 1.045 | cfg4 1.184 1.140 1.053 1.047
# fused_add_rms_norm, of a same-size copy: cfg0 0.96-1.04, cfg2 1.00-1.04, cfg4 0.995-1.06; 16384 rows:
# all within 1% (rms_norm 0.989-0.992 of a copy at 7168, fused 0.958-0.967).  cfg1 (no wpre) at or
# below cfg0; cfg3 (512 threads) 3-15% behind.  Ships: cfg2 at N = 4096, 5120, 7168 (norm.py WPRE).
# The bench (`python -m tkreg bench --ops norm`, same wheel) then showed N = 5120 / 7168 rows 3-10%
# faster and N = 4096 unchanged (fused 4096 x 4096: bench 0.88 of a copy, here 1.04 for the same
# kernel; r23_samesize.py shows timing order is not why: docs/quant-tuning.md, 23rd session).
SHAPES = tuple((m, n) for m in (1024, 2048, 3000, 4096) for n in NS) + ((16384, 7168), (16384, 4096))


from sweep_check import norm_sweep   # noqa: E402  (a sibling module: this folder is on sys.path)

specs, run = norm_sweep(_cfg, NCFG, NS, SHAPES)


if __name__ == "__main__":
    run(sys.argv[1])
