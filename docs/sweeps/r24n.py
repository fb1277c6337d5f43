"""Sweep pack + runner (24th session): rms_norm and fused_add_rms_norm (bf16) at N = 4096-7168 and
prefill-chunk token counts, where the bench (L2 rotation fixed: tkreg/bench/timing.py rotations)
shows rms_norm 4096 x 4096 at 1.13x torch.compile (bar 1.15x, torch.compile at 0.83 of a copy).
cfg 0: the shipped resident-row kernel (kernels_src/norm.py _static: 256 threads, wpre); cfgs 1-4:
the same with `rows` rows a CTA (every row's loads first, one barrier for all sums), 256 or 128
threads.
Checks: every cfg against the torch reference (max |diff| in output ulps) on odd M and M = 0, then
timed in turn in ONE process beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r24n.py --namespace sw --arch sm_90a \\
      --out .ab/r24n/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r24n.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

NS = (4096, 7168)


def _cfg(i, n):
    """cfg i at hidden size n -> factory params"""
    if i == 0:                   # what kernels_src/norm.py _static shipped before this sweep
        return dict(N=n, dtype="bfloat16", threads=256, wpre=1, max_n=-(-n // 2048) * 2048)
    threads, rows = ((256, 2), (128, 2), (128, 4), (256, 4))[i - 1]
    chunk = threads * 8
    return dict(N=n, dtype="bfloat16", threads=threads, wpre=1, max_n=-(-n // chunk) * chunk, rows=rows)


NCFG = 5
# Results (/work/.device/5 of the 24th session; 40 checks within 1 output ulp, the residual exact).
# rms_norm, of torch.compile at 1024 / 2048 / 3000 / 4096 rows, then 16384 x 4096:
#   N = 4096  cfg0 1.018 1.027 1.145 1.135 1.115 | cfg1 1.128 1.098 1.209 1.175 | cfg2 1.135 1.125 1.205 1.187 1.112
#   N = 7168  cfg0 1.161 1.096 1.040 1.044 | cfg2 1.196 1.075 1.035 1.036 | cfg3 / cfg4 (4 rows) 2-7% behind cfg0
# fused_add_rms_norm, of a same-size copy: N = 4096 cfg0 0.981 1.002 0.985 1.002 0.957, cfg2 1.035
#   0.999 0.986 1.000 0.950; N = 7168 cfg0 0.988-1.003, cfg2 0.905-0.979.
# Ships: cfg 2 (128 threads, two rows a CTA) at N = 4096 for both ops (kernels_src/norm.py TWO_ROWS).
SHAPES = tuple((m, n) for m in (1024, 2048, 3000, 4096) for n in NS) + ((16384, 4096),)


from sweep_check import norm_sweep   # noqa: E402  (a sibling module: this folder is on sys.path)

specs, run = norm_sweep(_cfg, NCFG, NS, SHAPES)


if __name__ == "__main__":
    run(sys.argv[1])
