"""Sweep pack + runner (29th session, staged): rms_norm and fused_add_rms_norm (bf16) at head-dim rows
-- qk-norm (Qwen3 / Gemma apply rms_norm per head: N = 64, 128, 256 over millions of rows), where #17
asks >= 85% of copy.  Those N run the two-pass any-N kernel today: one row a 256-thread CTA, so at
N = 128 only 16 threads load anything.  Here `_any_n_kernel(lanes=N/8 rounded up to a power of two)`:
`lanes` threads a row, threads / lanes rows side by side, each row's sum reduced by shuffles within
its lane group (no barrier), `rows` rows a thread with every load issued first.
cfg 0: shipped (two-pass, 256 threads); 1-6: lane-group resident rows (threads, rows a thread).
Checks: every cfg against the torch reference (max |diff| in output ulps; fused residual exact) on
M = 0, 1, 37, 4097 at N = 64, 96, 128, 256, then timed in turn in ONE process beside torch.compile of
the reference and a device copy of the same bytes.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r29n.py --namespace sw --arch sm_90a \\
      --out .ab/r29n/pack --cache build/cache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r29n.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

NS = (64, 96, 128, 256)
CFGS = (dict(threads=256),
        dict(threads=128, rows=1), dict(threads=256, rows=1), dict(threads=256, rows=2),
        dict(threads=256, rows=4), dict(threads=512, rows=2), dict(threads=128, rows=4))
NCFG = len(CFGS)


def _cfg(i, n):
    """cfg i at hidden size n -> factory params (N=0: the any-N kernels)"""
    if i == 0:
        return dict(CFGS[0], N=0, dtype="bfloat16")
    lanes = min(1 << (n // 8 - 1).bit_length(), 32)      # n / 8 rounded up to a power of two
    return dict(CFGS[i], N=0, dtype="bfloat16", lanes=lanes, max_n=8 * lanes * -(-n // (8 * lanes)), wpre=1)


SHAPES = ((1 << 20, 64), (1 << 20, 128), (1 << 22, 128), (1 << 20, 256))


from sweep_check import norm_sweep   # noqa: E402  (a sibling module: this folder is on sys.path)

specs, run = norm_sweep(_cfg, NCFG, NS, SHAPES)


if __name__ == "__main__":
    run(sys.argv[1])
