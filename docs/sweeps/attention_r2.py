"""Sweep pack: flash attention forward, round 2 (cfg scalar).  What changed since round 1
(docs/attention-tuning.md): the build now honours `tl.enable_fast_math` (nvcc --use_fast_math, as
tilelang's JIT does), so exp2 is a bare ex2.approx; before, both kernels ran the exact exp2f, and
the WS kernel's SASS was twice as long.  cfg 0 = the kernel as shipped before (exact exp2f),
1 = shipped + fast math, 2 = + masks only on boundary tiles, 3-5 = kernels_src/attention_ws.py
(a full/empty barrier per ring slot) with 128 / 176-key tiles and 2 / 3 stages; 6-9 d64.  (As run
on the H200, a cfg between 2 and 3 timed round 1's FA3-style port with fast math: one mbarrier per
K/V ring, 427-504 TFLOP/s; the port, docs/sweeps/attention_ws.py, is gone: git history has it.)
Build:
  .venv/bin/python -m build_tools build --src docs/sweeps/attention_r2.py --namespace sw --arch sm_90a \\
      --out .ab/attn/pack --cache /tmp/attncache -j 2
Run (cwd outside the repo): `TKREG_PACKS=pack DECODE=1 python3 docs/sweeps/attention_r2_run.py OUT.json`
(DECODE=1 adds the shipped paged decode's split-count sweep at batch 1).
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from kernels_src import attention as A  # noqa: E402
from kernels_src import attention_ws as W  # noqa: E402
from tkreg.spec import OpSpec, Scalar, Tensor, Variant  # noqa: E402

SHIP = dict(A.CONFIGS[128], dim=128, varlen=False, dtype="bfloat16", mask="pre")   # the kernel as it was
SHIP64 = dict(A.CONFIGS[64], dim=64, varlen=False, dtype="bfloat16", mask="pre")
# (kind, factory kwargs, pass configs): kind picks the factory (see `factory`)
CFGS = [
    ("ship", SHIP, {}),
    ("ship", SHIP, A.FAST_EXP),
    ("ship", dict(SHIP, mask="boundary"), A.FAST_EXP),
    ("ws", dict(dim=128, varlen=False, block_N=128, stages=2), W.PASS_CONFIGS),
    ("ws", dict(dim=128, varlen=False, block_N=176, stages=2), W.PASS_CONFIGS),
    ("ws", dict(dim=128, varlen=False, block_N=128, stages=3), W.PASS_CONFIGS),
    ("ship", SHIP64, {}),
    ("ship", dict(SHIP64, mask="boundary"), A.FAST_EXP),
    ("ws", dict(dim=64, varlen=False, block_N=128, stages=2), W.PASS_CONFIGS),
    ("ws", dict(dim=64, varlen=False, block_N=192, stages=2), W.PASS_CONFIGS),
]


def factory(kind: str, cfg: int, arch: str = "sm_90a", **kw):   # cfg: in the variant key (0 / 1 differ only in pass configs)
    return {"ship": A.attention_kernel, "ws": W.attention_ws_kernel}[kind](**kw)


def sweep_spec(cfgs) -> OpSpec:
    """`sw.flash_attention`: the shipped op's signature (bf16 only) plus the int `cfg` scalar,
    variant i = cfgs[i]."""
    spec = A.SPECS[0]
    q = spec.tensors[0]
    bf16_only = (Tensor(q.name, q.shape, dtypes=("bfloat16",), strides=q.strides),) + spec.tensors[1:]
    return OpSpec(name="sw.flash_attention", doc=spec.doc, tensors=bf16_only,
                  scalars=spec.scalars + (Scalar("cfg", "int32", 0),), factory=factory,
                  variants=tuple(Variant(dict(kw, kind=k, cfg=i), rule=f"cfg == {i}", pass_configs=pc)
                                 for i, (k, kw, pc) in enumerate(cfgs)),
                  archs=("sm_90a",), reference=spec.reference)


SPECS = (sweep_spec(CFGS),)
