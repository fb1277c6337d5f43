"""Sweep pack + runner (23rd session): a shared-memory tile transpose for 2-byte elements, the
shape of torch.compile's kernel (TORCH_LOGS=output_code on the H200: 32 x 32 tiles, 128 threads,
one 16-byte vector a thread each way), against the shipped register transpose at prefill-chunk
sizes, where 3000-row calls stay at 0.90-0.96x torch.compile (r23t.py).
The tile kernel (bm x bn tiles: kernels_src/quant.py _tile_transpose, which this sweep's kernel
became) and cfg 0, the shipped register transpose.  M % 8 == 0 and N % 8 == 0.
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/r23s.py --namespace sw --arch sm_90a \\
      --out .ab/r23s/pack --cache /tmp/gwscache -j 2
Run (cwd outside the repo, sweep_check.py beside it): TKREG_PACKS=pack python3 r23s.py OUT.json
"""
import pathlib
import sys

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2]))   # after site-packages: the installed tkreg
sys.path.append(str(pathlib.Path(__file__).resolve().parent))      # sweep_check

CFGS = [dict(kind="reg", lanes=4, threads=128, rows=8, cols=8), dict(kind="smem", bm=32, bn=32, threads=128),
        dict(kind="smem", bm=32, bn=32, threads=64), dict(kind="smem", bm=64, bn=64, threads=256),
        dict(kind="smem", bm=32, bn=64, threads=128), dict(kind="smem", bm=64, bn=32, threads=128),
        dict(kind="smem", bm=64, bn=64, threads=128)]
SHAPES = tuple((m, n) for m in (1024, 2048, 3000, 4096) for n in (4096, 5120, 7168)) + ((16384, 7168), (8192, 16384))
# Results (/work/.device/7 of the 23rd session, 49 checks bit-exact; of torch.compile at 1024 / 2048
# / 3000 / 4096 rows x 4096, 5120, 7168, then of a copy at 16384 x 7168 and 8192 x 16384):
#   cfg 0 (shipped) 1.07 1.07 1.05 | 0.97 0.99 1.00 | 0.99 0.96 0.91 | 0.98 0.97 0.97 | 0.919 0.922
#   cfg 1 (32 x 32, 128 thr.) 0.96-1.00 (3000 x 7168 1.003)                            | 0.847 0.915
#   cfg 3 (64 x 64, 256 thr.) 1.08 1.06 1.05 | 1.06 1.10 1.10 | 1.12 1.07 1.03 | 1.08 1.04 1.03 | 0.946 0.949
#   cfg 4 / 6 (32 x 64, 64 x 64 at 128 thr.) 0.85-1.10, cfg 2 / 5 below cfg 0 at 3000 rows.
# 22-27 registers (40 at 64 x 64 on 128 threads) against the register transpose's 66.  Ships: cfg 3
# for every 2-byte call with M % 8 == 0 and N % 8 == 0 (kernels_src/quant.py _tile_transpose); it
# also beats the 32 x 512 register tile at the large shapes (that one at 0.932 / 0.935 in r23t.py).


def factory(kind, **kw):
    kw.pop("arch", None)          # (the build passes it to factories taking **kw)
    from kernels_src.quant import _tile_transpose, transpose_kernel   # the tile kernel as it shipped
    return transpose_kernel(dtype="float16", **kw) if kind == "reg" else _tile_transpose(**kw)


def specs():
    from kernels_src import quant as Q
    from sweep_check import sweep_op
    spec = next(s for s in Q.SPECS if s.name == "tkreg.batched_transpose")
    return (sweep_op("sw.trs", spec, factory, CFGS, "M % 8 == 0 and N % 8 == 0", "float16"),)


def run(out: str):
    from sweep_check import transpose_sweep   # a sibling module (this folder is on sys.path)
    transpose_sweep("sw.trs", CFGS, SHAPES, out)


if __name__ == "__main__":
    run(sys.argv[1])
