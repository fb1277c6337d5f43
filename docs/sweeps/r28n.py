"""Sweep pack + runner (28th session): rms_norm and fused_add_rms_norm (bf16) on the any-N kernels at
hidden sizes under 8192 (2880 gpt-oss, 3584 Qwen2-7B-class), where the bench shows
rms_norm 16384 x 3584 at 86% of copy and 1.11x torch.compile (bar 1.15x, torch.compile at 77%).
Those N run the two-pass kernel (pass 2 re-reads the row from L2); the resident-row kernel was measured
only with max_n = 16384 there (8 slots a thread, 75% of copy).  Here resident rows sized for N <= 4096
(max_n = 4096: 4 / 2 / 1 slots at 128 / 256 / 512 threads), with the weight loaded with the row (wpre)
or after, and two rows a CTA.
cfg 0: shipped (two-pass, 256 threads); 1-6: resident, max_n 4096; 7: two-pass, 128 threads.
Checks: every cfg against the torch reference (max |diff| in output ulps) on odd M and M = 0, then
timed in turn in ONE process beside torch.compile of the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r28n.py --namespace sw --arch sm_90a \\
      --out .ab/r28n/pack --cache build/cache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r28n.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

NS = (2880, 3584)
CFGS = (dict(threads=256),
        dict(threads=128, max_n=4096), dict(threads=256, max_n=4096), dict(threads=512, max_n=4096),
        dict(threads=128, max_n=4096, rows=2), dict(threads=128, max_n=4096, wpre=1),
        dict(threads=256, max_n=4096, wpre=1),
        dict(threads=128))
NCFG = len(CFGS)


def _cfg(i, n):
    """cfg i at hidden size n -> factory params (N=0: the any-N kernels)"""
    return dict(CFGS[i], N=0, dtype="bfloat16")


SHAPES = tuple((m, n) for m in (1024, 4096, 16384) for n in NS)


from sweep_check import norm_sweep   # noqa: E402  (a sibling module: this folder is on sys.path)

specs, run = norm_sweep(_cfg, NCFG, NS, SHAPES)


if __name__ == "__main__":
    run(sys.argv[1])
