"""mHC family (DeepSeek-V4's manifold-constrained hyper-connections).

Semantics are those of DeepSeek's TileKernels (`tile_kernels/torch/mhc.py`), written out in
tkreg.reference.mhc.  m = mhc_mult (hyper-connection width), H = hidden, T = tokens (run time).

Modules: rows.py (expand_to_mhc, mhc_pre_apply_mix, mhc_post), small.py (mhc_pre_split_mixes,
sinkhorn_normalize, mhc_head_compute_mix), normfn.py (mhc_pre_norm_fn), big_fuse.py
(mhc_pre_big_fuse), rows_backward.py (mhc_pre_apply_mix_backward, mhc_post_backward,
expand_to_mhc_backward),
small_backward.py (sinkhorn_normalize_backward, mhc_pre_split_mixes_backward), normfn_backward.py
(mhc_pre_norm_fn_backward).
Tuning: docs/mhc-tuning.md.
"""
from .big_fuse import SPECS as _BIG_FUSE
from .normfn import SPECS as _NORMFN
from .normfn_backward import SPECS as _NORMFN_BACKWARD
from .rows import SPECS as _ROWS
from .rows_backward import SPECS as _ROWS_BACKWARD
from .small import SPECS as _SMALL
from .small_backward import SPECS as _SMALL_BACKWARD

SPECS = _ROWS + _SMALL + _NORMFN + _BIG_FUSE + _ROWS_BACKWARD + _SMALL_BACKWARD + _NORMFN_BACKWARD
